/** connectService against local servers (no engine): retries before the handshake, none after, errors, backpressure. */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { WebSocketServer } from 'ws';
import type WebSocket from 'ws';
import { SbxError } from '../errors.js';
import { within } from '../testing/wait.js';
import { connectService } from './connect.js';

const servers: http.Server[] = [];
after(() => servers.forEach((s) => s.closeAllConnections?.() ?? s.close()));

async function listen(handler: http.RequestListener): Promise<{ server: http.Server; base: string }> {
  const server = http.createServer(handler);
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, base: `127.0.0.1:${(server.address() as AddressInfo).port}` };
}

async function rejectsWith(p: Promise<unknown>, code: string, details: Record<string, unknown> = {}): Promise<SbxError> {
  const err = await p.then(
    () => assert.fail(`expected ${code}, it resolved`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof SbxError, String(err));
  assert.equal(err.code, code, err.message);
  for (const [k, v] of Object.entries(details)) assert.equal(err.details?.[k], v, `details.${k}`);
  return err;
}

test('ws: 502 answers are retried until the upgrade succeeds; headers reach the service', async () => {
  let requests = 0;
  const { server, base } = await listen((_req, res) => {
    requests++;
    res.writeHead(502).end('bad gateway');
  });
  const wss = new WebSocketServer({ noServer: true });
  let auth: string | undefined;
  server.on('upgrade', (req, socket, head) => {
    requests++;
    if (requests < 3) {
      socket.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    auth = req.headers.authorization;
    wss.handleUpgrade(req, socket, head, (ws) => ws.on('message', (d, bin) => ws.send(d, { binary: bin })));
  });
  const conn = await connectService({ url: `ws://${base}/x`, port: 3000, headers: { authorization: 'Bearer k' } }, { protocol: 'ws', readyTimeoutMs: 5000 });
  assert.equal(requests, 3);
  assert.equal(auth, 'Bearer k');
  conn.send('ping');
  assert.deepEqual((await conn[Symbol.asyncIterator]().next()).value, { type: 'text', data: 'ping' });
  conn.close();
  assert.equal((await conn.closed).code, 1000);
});

test('ws: an sbx error body (the proxy) is kept and not retried, unless it says the port is not listening yet', async () => {
  let requests = 0;
  const { server, base } = await listen(() => undefined);
  server.on('upgrade', (_req, socket) => {
    requests++;
    const body = JSON.stringify({
      error: { code: 'not_available', message: 'port 3000 is not exposed', details: { reason: requests === 1 ? 'port_not_listening' : 'port_not_exposed' } },
    });
    socket.end(`HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
  });
  await rejectsWith(connectService({ url: `ws://${base}/`, port: 3000 }, { protocol: 'ws' }), 'not_available', { reason: 'port_not_exposed' });
  assert.equal(requests, 2);
});

test('ws: an upgrade that closes right away is a connection, not a retry', async () => {
  let upgrades = 0;
  const { server, base } = await listen(() => undefined);
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    upgrades++;
    wss.handleUpgrade(req, socket, head, (ws) => ws.close(4002, 'bye'));
  });
  const conn = await connectService({ url: `ws://${base}/`, port: 3000 }, { protocol: 'ws' });
  assert.deepEqual(await conn.closed, { code: 4002, reason: 'bye' });
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(upgrades, 1);
});

test('ws: a reader that falls behind pauses the socket; nothing is lost once it reads', async () => {
  const COUNT = 512;
  const SIZE = 64 * 1024;
  let written = 0;
  const { server, base } = await listen(() => undefined);
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) =>
    wss.handleUpgrade(req, socket, head, (ws: WebSocket) => {
      for (let i = 0; i < COUNT; i++) ws.send(Buffer.alloc(SIZE, i % 256), () => written++);
    }),
  );
  const conn = await connectService({ url: `ws://${base}/`, port: 3000 }, { protocol: 'ws' });
  await new Promise((r) => setTimeout(r, 500));
  assert.ok(written < COUNT, `the server is held back (${written} of ${COUNT} written)`);
  let n = 0;
  for await (const m of conn) {
    assert.equal(m.type, 'binary');
    assert.equal(m.type === 'binary' && m.data[0], n % 256, `message ${n} in order`);
    if (++n === COUNT) break;
  }
  assert.equal(n, COUNT);
  conn.close();
  await conn.closed;
});

test('sse: an early close is retried; a 200 that is not an event stream is refused at once', async () => {
  let requests = 0;
  const { base } = await listen((req, res) => {
    requests++;
    if (req.url === '/plain') return void res.writeHead(200, { 'content-type': 'text/plain' }).end('hi');
    if (requests === 1) return void req.socket.destroy();
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
    res.end('data: a\n\ndata: b\n\n');
  });
  const conn = await connectService({ url: `http://${base}/events`, port: 3001 }, { protocol: 'sse' });
  const got = [];
  for await (const e of conn) got.push(e.data);
  assert.deepEqual(got, ['a', 'b']);
  assert.equal(requests, 2);
  requests = 0;
  await rejectsWith(connectService({ url: `http://${base}/plain`, port: 3001 }, { protocol: 'sse' }), 'not_available', { reason: 'handshake_refused' });
  assert.equal(requests, 1);
});

test('nothing listening: not_available port_not_ready at the ready timeout, after several attempts; an abort is cancelled', async () => {
  const { server, base } = await listen(() => undefined);
  await new Promise((r) => server.close(r));
  const started = Date.now();
  // within: an attempt loop that never ends fails as a hang, not after some bound a loaded machine breaks.
  const err = await rejectsWith(
    within(connectService({ url: `ws://${base}/`, port: 3002 }, { protocol: 'ws', readyTimeoutMs: 700 }), 'the ready timeout'),
    'not_available',
    {
      reason: 'port_not_ready',
      port: 3002,
    },
  );
  assert.ok(Number(err.details?.['attempts']) > 2, `retried (${String(err.details?.['attempts'])} attempts)`);
  // The last attempt may be the one the deadline cut short (a loaded machine): refused or timed out.
  assert.match(String(err.details?.['lastError']), /ECONNREFUSED|timed out/);
  assert.ok(Date.now() - started >= 650, `gave up after ${Date.now() - started} ms, before the ready timeout`);
  const controller = new AbortController();
  setTimeout(() => controller.abort(), 100);
  await rejectsWith(connectService({ url: `http://${base}/`, port: 3002 }, { protocol: 'sse', signal: controller.signal }), 'cancelled');
});
