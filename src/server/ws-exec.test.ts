/**
 * WebSocket exec against a real server and engine, with the `ws` client: channel framing,
 * stdin half-close, stderr, exit codes, TTY resize, the exec frame, backpressure with a slow
 * reader on 50 MB, and graceful shutdown telling open streams why they close. The exec cases run
 * on a runc box and on a gVisor box (`ociRuntime: runsc`).
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import pino from 'pino';
import WebSocket from 'ws';
import { testEnv } from '../testing/env.js';
import { waitFor } from '../testing/wait.js';
import { CHANNEL } from './ws-exec.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

let t: TestServer;
let box: string;
/** A box on the gVisor pool (`ociRuntime: runsc`): the WebSocket exec cases run on it too. */
let gvisorBox: string;

before(async () => {
  t = await startTestServer('ws', {
    config: {
      pools: [
        { name: 'local', addr: testEnv.engineAddr },
        { name: 'gvisor', addr: testEnv.engineAddr, ociRuntime: testEnv.gvisorRuntime },
      ],
    },
  });
  const r = await t.call('POST', '/v1/boxes', { body: { image: IMAGE } });
  assert.equal(r.status, 201, r.text);
  box = r.json.id;
  const g = await t.call('POST', '/v1/boxes', { body: { image: IMAGE, pool: 'gvisor' } });
  assert.equal(g.status, 201, g.text);
  gvisorBox = g.json.id;
});
after(async () => {
  await t.dispose();
});

interface Session {
  ws: WebSocket;
  stdout: Buffer[];
  stderr: Buffer[];
  controls: Array<Record<string, unknown>>;
  closed: Promise<{ code: number }>;
  send(channel: number, data?: string | Buffer): void;
  text(which: 'stdout' | 'stderr'): string;
}

