/**
 * Buffered exec output on a real server and engine: the server-wide budget (refused up front
 * with limit_exceeded, given back on every path: error, timeout, a client that leaves during
 * the exec or while the answer is written), output JSON cannot carry as one string (100 MB of
 * NUL bytes, six characters each once escaped) read back whole by the SDK, and the per-exec cap.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import type { ClientRequest, IncomingMessage } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { ExecFramesReader } from '../client/exec-frames.js';
import { Sbx } from '../client/index.js';
import { testEnv } from '../testing/env.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

const MiB = 1024 * 1024;
/** The default cap: not reserved up front, so the probe below never holds the budget itself. */
const BUDGET = 64 * MiB;

let t: TestServer;
let box: string;

before(async () => {
  t = await startTestServer('execout', {
    serve: { execOutputBudgetBytes: BUDGET },
    config: {
      pools: [
        { name: 'local', addr: testEnv.engineAddr },
        { name: 'engine', addr: testEnv.engineAddr, agent: false },
      ],
    },
  });
  const r = await t.call('POST', '/v1/boxes', { body: { image: IMAGE } });
  assert.equal(r.status, 201, r.text);
  box = r.json.id;
});

after(async () => {
  await t.dispose();
});

const exec = (body: Record<string, unknown>) => t.call('POST', `/v1/boxes/${box}/exec`, { body });

/** An exec whose cap is the whole budget: admitted only while no other exec holds output; it takes none itself. */
const whole = () => exec({ cmd: ['true'], maxOutputBytes: BUDGET });

/** Calls `probe` until it says yes; gives up after a minute (the event it waits for takes milliseconds). */
async function until(what: string, probe: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!(await probe())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting until ${what}`);
  }
}

/** Waits until the budget is held by someone else (a whole-budget exec is refused), while `running` has not settled. */
async function untilHeld(running: Promise<unknown>): Promise<void> {
  let settled = false;
  void running.then(
    () => (settled = true),
    () => (settled = true),
  );
  await until('the running exec holds output', async () => {
    const r = await whole();
    if (r.status === 429) {
      assert.equal(r.json.error.code, 'limit_exceeded');
      return true;
    }
    assert.equal(r.status, 200, r.text);
    assert.ok(!settled, 'the exec ended while the budget never looked held');
    return false;
  });
}

/** The answer is written before the server lets go of its output: a whole-budget exec may have to wait for that. */
const untilFree = () => until('the budget is free again', async () => (await whole()).status === 200);

/** A raw POST of an exec, so the test can leave at any moment. */
function rawExec(
  body: Record<string, unknown>,
  server = t,
  id = box,
  headers: Record<string, string> = {},
): { req: ClientRequest; response: Promise<IncomingMessage> } {
  const u = new URL(server.url);
  const data = JSON.stringify(body);
  const req = httpRequest({
    host: u.hostname,
    port: u.port,
    method: 'POST',
    path: `/v1/boxes/${id}/exec`,
    headers: { authorization: `Bearer ${server.admin}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(data)), ...headers },
  });
  const response = new Promise<IncomingMessage>((resolve, reject) => {
    req.on('response', resolve);
    req.on('error', reject);
  });
  req.end(data);
  return { req, response };
}

/** Prints `bytes` NULs, then waits to be killed. */
const printThenHang = (bytes: number) => ['sh', '-c', `head -c ${bytes} /dev/zero; exec sleep 600`];

