/**
 * process.Process/Start on the wire, against a real sbx server and engine: the plain request
 * (served by start-fast.ts) and a gzip-compressed one (served by @connectrpc's handler) answer
 * the same Connect stream, in JSON and in binary, and a bad request ends the stream with its code.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { fromBinary, toBinary, create } from '@bufbuild/protobuf';
import { testEnv } from '../../../testing/env.js';
import { waitFor, within } from '../../../testing/wait.js';
import { keyIdOf, startTestServer, type TestServer } from '../../../testing/server.js';
import { envdAccessToken } from '../access-token.js';
import { StartRequestSchema, StartResponseSchema } from './gen/process/process_pb.js';
import { ENVD_PREFIX } from './routes.js';

let srv: TestServer;
let boxId: string;
let token: string;

before(async () => {
  srv = await startTestServer('envdstart');
  boxId = (await srv.manager.create({ image: testEnv.e2bImage })).id;
  token = await envdAccessToken(srv.manager, boxId, keyIdOf(srv.admin));
});

after(async () => {
  await srv.dispose();
});

interface Answer {
  status: number;
  contentType: unknown;
  /** The envelopes of the body: flags and data. */
  envelopes: Array<{ flags: number; data: Buffer }>;
}

/** `gate`: the response is not read until it settles (a client that stopped reading). */
function start(body: Buffer, headers: Record<string, string>, gate?: Promise<void>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const u = new URL(srv.url);
    const req = httpRequest(
      {
        host: u.hostname,
        port: u.port,
        method: 'POST',
        path: `${ENVD_PREFIX}/process.Process/Start`,
        headers: { 'e2b-sandbox-id': boxId, 'x-access-token': token, 'content-length': String(body.length), ...headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        void Promise.resolve(gate).then(() => res.on('data', (c: Buffer) => chunks.push(c)));
        res.on('end', () => {
          const all = Buffer.concat(chunks);
          const envelopes: Answer['envelopes'] = [];
          for (let at = 0; at < all.length;) {
            const length = all.readUInt32BE(at + 1);
            envelopes.push({ flags: all[at]!, data: all.subarray(at + 5, at + 5 + length) });
            at += 5 + length;
          }
          resolve({ status: res.statusCode ?? 0, contentType: res.headers['content-type'], envelopes });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

function envelope(flags: number, data: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(data.length, 1);
  return Buffer.concat([head, data]);
}

const ECHO = { process: { cmd: '/bin/sh', args: ['-c', 'echo hi; echo oops >&2; exit 3'] } };

/** The events of a JSON answer, with the pid (which differs per run) left out. */
function jsonEvents(a: Answer): unknown[] {
  return a.envelopes.map((e) => {
    const msg = JSON.parse(e.data.toString()) as { event?: { start?: { pid: number } } };
    if (msg.event?.start) return { event: { start: { pid: typeof msg.event.start.pid } } };
    return { flags: e.flags, msg };
  });
}

/** stdout and stderr, and the end, of the events (their order between streams is the process's). */
function summary(events: unknown[]): unknown {
  const out: Record<string, string> = { stdout: '', stderr: '' };
  let end: unknown;
  let endStream: unknown;
  for (const e of events as Array<{ flags?: number; msg?: { event?: { data?: Record<string, string>; end?: unknown } } }>) {
    if (e.flags === 2) endStream = e.msg;
    else if (e.msg?.event?.data) for (const [k, v] of Object.entries(e.msg.event.data)) out[k] += Buffer.from(v, 'base64').toString();
    else if (e.msg?.event?.end) end = e.msg.event.end;
  }
  return { first: events[0], ...out, end, endStream };
}

describe('process.Process/Start on the wire', () => {
  test('a plain JSON request and a gzip-compressed one answer the same stream', async () => {
    const data = Buffer.from(JSON.stringify(ECHO));
    const plain = await start(envelope(0, data), { 'content-type': 'application/connect+json' });
    const gzipped = await start(envelope(1, gzipSync(data)), { 'content-type': 'application/connect+json', 'connect-content-encoding': 'gzip' });
    assert.equal(plain.status, 200);
    assert.equal(plain.contentType, 'application/connect+json');
    const want = {
      first: { event: { start: { pid: 'number' } } },
      stdout: 'hi\n',
      stderr: 'oops\n',
      end: { exitCode: 3, exited: true, status: 'exit status 3' },
      endStream: {},
    };
    assert.deepEqual(summary(jsonEvents(plain)), want);
    assert.deepEqual(summary(jsonEvents(gzipped)), want);
  });

  test('a binary request is answered in binary', async () => {
    const body = envelope(0, Buffer.from(toBinary(StartRequestSchema, create(StartRequestSchema, ECHO))));
    const a = await start(body, { 'content-type': 'application/connect+proto' });
    assert.equal(a.contentType, 'application/connect+proto');
    const events = a.envelopes.filter((e) => e.flags === 0).map((e) => fromBinary(StartResponseSchema, e.data).event?.event.case);
    assert.equal(events[0], 'start');
    assert.equal(events.at(-1), 'end');
    assert.equal(a.envelopes.at(-1)!.flags, 2);
  });

  test("a client that stops reading holds the command's output, and gets all of it and the end once it reads again", async () => {
    // 64 MiB, far more than the sockets and the server's queues hold: the writer must wait for the client.
    const size = 64 * 1024 * 1024;
    const cmd = `echo $$ > /tmp/writer.pid; head -c ${size} /dev/zero; touch /tmp/writer.done`;
    const box = await srv.manager.get(boxId);
    await box.exec(['rm', '-f', '/tmp/writer.pid', '/tmp/writer.done']);
    /** The writer's bytes written so far, or 'done'. */
    const progress = async (): Promise<number | 'done' | undefined> => {
      const r = await box.exec([
        'sh',
        '-c',
        'if [ -e /tmp/writer.done ]; then echo done; elif [ -e /tmp/writer.pid ]; then grep ^wchar /proc/$(cat /tmp/writer.pid)/io; fi',
      ]);
      const out = r.stdout.trim();
      if (out === 'done') return 'done';
      const m = /^wchar: (\d+)$/.exec(out);
      return m ? Number(m[1]) : undefined;
    };
    let stalled!: () => void;
    const gate = new Promise<void>((resolve) => (stalled = resolve));
    const answer = start(
      envelope(0, Buffer.from(toBinary(StartRequestSchema, create(StartRequestSchema, { process: { cmd: '/bin/sh', args: ['-c', cmd] } })))),
      {
        'content-type': 'application/connect+proto',
      },
      gate,
    );
    // The writer stops short of its end while the client reads nothing: two reads of its count agree.
    let last: number | 'done' | undefined;
    const held = await waitFor(
      async () => {
        const now = await progress();
        const same = typeof now === 'number' && now === last;
        last = now;
        return now === 'done' ? 'done' : same ? now : undefined;
      },
      { what: 'the writer to wait for the client', intervalMs: 250 },
    );
    if (held === 'done') assert.fail('the command wrote all of its output to a client that read none of it');
    assert.ok(held < size);
    stalled();
    const a = await within(answer, 'the rest of the output and the end, once the client reads');
    let stdout = 0;
    const cases: string[] = [];
    for (const e of a.envelopes.filter((x) => x.flags === 0)) {
      const ev = fromBinary(StartResponseSchema, e.data).event?.event;
      if (ev?.case === 'data' && ev.value.output.case === 'stdout') stdout += ev.value.output.value.length;
      else if (ev) cases.push(ev.case ?? '');
    }
    assert.equal(stdout, size);
    assert.deepEqual([cases[0], cases.at(-1)], ['start', 'end']);
    assert.equal(await progress(), 'done');
  });

  test('a Connect-Timeout-Ms longer than a timer holds is invalid_argument on both paths, and nothing runs; the longest one taken runs the command', async () => {
    // 30 days: Node would fire its timer after 1 ms, ending the call deadline_exceeded and killing the process at once.
    const data = Buffer.from(JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', 'touch /tmp/ran-too-long'] } }));
    const headers = { 'content-type': 'application/connect+json', 'connect-timeout-ms': '2592000000' };
    for (const a of [await start(envelope(0, data), headers), await start(envelope(1, gzipSync(data)), { ...headers, 'connect-content-encoding': 'gzip' })]) {
      assert.equal(a.status, 200);
      assert.deepEqual(
        a.envelopes.map((e) => e.flags),
        [2],
      );
      const end = JSON.parse(a.envelopes[0]!.data.toString()) as { error: { code: string; message: string } };
      assert.equal(end.error.code, 'invalid_argument');
      assert.match(end.error.message, /2592000000ms must be <= 2147483647/);
    }
    const box = await srv.manager.get(boxId);
    assert.equal((await box.exec(['sh', '-c', '[ -e /tmp/ran-too-long ] && echo ran || echo not'])).stdout, 'not\n');
    const longest = await start(envelope(0, Buffer.from(JSON.stringify(ECHO))), {
      'content-type': 'application/connect+json',
      'connect-timeout-ms': '2147483647',
    });
    assert.deepEqual(summary(jsonEvents(longest)), {
      first: { event: { start: { pid: 'number' } } },
      stdout: 'hi\n',
      stderr: 'oops\n',
      end: { exitCode: 3, exited: true, status: 'exit status 3' },
      endStream: {},
    });
  });

  test('a request without cmd ends the stream invalid_argument (status 200, as Connect streams report errors)', async () => {
    const a = await start(envelope(0, Buffer.from(JSON.stringify({ process: { args: [] } }))), { 'content-type': 'application/connect+json' });
    assert.equal(a.status, 200);
    assert.equal(a.envelopes.length, 1);
    assert.equal(a.envelopes[0]!.flags, 2);
    const end = JSON.parse(a.envelopes[0]!.data.toString()) as { error: { code: string; message: string } };
    assert.equal(end.error.code, 'invalid_argument');
    assert.match(end.error.message, /cmd is required/);
  });
});
