// The channel protocol, against frames built from its description (kubernetes
// staging/src/k8s.io/apimachinery/pkg/util/remotecommand and the KEP-4006 v5 close frame): no
// server is involved. That the API server speaks it as described is for the real-cluster tests.
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { test } from 'node:test';
import type { ChannelSocket } from './exec-channel.js';
import { CHANNEL, channelSession, closeFrame, execQuery, frame, parseStatus, resizeFrame } from './exec-channel.js';

/** The client side of a socket: records what the session sends, delivers what the test says the server sent. */
class Wire extends EventEmitter {
  sent: Buffer[] = [];
  paused = false;
  terminated = false;
  constructor(readonly protocol: string) {
    super();
  }
  send(data: Buffer, cb?: (err?: Error) => void) {
    this.sent.push(Buffer.from(data));
    queueMicrotask(() => cb?.());
  }
  pause() {
    this.paused = true;
  }
  resume() {
    this.paused = false;
  }
  close() {
    this.emit('close', 1000, Buffer.alloc(0));
  }
  terminate() {
    this.terminated = true;
    this.emit('close', 1006, Buffer.alloc(0));
  }
  server(channel: number, payload: string | Buffer = '') {
    this.emit('message', frame(channel, payload), true);
  }
}
const open = (protocol = 'v5.channel.k8s.io') => {
  const wire = new Wire(protocol);
  return { wire, s: channelSession(wire as unknown as ChannelSocket, 'exec in pod p') };
};
const text = async (r: NodeJS.ReadableStream) => {
  const parts: Buffer[] = [];
  for await (const c of r) parts.push(c as Buffer);
  return Buffer.concat(parts).toString();
};

test('frames: one channel byte, then the payload; close is [255, n]; resize is TerminalSize JSON', () => {
  assert.deepEqual([...frame(CHANNEL.stdin, 'hi')], [0, 0x68, 0x69]);
  assert.deepEqual([...closeFrame(CHANNEL.stdin)], [255, 0]);
  const r = resizeFrame({ cols: 120, rows: 40 });
  assert.equal(r[0], 4);
  assert.deepEqual(JSON.parse(r.subarray(1).toString()), { Width: 120, Height: 40 });
});

test('argv is one command= parameter per element, never joined into a shell string', () => {
  const argv = ['sh', '-c', 'echo "$1" $(id -u)', 'x', `it's; rm -rf / && `, ''];
  const q = new URLSearchParams(execQuery(argv, { container: 'main', stdin: true, tty: false }));
  assert.deepEqual(q.getAll('command'), argv);
  assert.equal(q.get('container'), 'main');
  assert.equal(q.get('stdin'), 'true');
  assert.equal(q.get('stderr'), 'true');
  // A terminal merges stderr: the API server refuses stderr=true with tty.
  const t = new URLSearchParams(execQuery(['sh'], { container: 'main', stdin: true, tty: true }));
  assert.equal(t.get('stderr'), 'false');
  assert.equal(t.get('tty'), 'true');
});

test('status: Success is 0, NonZeroExitCode carries the code, other failures their message', () => {
  assert.deepEqual(parseStatus('{"metadata":{},"status":"Success"}'), { exitCode: 0 });
  const nonZero = {
    metadata: {},
    status: 'Failure',
    message: 'command terminated with non-zero exit code: error executing command [sh -c exit 42], exit code 42',
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: '42' }] },
  };
  assert.deepEqual(parseStatus(JSON.stringify(nonZero)), { exitCode: 42 });
  const cannot = {
    status: 'Failure',
    message: 'failed to exec in container: exec: "/no/such": stat /no/such: no such file or directory',
    reason: 'InternalError',
  };
  assert.deepEqual(parseStatus(JSON.stringify(cannot)), { failure: cannot.message, reason: 'InternalError' });
  assert.equal((parseStatus('garbage') as { reason: string }).reason, 'Unknown');
});

test('output is split by channel and the end waits for the status and the close', async () => {
  const { wire, s } = open();
  const out = text(s.stdout);
  const err = text(s.stderr);
  wire.server(CHANNEL.stdout, 'out1\n');
  wire.server(CHANNEL.stderr, 'err1\n');
  wire.server(CHANNEL.stdout, 'out2\n');
  wire.emit('message', Buffer.from('a text message is not a frame'), false);
  wire.server(CHANNEL.status, JSON.stringify({ status: 'Failure', reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: '3' }] } }));
  wire.close();
  assert.deepEqual(await s.ended, { exitCode: 3 });
  assert.equal(await out, 'out1\nout2\n');
  assert.equal(await err, 'err1\n');
});

test('stdin: data frames on channel 0, then on v5 the close frame [255, 0] (a half-close; output still arrives)', async () => {
  const { wire, s } = open();
  const out = text(s.stdout);
  s.stdin.write('before\n');
  await new Promise<void>((resolve) => s.stdin.end(resolve));
  assert.deepEqual(
    wire.sent.map((b) => [...b]),
    [
      [0, ...Buffer.from('before\n')],
      [255, 0],
    ],
  );
  assert.equal(s.halfClose, true);
  wire.server(CHANNEL.stdout, 'after-eof\n');
  wire.server(CHANNEL.status, '{"status":"Success"}');
  wire.close();
  assert.deepEqual(await s.ended, { exitCode: 0 });
  assert.equal(await out, 'after-eof\n');
});

test('v4 has no half-close: no close frame is sent, and the session says so', async () => {
  const { wire, s } = open('v4.channel.k8s.io');
  await new Promise<void>((resolve) => s.stdin.end('x', resolve));
  assert.deepEqual(
    wire.sent.map((b) => [...b]),
    [[0, 0x78]],
  );
  assert.equal(s.halfClose, false);
});

test('large stdin goes in bounded frames, and a resize is sent on channel 4', async () => {
  const { wire, s } = open();
  const big = Buffer.alloc(100_000, 'z');
  await new Promise<void>((resolve) => s.stdin.write(big, () => resolve()));
  assert.ok(wire.sent.length >= 4);
  assert.ok(wire.sent.every((b) => b[0] === 0 && b.length <= 32 * 1024 + 1));
  assert.equal(
    wire.sent.reduce((n, b) => n + b.length - 1, 0),
    big.length,
  );
  await s.resize({ cols: 80, rows: 24 });
  assert.deepEqual(JSON.parse(wire.sent.at(-1)!.subarray(1).toString()), { Width: 80, Height: 24 });
});

test('a reader that does not read pauses the socket; reading resumes it', async () => {
  const { wire, s } = open();
  const chunk = Buffer.alloc(64 * 1024, 'a');
  for (let i = 0; i < 4; i++) wire.server(CHANNEL.stdout, chunk);
  assert.equal(wire.paused, true);
  s.stdout.resume();
  await new Promise((r) => setImmediate(r));
  assert.equal(wire.paused, false);
});

test('a connection lost before the status is runtime_unavailable, not an exit code', async () => {
  const { wire, s } = open();
  s.stdout.resume();
  s.stderr.resume();
  wire.server(CHANNEL.stdout, 'partial');
  wire.terminate();
  await assert.rejects(s.ended, (e: Error & { code?: string }) => e.code === 'runtime_unavailable');
});