describe('the server-wide budget for buffered output', () => {
  test('an exec whose cap is over the budget is refused up front with limit_exceeded (429); a small one still runs', async () => {
    const over = await exec({ cmd: ['sh', '-c', 'echo ran > /tmp/over-budget'], maxOutputBytes: BUDGET + 1 });
    assert.equal(over.status, 429, over.text);
    assert.equal(over.json.error.code, 'limit_exceeded');
    assert.equal(over.json.error.details.reason, 'exec_output_budget');
    assert.equal(over.json.error.details.field, 'maxOutputBytes');
    assert.match(over.json.error.message, /lower maxOutputBytes, or use the streaming exec/);
    const small = await exec({ cmd: ['sh', '-c', 'cat /tmp/over-budget 2>/dev/null; echo small'] });
    assert.equal(small.status, 200, small.text);
    assert.equal(small.json.stdout, 'small\n', 'the refused exec never ran');
    const metrics = await t.call('GET', '/metrics', { key: null });
    assert.match(metrics.text, new RegExp(`^sbx_exec_output_bytes\\{kind="budget"\\} ${BUDGET}$`, 'm'));
  });

  test('an exec that fails gives its share back', async () => {
    // The engine's exec path (no agent) reads the engine's start failure from the output: the
    // exec takes output from the budget, then fails.
    const engineBox = await t.call('POST', '/v1/boxes', { body: { image: IMAGE, pool: 'engine' } });
    assert.equal(engineBox.status, 201, engineBox.text);
    const { req, response } = rawExec({ cmd: printThenHang(1 * MiB), maxOutputBytes: 4 * MiB });
    response.catch(() => undefined);
    try {
      await untilHeld(response);
      const failed = await t.call('POST', `/v1/boxes/${engineBox.json.id}/exec`, { body: { cmd: ['no-such-program-here'], maxOutputBytes: 4 * MiB } });
      assert.equal(failed.status, 404, failed.text);
      // While the first exec holds output, an exec asking for more than is free is refused.
      const refused = await exec({ cmd: ['true'], maxOutputBytes: BUDGET - 1024 });
      assert.equal(refused.status, 429, refused.text);
    } finally {
      req.destroy();
    }
    await untilFree();
  });

  test('an exec that times out gives its share back', async () => {
    const timed = exec({ cmd: printThenHang(1 * MiB), maxOutputBytes: 4 * MiB, timeoutMs: 5_000 });
    await untilHeld(timed);
    const r = await timed;
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.timedOut, true);
    assert.equal(r.json.exitCode, 137);
    assert.equal(r.json.stdout.length, MiB);
    await untilFree();
  });

  test('a client that leaves during the exec gives its share back (the exec is killed)', async () => {
    const { req, response } = rawExec({ cmd: printThenHang(1 * MiB), maxOutputBytes: 4 * MiB });
    response.catch(() => undefined);
    try {
      await untilHeld(response);
    } finally {
      req.destroy();
    }
    await untilFree();
  });

  test('a client that leaves while the answer is written gives its share back', async () => {
    // 16 MiB of NULs is 96 MiB of JSON: far more than the socket buffers take, so the answer
    // waits for a reader that never reads.
    const { response } = rawExec({ cmd: ['head', '-c', String(16 * MiB), '/dev/zero'], maxOutputBytes: 16 * MiB });
    const res = await response;
    assert.equal(res.statusCode, 200);
    res.pause();
    await untilHeld(new Promise(() => undefined));
    res.destroy();
    await untilFree();
  });
});

