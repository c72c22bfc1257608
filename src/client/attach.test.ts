/**
 * The SDK's box.attach() against a stand-in for the server's port proxy: the URL it asks for
 * (/v1/boxes/:id/ports/:port/<path>), the API key as a bearer token, the caller's headers, and
 * the server's error bodies. The real proxy runs it in the behaviour suite.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { WebSocketServer } from 'ws';
import type { BoxInfo } from '../sandbox/types.js';
import { RemoteBox } from './box.js';
import { Transport } from './http.js';
import { SbxError } from './index.js';

let server: http.Server;
let base: string;
const seen: Array<{ url: string; auth: string | undefined; extra: string | undefined }> = [];

before(async () => {
  const wss = new WebSocketServer({ noServer: true });
  server = http.createServer((req, res) => {
    seen.push({ url: req.url ?? '', auth: req.headers.authorization, extra: req.headers['x-extra'] as string | undefined });
    if (req.headers.authorization !== 'Bearer key-1') {
      res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { code: 'unauthorized', message: 'bad API key' } }));
      return;
    }
    if (req.url?.startsWith('/v1/boxes/sb-1/ports/3001/')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end('id: 9\nevent: e\ndata: x\ndata: y\n\n');
      return;
    }
    res.writeHead(503, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { code: 'not_available', message: 'port 3005 is not exposed', details: { reason: 'port_not_exposed', port: 3005 } } }));
  });
  server.on('upgrade', (req, socket, head) => {
    seen.push({ url: req.url ?? '', auth: req.headers.authorization, extra: req.headers['x-extra'] as string | undefined });
    wss.handleUpgrade(req, socket, head, (ws) => ws.on('message', (d, bin) => ws.send(d, { binary: bin })));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => {
  server.closeAllConnections();
  server.close();
});

function remoteBox(apiKey: string): RemoteBox {
  const transport = new Transport({ url: `${base}/`, apiKey, retries: 0, retryDelayMs: 10 });
  return new RemoteBox(transport, { id: 'sb-1', workspaceId: null } as BoxInfo);
}

test('sdk attach ws: /v1/boxes/:id/ports/:port/<path> with the API key as a bearer token and the caller headers', async () => {
  seen.length = 0;
  const conn = await remoteBox('key-1').attach(3000, { protocol: 'ws', path: '/socket?x=1', headers: { 'x-extra': 'yes' } });
  assert.equal(conn.url, `${base.replace('http', 'ws')}/v1/boxes/sb-1/ports/3000/socket?x=1`);
  assert.deepEqual(seen, [{ url: '/v1/boxes/sb-1/ports/3000/socket?x=1', auth: 'Bearer key-1', extra: 'yes' }]);
  conn.send('hi');
  assert.deepEqual((await conn[Symbol.asyncIterator]().next()).value, { type: 'text', data: 'hi' });
  conn.close();
  await conn.closed;
});

test('sdk attach sse: the proxy URL over http, parsed events; no path is the service root', async () => {
  seen.length = 0;
  const conn = await remoteBox('key-1').attach(3001, { protocol: 'sse' });
  assert.equal(conn.url, `${base}/v1/boxes/sb-1/ports/3001/`);
  const events = [];
  for await (const e of conn) events.push(e);
  assert.deepEqual(events, [{ id: '9', event: 'e', data: 'x\ny' }]);
  assert.equal(seen[0]?.url, '/v1/boxes/sb-1/ports/3001/');
});

test("sdk attach: the server's errors come back as they are (unauthorized, port_not_exposed), not retried", async () => {
  seen.length = 0;
  await assert.rejects(remoteBox('wrong').attach(3001, { protocol: 'sse' }), (e) => e instanceof SbxError && e.code === 'unauthorized');
  await assert.rejects(
    remoteBox('key-1').attach(3005, { protocol: 'sse' }),
    (e) => e instanceof SbxError && e.code === 'not_available' && e.details?.['reason'] === 'port_not_exposed',
  );
  assert.equal(seen.length, 2, 'one request each');
  await assert.rejects(
    remoteBox('key-1').attach(70000, { protocol: 'ws' }),
    (e) => e instanceof SbxError && e.code === 'invalid_argument' && e.details?.['field'] === 'port',
  );
  await assert.rejects(
    remoteBox('key-1').attach(3000, { protocol: 'ws', signal: AbortSignal.abort() }),
    (e) => e instanceof SbxError && e.code === 'cancelled',
  );
});