function open(server: TestServer, id: string, query: string, opts: { onMessage?: (data: Buffer, ws: WebSocket) => void } = {}): Promise<Session> {
  const wsUrl = server.url.replace(/^http/, 'ws') + `/v1/boxes/${id}/exec/ws${query}`;
  const ws = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${server.admin}` } });
  const s: Session = {
    ws,
    stdout: [],
    stderr: [],
    controls: [],
    closed: new Promise((resolve) => ws.once('close', (code) => resolve({ code }))),
    send(channel, data = Buffer.alloc(0)) {
      ws.send(Buffer.concat([Buffer.from([channel]), Buffer.from(data)]));
    },
    text(which) {
      return Buffer.concat(s[which]).toString();
    },
  };
  ws.on('message', (data: Buffer) => {
    if (data[0] === CHANNEL.stdout) s.stdout.push(data.subarray(1));
    else if (data[0] === CHANNEL.stderr) s.stderr.push(data.subarray(1));
    else if (data[0] === CHANNEL.control) s.controls.push(JSON.parse(data.subarray(1).toString()));
    opts.onMessage?.(data, ws);
  });
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(s));
    ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    ws.once('error', reject);
  });
}

const q = (cmd: string[], extra = '') => '?' + cmd.map((c) => `cmd=${encodeURIComponent(c)}`).join('&') + extra;

for (const runtime of ['runc', 'gVisor'] as const)
  describe(`WebSocket exec, on ${runtime}`, () => {
    let target = '';
    before(() => {
      target = runtime === 'runc' ? box : gvisorBox;
    });

    test('stdin with half-close: cat sees EOF, its output still arrives, exit 0', async () => {
      const s = await open(t, target, q(['sh', '-c', 'cat; echo done']));
      s.send(CHANNEL.stdin, 'hello ');
      s.send(CHANNEL.stdin, 'world\n');
      s.send(CHANNEL.stdinEof);
      const { code } = await s.closed;
      assert.equal(code, 1000);
      assert.equal(s.text('stdout'), 'hello world\ndone\n');
      assert.deepEqual(s.controls, [{ exit: 0 }]);
    });

    test('stderr on its own channel; the exit code in a control frame', async () => {
      const s = await open(t, target, q(['sh', '-c', 'echo out; echo err >&2; exit 5']));
      await s.closed;
      assert.equal(s.text('stdout'), 'out\n');
      assert.equal(s.text('stderr'), 'err\n');
      assert.deepEqual(s.controls, [{ exit: 5 }]);
    });

    test('the command in a first control frame, with env and workDir', async () => {
      const s = await open(t, target, '');
      s.send(CHANNEL.control, JSON.stringify({ exec: { cmd: ['sh', '-c', 'echo $A $(pwd)'], env: { A: 'b' }, workDir: '/tmp' } }));
      await s.closed;
      assert.equal(s.text('stdout'), 'b /tmp\n');
      assert.deepEqual(s.controls, [{ exit: 0 }]);
    });

    test('TTY: a terminal of the asked size, resized by a control frame', async () => {
      // Each line typed prints the size again, until q: the resize is asked for until it shows.
      const script = 'stty size; while read x && [ "$x" != q ]; do stty size; done';
      const s = await open(t, target, q(['sh', '-c', script], '&tty=true&cols=80&rows=24'));
      await waitFor(() => s.text('stdout').includes('24 80'), { what: 'the first size' });
      s.send(CHANNEL.control, JSON.stringify({ resize: { cols: 100, rows: 40 } }));
      await waitFor(
        () => {
          if (s.text('stdout').includes('40 100')) return true;
          s.send(CHANNEL.stdin, 'go\r');
          return false;
        },
        { what: 'the new size', intervalMs: 100 },
      );
      s.send(CHANNEL.stdin, 'q\r');
      await s.closed;
      assert.deepEqual(s.controls.at(-1), { exit: 0 });
    });

    test('bad requests: HTTP errors before the upgrade, bad frames answered with an error control frame', async () => {
      await assert.rejects(open(t, 'sb-nope', q(['true'])), /HTTP 404/);
      await assert.rejects(open(t, target, q(['true'], '&timeoutMs=-1')), /HTTP 400/);
      const ws = new WebSocket(t.url.replace(/^http/, 'ws') + `/v1/boxes/${target}/exec/ws${q(['true'])}`);
      await assert.rejects(
        new Promise((resolve, reject) => (ws.once('open', resolve), ws.once('unexpected-response', (_r, res) => reject(new Error(`HTTP ${res.statusCode}`))))),
        /HTTP 401/,
      );
      const s = await open(t, target, '');
      s.send(CHANNEL.control, JSON.stringify({ exec: { cmd: [] } }));
      const { code } = await s.closed;
      assert.equal(code, 1008);
      assert.equal((s.controls[0] as { error: { code: string } }).error.code, 'invalid_argument');
    });

    test('backpressure: 50 MB through a slow reader; the process is slowed, memory stays flat', async () => {
      const total = 50 * 1024 * 1024;
      const rate = 8 * 1024 * 1024; // bytes per second the reader accepts
      let received = 0;
      let peak = 0;
      let midway: Promise<string> | undefined;
      let resumeTimer: NodeJS.Timeout | undefined;
      // Live memory, not garbage: a full GC before each sample (exposed at run time).
      v8.setFlagsFromString('--expose-gc');
      const gc = vm.runInNewContext('gc') as () => void;
      gc();
      const base = process.memoryUsage();
      const baseline = base.heapUsed + base.arrayBuffers;
      const sampler = setInterval(() => {
        gc();
        const m = process.memoryUsage();
        peak = Math.max(peak, m.heapUsed + m.arrayBuffers - baseline);
      }, 100);
      const started = performance.now();
      const s = await open(t, target, q(['sh', '-c', `rm -f /tmp/bp-done; head -c ${total} /dev/zero; touch /tmp/bp-done`]), {
        onMessage: (data, ws) => {
          if (data[0] !== CHANNEL.stdout) return;
          received += data.length - 1;
          if (midway === undefined && received >= total / 2) {
            midway = t
              .call('POST', `/v1/boxes/${target}/exec`, { body: { cmd: ['sh', '-c', 'test -e /tmp/bp-done && echo done || echo running'] } })
              .then((r) => r.json.stdout.trim());
          }
          const ahead = received / rate - (performance.now() - started) / 1000;
          if (ahead > 0) {
            ws.pause();
            // One timer, for the latest message: an older, shorter one would resume the socket
            // early, and the reader would run ahead of its rate (the test then took ~2 s, not 6).
            clearTimeout(resumeTimer);
            resumeTimer = setTimeout(() => ws.resume(), ahead * 1000);
          }
        },
      });
      s.stdout.length = 0; // do not keep the bytes
      const origPush = s.stdout.push.bind(s.stdout);
      s.stdout.push = () => 0;
      void origPush;
      await s.closed;
      clearInterval(sampler);
      const elapsed = (performance.now() - started) / 1000;
      assert.equal(received, total);
      assert.deepEqual(s.controls, [{ exit: 0 }]);
      assert.equal(await midway, 'running', 'halfway through the reading, the process is still writing: the reader slowed it');
      assert.ok(elapsed > (0.8 * total) / rate, `the reader set the pace (${elapsed.toFixed(1)} s for ${total / rate} s at its rate)`);
      assert.ok(peak < 24 * 1024 * 1024, `memory stayed flat: peak live growth ${(peak / 1048576).toFixed(1)} MiB for 50 MiB`);
      console.log(
        `# ws backpressure: 50 MiB in ${elapsed.toFixed(1)} s, peak live heap+buffers growth (server and client in this process) ${(peak / 1048576).toFixed(1)} MiB`,
      );
    });

    test('a client that goes away kills the process inside the box', async () => {
      const s = await open(t, target, q(['sh', '-c', 'echo up; exec sleep 301']));
      await waitFor(() => s.text('stdout').includes('up'), { what: 'the command to start' });
      s.ws.terminate();
      await waitFor(
        async () => {
          const ps = await t.call('POST', `/v1/boxes/${target}/exec`, { body: { cmd: ['sh', '-c', 'ps | grep -c "[s]leep 301" || true'] } });
          return ps.json.stdout.trim() === '0';
        },
        { what: 'the process to be killed', intervalMs: 100 },
      );
    });
  });