describe('output JSON cannot carry as one string', () => {
  let big: TestServer;
  before(async () => {
    big = await startTestServer('execout-big');
  });
  after(async () => {
    await big.dispose();
  });

  test('100 MB of NUL bytes: the full output through the SDK and on the wire, never a 500; the server stays up', async () => {
    const size = 100_000_000;
    const sdk = new Sbx({ url: big.url, apiKey: big.admin });
    const remote = await sdk.create({ image: IMAGE });
    const r = await remote.exec(['head', '-c', String(size), '/dev/zero'], { maxOutputBytes: size });
    assert.equal(r.exitCode, 0);
    assert.equal(r.truncated, false);
    assert.equal(r.stdout.length, size);
    assert.ok(!/[^\0]/.test(r.stdout), 'only NULs');
    assert.equal(r.stderr, '');

    // On the wire: six bytes per NUL, counted as it streams past (never held).
    const { response } = rawExec({ cmd: ['head', '-c', String(size), '/dev/zero'], maxOutputBytes: size }, big, remote.id);
    const res = await response;
    assert.equal(res.statusCode, 200);
    let bytes = 0;
    let first = '';
    let tail = '';
    for await (const chunk of res as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      if (first.length < 100) first += chunk.toString('latin1', 0, 100);
      tail = (tail + chunk.toString('latin1', Math.max(0, chunk.length - 200))).slice(-200);
    }
    const head = '{"exitCode":0,"stdout":"';
    assert.ok(first.startsWith(`${head}\\u0000`), first.slice(0, 40));
    const end = tail.slice(tail.lastIndexOf('\\u0000') + 6);
    assert.match(end, /^","stderr":"","truncated":false,"timedOut":false,"durationMs":\d+\}$/);
    assert.equal(bytes, head.length + size * 6 + end.length);
    assert.equal((await big.call('GET', '/healthz', { key: null })).status, 200);
  });
});

describe('output as bytes', () => {
  /** 3 MiB of random bytes (invalid UTF-8, control characters, quotes, backslashes), then a tail of each kind. */
  const RAND = '/tmp/exec-json-rand';
  before(async () => {
    const r = await exec({
      cmd: ['sh', '-c', `head -c ${3 * MiB} /dev/urandom > ${RAND}; printf 'a\\000b"c\\\\d\\001\\n\\303\\251\\360\\237\\230\\200' >> ${RAND}`],
    });
    assert.equal(r.status, 200, r.text);
  });

  test('random bytes through the HTTP exec and the SDK are the text the library gives, on stdout and stderr', async () => {
    const cmd = ['sh', '-c', `cat ${RAND}; cat ${RAND} >&2`];
    const lib = await (await t.manager.get(box)).exec(cmd, { maxOutputBytes: 4 * MiB });
    assert.equal(lib.truncated, false);
    assert.ok(lib.stdout.endsWith('a\0b"c\\d\u0001\né😀'), JSON.stringify(lib.stdout.slice(-20)));
    const http = await exec({ cmd, maxOutputBytes: 4 * MiB });
    assert.equal(http.status, 200);
    assert.equal(http.json.stdout, lib.stdout);
    assert.equal(http.json.stderr, lib.stderr);
    assert.equal(http.json.truncated, false);
    // The SDK asks for frames.
    const sdk = await (await new Sbx({ url: t.url, apiKey: t.admin }).get(box)).exec(cmd, { maxOutputBytes: 4 * MiB });
    assert.equal(sdk.stdout, lib.stdout);
    assert.equal(sdk.stderr, lib.stderr);
    const res = await rawExec({ cmd, maxOutputBytes: 4 * MiB }, t, box, { accept: 'application/vnd.sbx.exec-frames' }).response;
    assert.equal(res.headers['content-type'], 'application/vnd.sbx.exec-frames');
    const reader = new ExecFramesReader();
    for await (const chunk of res as AsyncIterable<Buffer>) reader.write(chunk);
    const framed = reader.end();
    assert.equal(framed.stdout, lib.stdout);
    assert.equal(framed.stderr, lib.stderr);
    assert.deepEqual([framed.exitCode, framed.truncated, framed.timedOut], [0, false, false]);
  });

  test('cut at the cap: the same kept text as the library, truncated', async () => {
    for (const cap of [MiB + 1, 2 * MiB + 3]) {
      const cmd = ['cat', RAND];
      const lib = await (await t.manager.get(box)).exec(cmd, { maxOutputBytes: cap });
      const http = await exec({ cmd, maxOutputBytes: cap });
      assert.equal(http.status, 200);
      assert.equal(http.json.truncated, true);
      assert.equal(lib.truncated, true);
      assert.equal(http.json.stdout, lib.stdout, `cap ${cap}`);
      const sdk = await (await new Sbx({ url: t.url, apiKey: t.admin }).get(box)).exec(cmd, { maxOutputBytes: cap });
      assert.equal(sdk.stdout, lib.stdout, `frames, cap ${cap}`);
      assert.equal(sdk.truncated, true);
    }
  });

  test('a small answer is sent whole with a Content-Length, a large one streamed', async () => {
    const read = async (cmd: string[]) => {
      const res = await rawExec({ cmd }).response;
      let text = '';
      for await (const chunk of res as AsyncIterable<Buffer>) text += chunk.toString();
      return { res, json: JSON.parse(text) as { stdout: string } };
    };
    const small = await read(['echo', 'hi']);
    assert.equal(small.res.headers['content-length'], String(Buffer.byteLength(JSON.stringify(small.json))));
    assert.equal(small.json.stdout, 'hi\n');
    const large = await read(['head', '-c', String(MiB), '/dev/zero']);
    assert.equal(large.res.headers['content-length'], undefined);
    assert.equal(large.res.headers['transfer-encoding'], 'chunked');
    assert.equal(large.json.stdout, '\0'.repeat(MiB));
  });
});

describe('large caps', () => {
  test('a cap above 64 MiB is reserved whole while its exec runs: another large one is refused before the first printed a byte', async () => {
    const big = await startTestServer('execout-reserve');
    try {
      const b = await big.call('POST', '/v1/boxes', { body: { image: IMAGE } });
      assert.equal(b.status, 201, b.text);
      const second = () => big.call('POST', `/v1/boxes/${b.json.id}/exec`, { body: { cmd: ['true'], maxOutputBytes: 100_000_000 } });
      const { req, response } = rawExec({ cmd: ['sleep', '600'], maxOutputBytes: 200_000_000 }, big, b.json.id);
      response.catch(() => undefined);
      try {
        await until('the second large exec is refused', async () => {
          const r = await second();
          if (r.status === 200) return false;
          assert.equal(r.status, 429, r.text);
          assert.equal(r.json.error.details.reason, 'exec_output_budget');
          return true;
        });
      } finally {
        req.destroy();
      }
      await until('the reservation is given back', async () => (await second()).status === 200);
    } finally {
      await big.dispose();
    }
  });
});

describe('the per-exec cap', () => {
  test('output past maxOutputBytes is dropped and flagged; a character the cut splits is dropped; a cap over MAX_OUTPUT_BYTES (the longest string V8 makes) is refused', async () => {
    const cut = await exec({ cmd: ['sh', '-c', 'i=0; while [ $i -lt 1000 ]; do printf é; i=$((i+1)); done; echo done >&2'], maxOutputBytes: 1001 });
    assert.equal(cut.status, 200, cut.text);
    assert.equal(cut.json.stdout, 'é'.repeat(500));
    assert.equal(cut.json.stderr, 'done\n');
    assert.equal(cut.json.truncated, true);
    // 512 MiB: over MAX_OUTPUT_BYTES (2^29 - 24), under the 1 GiB it used to be.
    const tooBig = await exec({ cmd: ['true'], maxOutputBytes: 2 ** 29 });
    assert.equal(tooBig.status, 400, tooBig.text);
    assert.equal(tooBig.json.error.code, 'invalid_argument');
  });

  test('without maxOutputBytes, a server whose budget is under 64 MiB caps each exec at its budget', async () => {
    const small = await startTestServer('execout-small', { serve: { execOutputBudgetBytes: MiB } });
    try {
      const b = await small.call('POST', '/v1/boxes', { body: { image: IMAGE } });
      assert.equal(b.status, 201, b.text);
      const r = await small.call('POST', `/v1/boxes/${b.json.id}/exec`, { body: { cmd: ['head', '-c', String(3 * MiB), '/dev/zero'] } });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.stdout.length, MiB);
      assert.equal(r.json.truncated, true);
    } finally {
      await small.dispose();
    }
  });
});