describe('graceful shutdown', () => {
  test('in-flight streams get the grace period, then a control frame saying why; boxes keep running', async () => {
    // A grace period far longer than the quick stream needs, however loaded the machine.
    const graceMs = 5000;
    const s2 = await startTestServer('shutdown', { serve: { shutdownGraceMs: graceMs } });
    try {
      const r = await s2.call('POST', '/v1/boxes', { body: { image: IMAGE } });
      const quick = await open(s2, r.json.id, q(['sh', '-c', 'sleep 0.2; echo quick']));
      const slow = await open(s2, r.json.id, q(['sleep', '3600']));
      const t0 = performance.now();
      await s2.server.close();
      const waited = performance.now() - t0;
      assert.equal((await quick.closed).code, 1000);
      assert.equal(quick.text('stdout'), 'quick\n', 'a stream that ends within the grace period ends normally');
      assert.equal((await slow.closed).code, 1001);
      const err = slow.controls[0] as { error: { code: string; message: string } };
      assert.equal(err.error.code, 'not_available');
      assert.match(err.error.message, /shutting down/);
      assert.ok(waited >= graceMs - 50, `waited the grace period (${Math.round(waited)} ms)`);
      const boxes = await s2.manager.list();
      assert.equal((await boxes[0]!.info()).status, 'running', 'the box keeps running');
    } finally {
      await s2.dispose();
    }
  });
});

describe('browser-style auth: no Authorization header', () => {
  /** What a browser's `new WebSocket(url, protocols)` sends: protocols, no Authorization. */
  function browserLike(url: string, protocols: string[]): Promise<{ status?: number; protocol?: string; stdout: string; controls: unknown[]; error?: string }> {
    const ws = new WebSocket(url, protocols);
    let stdout = '';
    const controls: unknown[] = [];
    return new Promise((resolve) => {
      ws.once('unexpected-response', (_req, res) => {
        resolve({ status: res.statusCode ?? 0, stdout, controls });
        res.resume();
        ws.terminate();
      });
      ws.once('error', (err) => resolve({ stdout, controls, error: err.message }));
      ws.on('message', (data: Buffer) => {
        if (data[0] === CHANNEL.stdout) stdout += data.subarray(1).toString();
        else if (data[0] === CHANNEL.control) controls.push(JSON.parse(data.subarray(1).toString()));
      });
      ws.once('close', () => resolve({ protocol: ws.protocol, stdout, controls }));
    });
  }

  test('the key as subprotocol sbx.bearer.<key> beside sbx.v1: authenticated and scoped; only sbx.v1 comes back; never logged', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        lines.push(chunk.toString());
        cb();
      },
    });
    // trace: the most a misconfigured deployment could log.
    const s = await startTestServer('wsproto', { logger: pino({ level: 'trace' }, sink) });
    try {
      const user = (await s.call('POST', '/v1/keys', { body: { name: 'browser', role: 'user' } })).json.key as string;
      const other = (await s.call('POST', '/v1/keys', { body: { name: 'other', role: 'user' } })).json.key as string;
      const mine = (await s.call('POST', '/v1/boxes', { key: user, body: { image: IMAGE } })).json.id as string;
      const base = s.url.replace(/^http/, 'ws');
      const echo = q(['sh', '-c', 'echo hi from $(hostname)']);

      const ok = await browserLike(`${base}/v1/boxes/${mine}/exec/ws${echo}`, ['sbx.v1', `sbx.bearer.${user}`]);
      assert.equal(ok.protocol, 'sbx.v1', 'the server selects sbx.v1, never the credential');
      assert.match(ok.stdout, /^hi from /);
      assert.deepEqual(ok.controls, [{ exit: 0 }]);

      const bad = await browserLike(`${base}/v1/boxes/${mine}/exec/ws${echo}`, ['sbx.v1', `sbx.bearer.${user.slice(0, -3)}AAA`]);
      assert.equal(bad.status, 401, 'a wrong key is refused before the upgrade');
      const none = await browserLike(`${base}/v1/boxes/${mine}/exec/ws${echo}`, ['sbx.v1']);
      assert.equal(none.status, 401);
      const others = await browserLike(`${base}/v1/boxes/${mine}/exec/ws${echo}`, ['sbx.v1', `sbx.bearer.${other}`]);
      assert.equal(others.status, 404, 'another owner’s box answers 404, as over Authorization');
      const noV1 = await browserLike(`${base}/v1/boxes/${mine}/exec/ws${echo}`, [`sbx.bearer.${user}`]);
      assert.match(noV1.error ?? '', /subprotocol/i, 'without sbx.v1 on offer there is nothing to select and the client fails');

      // Only the WebSocket exec takes it: a plain request with the header is not authenticated.
      const plain = await s.call('GET', '/v1/boxes', { key: null, headers: { 'sec-websocket-protocol': `sbx.v1, sbx.bearer.${user}` } });
      assert.equal(plain.status, 401);

      const everything = lines.join('');
      assert.ok(lines.length > 5 && everything.includes('/v1/boxes/:id/exec/ws'), 'the ws requests were logged');
      for (const secret of [user, other, s.admin, user.slice(0, -3)]) assert.ok(!everything.includes(secret), 'a key reached the log');
      assert.ok(!/sbx\.bearer|sec-websocket-protocol/i.test(everything), 'no protocol header in the log');
    } finally {
      await s.dispose();
    }
  });
});
