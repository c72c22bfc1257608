/**
 * The authenticated port proxy against a real engine, a real server and real clients (fetch,
 * node:http, ws, the SDK): streaming both ways, SSE per event, WebSocket, and who may reach what.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { Sbx } from '../client/index.js';
import { isSbxError } from '../errors.js';
import { AGENT_PORT } from '../runtime/agent-protocol.js';
import type { ManagedBox } from '../sandbox/box.js';
import { Manager } from '../sandbox/manager.js';
import pino from 'pino';
import { serve } from './index.js';
import { signPortToken } from '../sandbox/port-tokens.js';
import { testEnv } from '../testing/env.js';
import { rawRequest, startTestServer } from '../testing/server.js';
import type { Res, TestServer } from '../testing/server.js';
import { waitFor, within } from '../testing/wait.js';

const DOMAIN = 'sbx.test';
// A service on :3002 started inside the box: /echo (the body back as it arrives), /gated (a
// first part, as text or, with ?sse, as an event; the last only once /open was asked), anything else: what it was asked.
// Every request it gets is appended to /tmp/seen.log (method and URL), so a test can prove one never arrived.
const SERVICE = `require('http').createServer((req, res) => {
  require('fs').appendFileSync('/tmp/seen.log', req.method + ' ' + req.url + '\\n');
  if (req.url.startsWith('/gated')) { const sse = req.url.includes('sse'); res.writeHead(200, { 'content-type': sse ? 'text/event-stream' : 'text/plain' }); res.write(sse ? 'data: first\\n\\n' : 'first\\n'); global.gated = () => res.end(sse ? 'data: last\\n\\n' : 'last\\n'); return; }
  if (req.url.startsWith('/open')) { global.gated?.(); res.end('opened'); return; }
  if (req.url.startsWith('/echo')) { res.writeHead(200, { 'content-type': 'application/octet-stream' }); res.flushHeaders(); req.on('data', (d) => res.write(d)); req.on('end', () => res.end()); return; }
  res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify({ url: req.url, method: req.method, headers: req.headers }));
}).listen(3002, '0.0.0.0', () => console.log('listening'));`;

let ts: TestServer;
let alice: string;
let aliceBox: string;
/** Alice's box on the gVisor pool (`ociRuntime: runsc`): the streaming tests run on it too. */
let aliceGvisorBox: string;
let bobBox: string;

async function startService(id: string): Promise<void> {
  const box = await ts.manager.get(id);
  const stream = await box.stream(['node', '-e', SERVICE]);
  stream.stdin.end();
  await new Promise<void>((resolve, reject) => {
    stream.stdout.on('data', (c: Buffer) => c.toString().includes('listening') && resolve());
    stream.wait().then(() => reject(new Error('the in-box service exited')), reject);
  });
}

const portPath = (id: string, port: number, rest = '/') => `/v1/boxes/${id}/ports/${port}${rest}`;

/** Another sbx serve over the test server's Manager (and keys), without a proxy domain. */
const pathServer = () =>
  serve({ manager: ts.manager, dataDir: ts.dataDir, port: 0, logger: pino({ level: 'silent' }), authFailures: { max: 1000, windowMs: 60_000 } });

/** A JSON call as alice to `base`. */
async function call(base: string, method: string, path: string, body: unknown): Promise<Omit<Res, 'headers'>> {
  const res = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined, text };
}

/**
 * GET /gated`query` on alice's box `id` through the proxy: reads until the first part arrived, then
 * asks the service (/open) for the last one and reads to the end. Hangs (and fails) if the proxy
 * holds back what the box already sent.
 */
async function gated(id: string, query: string): Promise<{ first: string; rest: string; type: string }> {
  const auth = { headers: { authorization: `Bearer ${alice}` } };
  const res = await fetch(ts.url + portPath(id, 3002, `/gated${query}`), auth);
  assert.equal(res.status, 200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let first = '';
  while (!first.endsWith('\n') || (query === '?sse' && !first.endsWith('\n\n'))) {
    const { done, value } = await within(reader.read(), 'the first part, which the box sent before the response ends');
    assert.ok(!done, `the response ended after ${JSON.stringify(first)}`);
    first += decoder.decode(value, { stream: true });
  }
  assert.equal(await (await fetch(ts.url + portPath(id, 3002, '/open'), auth)).text(), 'opened');
  let rest = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    rest += decoder.decode(value, { stream: true });
  }
  return { first, rest, type: res.headers.get('content-type') ?? '' };
}

/** A port token signed as the server signs them, for box `id` as it is now (its nonce), for no key. */
async function tokenFor(id: string, port: number, expiresAt: number): Promise<string> {
  const box = (await ts.manager.get(id)) as ManagedBox; // its nonce: what only the Manager holds
  return signPortToken(await ts.manager.secrets.portTokenKey(), { boxId: id, nonce: box.record.tokenNonce, port, expiresAt, keyId: '' });
}

/** The status of a WebSocket upgrade to `url`: 101 when it opened, else the HTTP status of the refusal. */
async function upgradeStatus(url: string, headers: Record<string, string>): Promise<number> {
  const ws = new WebSocket(url, { headers });
  const status = await new Promise<number>((resolve) => {
    ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
    ws.once('open', () => resolve(101));
    ws.once('error', () => resolve(-1));
  });
  ws.terminate();
  return status;
}

before(async () => {
  // Refusals here must stay 401/403: the failure limiter has its own tests (server.test.ts).
  ts = await startTestServer('proxy', {
    serve: { proxyDomain: DOMAIN, authFailures: { max: 1000, windowMs: 60_000 } },
    config: {
      pools: [
        { name: 'local', addr: testEnv.engineAddr },
        { name: 'gvisor', addr: testEnv.engineAddr, ociRuntime: testEnv.gvisorRuntime },
      ],
    },
  });
  alice = (await ts.server.keys.create({ name: 'alice', role: 'user', owner: 'alice' })).key;
  const ports = [{ containerPort: 3000 }, { containerPort: 3001 }, { containerPort: 3002 }];
  const suffix = `${process.pid}`;
  const a = await ts.call('POST', '/v1/boxes', { key: alice, body: { id: `pa-${suffix}`, image: testEnv.testImage, ports } });
  assert.equal(a.status, 201, a.text);
  aliceBox = a.json.id;
  const b = await ts.call('POST', '/v1/boxes', { body: { id: `pb-${suffix}`, owner: 'bob', image: testEnv.testImage, ports } });
  assert.equal(b.status, 201, b.text);
  bobBox = b.json.id;
  const g = await ts.call('POST', '/v1/boxes', { key: alice, body: { id: `pg-${suffix}`, image: testEnv.testImage, ports, pool: 'gvisor' } });
  assert.equal(g.status, 201, g.text);
  aliceGvisorBox = g.json.id;
  await Promise.all([startService(aliceBox), startService(bobBox), startService(aliceGvisorBox)]);
});

after(async () => {
  await ts?.dispose();
});

for (const runtime of ['runc', 'gVisor'] as const)
  describe(`streaming through the proxy, to a box on ${runtime}`, () => {
    let target = '';
    before(() => {
      target = runtime === 'runc' ? aliceBox : aliceGvisorBox;
    });

    test('a chunked HTTP response streams: the first chunk arrives before the last is sent', async () => {
      // The service sends its last chunk only when asked, once the first arrived here: a proxy that
      // held the response back would never deliver the first.
      const { first, rest } = await gated(target, '');
      assert.equal(first, 'first\n');
      assert.equal(rest, 'last\n');
    });

    test('a POST body streams in: the echo of the first part comes back before the body ends', async () => {
      const u = new URL(ts.url);
      const got = await new Promise<string>((resolve, reject) => {
        const req = httpRequest(
          {
            host: u.hostname,
            port: u.port,
            method: 'POST',
            path: portPath(target, 3002, '/echo'),
            headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/octet-stream', 'transfer-encoding': 'chunked' },
          },
          (res) => {
            assert.equal(res.statusCode, 200);
            let body = '';
            res.on('data', (c: Buffer) => {
              body += c.toString();
              // The second part is sent only once the first came back through the box.
              if (body === 'first|') req.end('second');
            });
            res.on('end', () => resolve(body));
            res.on('error', reject);
          },
        );
        req.on('error', reject);
        req.write('first|');
      });
      assert.equal(got, 'first|second');
    });

    test('SSE through the proxy arrives per event: the first before the next is sent', async () => {
      const { first, rest, type } = await gated(target, '?sse');
      assert.match(type, /text\/event-stream/);
      assert.equal(first, 'data: first\n\n');
      assert.equal(rest, 'data: last\n\n');
    });

    test('a WebSocket through the proxy echoes text and binary frames unchanged', async () => {
      const ws = new WebSocket(ts.url.replace('http', 'ws') + portPath(target, 3000, '/'), { headers: { authorization: `Bearer ${alice}` } });
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
      });
      const next = () =>
        new Promise<{ data: Buffer; binary: boolean }>((resolve) => ws.once('message', (data: Buffer, binary: boolean) => resolve({ data, binary })));
      let m = next();
      ws.send('hello');
      assert.deepEqual(await m, { data: Buffer.from('hello'), binary: false });
      const bytes = Buffer.from([0, 1, 2, 255, 254]);
      m = next();
      ws.send(bytes);
      assert.deepEqual(await m, { data: bytes, binary: true });
      ws.close();
      await new Promise((r) => ws.once('close', r));
    });

    test('an open proxied connection holds the box in use; a client that goes away releases it', async () => {
      const box = (await ts.manager.get(target)) as ManagedBox;
      const baseline = box.activity.inFlight; // the in-box service's exec stream
      const settled = () => waitFor(() => box.activity.inFlight === baseline, { what: 'the box to be released' });
      const ws = new WebSocket(ts.url.replace('http', 'ws') + portPath(target, 3000, '/'), { headers: { authorization: `Bearer ${alice}` } });
      await new Promise((r) => ws.once('open', r));
      assert.equal(box.activity.inFlight, baseline + 1, 'the WebSocket holds the box');
      ws.close();
      await settled(); // released when the WebSocket closes
      const controller = new AbortController();
      // Gated: the response stays open however slowly this test reads.
      const res = await fetch(ts.url + portPath(target, 3002, '/gated'), { headers: { authorization: `Bearer ${alice}` }, signal: controller.signal });
      const reader = res.body!.getReader();
      await reader.read();
      assert.equal(box.activity.inFlight, baseline + 1, 'the open response holds the box');
      controller.abort();
      await reader.read().catch(() => undefined);
      await settled(); // released when the client aborts mid-response
    });

    test('a WebSocket client that leaves while its paused box wakes up leaves nothing open to the box', async () => {
      const box = (await ts.manager.get(target)) as ManagedBox;
      const baseline = box.activity.inFlight; // the in-box service's exec stream
      assert.equal((await ts.call('POST', `/v1/boxes/${target}/pause`, { key: alice })).status, 200);
      // The upgrade request; once its dial began (the box held, waking up), a reset, as a load
      // balancer or a killed client sends: the dial ends after the client's 'close' went by.
      const u = new URL(ts.url);
      const sock = connect({ host: u.hostname, port: Number(u.port) });
      await once(sock, 'connect');
      sock.on('error', () => undefined);
      sock.write(
        `GET ${portPath(target, 3000, '/')} HTTP/1.1\r\nhost: ${u.host}\r\nauthorization: Bearer ${alice}\r\nconnection: Upgrade\r\nupgrade: websocket\r\n` +
          `sec-websocket-version: 13\r\nsec-websocket-key: ${randomBytes(16).toString('base64')}\r\n\r\n`,
      );
      await waitFor(() => box.activity.inFlight === baseline + 1, { what: 'the dial to begin', intervalMs: 1 });
      sock.resetAndDestroy();
      // The box woke for it: the dial ran. Then the stream it opened is closed again.
      await waitFor(async () => (await ts.call('GET', `/v1/boxes/${target}`, { key: alice })).json.status === 'running', {
        what: 'the box to wake for the dial',
      });
      await waitFor(() => box.activity.inFlight === baseline, { what: 'the dialed stream to be closed and the box released' });
    });

    test('a WebSocket without credentials is refused with 401 before any upgrade', async () => {
      const ws = new WebSocket(ts.url.replace('http', 'ws') + portPath(target, 3000, '/'));
      const status = await new Promise<number>((resolve) => {
        ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        ws.once('open', () => resolve(101));
        ws.once('error', () => resolve(-1));
      });
      ws.terminate();
      assert.equal(status, 401);
    });
  });

describe('what reaches the box service', () => {
  test('the sbx credentials are stripped and X-Forwarded-* added; path and query are kept', async () => {
    const res = await fetch(ts.url + portPath(aliceBox, 3002, '/h/x?q=1&r=2'), {
      headers: { authorization: `Bearer ${alice}`, cookie: 'sbx_token=zzz; other=1' },
    });
    assert.equal(res.status, 200);
    const seen = (await res.json()) as { url: string; headers: Record<string, string> };
    assert.equal(seen.url, '/h/x?q=1&r=2');
    assert.equal(seen.headers['authorization'], undefined);
    assert.equal(seen.headers['cookie'], 'other=1');
    assert.ok(seen.headers['x-forwarded-for']);
    assert.equal(seen.headers['x-forwarded-proto'], 'http');
    assert.equal(seen.headers['x-forwarded-host'], new URL(ts.url).host);
  });
});

describe('who may reach a port', () => {
  test('no credentials: 401 unauthorized', async () => {
    const res = await ts.call('GET', portPath(aliceBox, 3002, '/h'), { key: null });
    assert.equal(res.status, 401);
    assert.equal(res.json.error.code, 'unauthorized');
  });

  test("an admin key reaches any owner's box; a box token is forbidden", async () => {
    const admin = await ts.call('GET', portPath(aliceBox, 3002, '/h'));
    assert.equal(admin.status, 200);
    const { stdout } = await (await ts.manager.get(aliceBox)).exec(['node', '-e', 'process.stdout.write(process.env.SBX_TOKEN)']);
    const res = await ts.call('GET', portPath(aliceBox, 3002, '/h'), { key: stdout.trim() });
    assert.equal(res.status, 403);
    assert.equal(res.json.error.code, 'forbidden');
  });

  test("another owner's box answers 404 not_found, as a missing box does", async () => {
    const res = await ts.call('GET', portPath(bobBox, 3002, '/h'), { key: alice });
    assert.equal(res.status, 404);
    assert.equal(res.json.error.code, 'not_found');
    const missing = await ts.call('GET', portPath('no-such-box', 3002, '/h'), { key: alice });
    assert.equal(missing.status, 404);
    assert.equal(missing.json.error.code, 'not_found');
  });

  test('a signed token for one port used on another: 403 forbidden; an expired token: 401', async () => {
    const for3000 = await tokenFor(aliceBox, 3000, Date.now() + 60_000);
    const wrong = await ts.call('GET', portPath(aliceBox, 3002, `/h?sbx_token=${for3000}`), { key: null });
    assert.equal(wrong.status, 403);
    assert.equal(wrong.json.error.code, 'forbidden');
    const expired = await tokenFor(aliceBox, 3002, Date.now() - 1);
    const old = await ts.call('GET', portPath(aliceBox, 3002, '/h'), { key: null, headers: { cookie: `sbx_token=${expired}` } });
    assert.equal(old.status, 401);
    assert.equal(old.json.error.code, 'unauthorized');
    const forged = await ts.call('GET', portPath(aliceBox, 3002, `/h?sbx_token=${for3000.slice(0, -4)}AAAA`), { key: null });
    assert.equal(forged.status, 401);
  });

  test('a signed URL: ?sbx_token= once, then a path-scoped HttpOnly cookie (303 to the URL without the token)', async () => {
    // A second server over the same Manager, without a proxy domain: path-based URLs.
    const plain = await pathServer();
    try {
      const made = await call(plain.url, 'POST', `/v1/boxes/${aliceBox}/proxy-url`, { port: 3002, path: '/h?q=1', signed: true, ttlMs: 60_000 });
      assert.equal(made.status, 200, made.text);
      const url = new URL(made.json.url as string);
      assert.equal(url.origin, plain.url);
      assert.equal(url.pathname, portPath(aliceBox, 3002, '/h'));
      assert.equal(url.searchParams.get('q'), '1');
      assert.ok(url.searchParams.get('sbx_token'));
      assert.ok(Date.parse(made.json.expiresAt) > Date.now());
      const first = await fetch(url, { redirect: 'manual' });
      assert.equal(first.status, 303);
      assert.equal(first.headers.get('location'), portPath(aliceBox, 3002, '/h?q=1'));
      const cookie = first.headers.get('set-cookie')!;
      assert.match(cookie, new RegExp(`^sbx_token=sbxp2\\.[^;]+; Path=/v1/boxes/${aliceBox}/ports/3002/; Max-Age=(59|60); HttpOnly; SameSite=Lax$`));
      const second = await fetch(plain.url + first.headers.get('location'), { headers: { cookie: cookie.split(';')[0]! } });
      assert.equal(second.status, 200);
      const seen = (await second.json()) as { url: string; headers: Record<string, string> };
      assert.equal(seen.url, '/h?q=1');
      assert.equal(seen.headers['cookie'], undefined);
      // The cookie of port 3002 does not open port 3001.
      const other = await fetch(plain.url + portPath(aliceBox, 3001, '/'), { headers: { cookie: cookie.split(';')[0]! } });
      assert.equal(other.status, 403);
    } finally {
      await plain.close();
    }
  });

  test('another box is unreachable by construction: ../ in the path and Host tricks stay in the box of the route', async () => {
    const tokenA = await tokenFor(aliceBox, 3002, Date.now() + 60_000);
    const tokenB = await tokenFor(bobBox, 3002, Date.now() + 60_000);
    const dots = `/v1/boxes/${aliceBox}/ports/3002/../../${bobBox}/ports/3002/h`;
    const viaA = await rawRequest(ts.url, 'GET', dots, { cookie: `sbx_token=${tokenA}` });
    assert.equal(viaA.status, 200);
    assert.equal(viaA.json.url, `/../../${bobBox}/ports/3002/h`); // box A's service got the odd path
    const viaB = await rawRequest(ts.url, 'GET', dots, { cookie: `sbx_token=${tokenB}` });
    assert.equal(viaB.status, 403);
    const encoded = await rawRequest(ts.url, 'GET', `/v1/boxes/${aliceBox}%2F..%2F${bobBox}/ports/3002/h`, { cookie: `sbx_token=${tokenB}` });
    assert.ok(encoded.status === 400 || encoded.status === 404, `status ${encoded.status}`);
    // A Host naming box B on the API's own host name changes nothing.
    const host = await rawRequest(ts.url, 'GET', portPath(aliceBox, 3002, '/h'), { host: `3002-${bobBox}.elsewhere.test`, cookie: `sbx_token=${tokenA}` });
    assert.equal(host.status, 200);
    assert.equal(host.json.headers['x-forwarded-host'], `3002-${bobBox}.elsewhere.test`);
  });

  test('a port the box did not publish: 503 not_available port_not_exposed, at once', async () => {
    // At once: the reason says it was refused from the box's ports, not after dialling and retrying.
    const res = await ts.call('GET', portPath(aliceBox, 4000, '/'), { key: alice });
    assert.equal(res.status, 503);
    assert.equal(res.json.error.code, 'not_available');
    assert.equal(res.json.error.details.reason, 'port_not_exposed');
  });

  test("the in-box agent's port: 400 invalid_argument, for the owner and an admin alike", async () => {
    for (const auth of [{ key: alice }, {}]) {
      const res = await ts.call('GET', portPath(aliceBox, AGENT_PORT, '/'), auth);
      assert.equal(res.status, 400, res.text);
      assert.equal(res.json.error.code, 'invalid_argument');
      assert.equal(res.json.error.details.field, 'port');
    }
  });

  test('a published port nothing listens on: 503 not_available port_not_listening', async () => {
    // Port 3002 of a fresh box has no service until the test starts one.
    const c = await ts.call('POST', '/v1/boxes', { key: alice, body: { image: testEnv.testImage, ports: [{ containerPort: 3002 }] } });
    assert.equal(c.status, 201, c.text);
    try {
      const res = await ts.call('GET', portPath(c.json.id as string, 3002, '/'), { key: alice });
      assert.equal(res.status, 503);
      assert.equal(res.json.error.code, 'not_available');
      assert.equal(res.json.error.details.reason, 'port_not_listening');
    } finally {
      await ts.call('DELETE', `/v1/boxes/${c.json.id}`);
    }
  });
});

describe('host-based proxy (proxyDomain)', () => {
  test('<port>-<id>.<domain> reaches that port at /, with the same auth', async () => {
    const ok = await rawRequest(ts.url, 'GET', '/some/path?x=1', { host: `3002-${aliceBox}.${DOMAIN}`, authorization: `Bearer ${alice}` });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.url, '/some/path?x=1');
    const none = await rawRequest(ts.url, 'GET', '/', { host: `3002-${aliceBox}.${DOMAIN}` });
    assert.equal(none.status, 401);
    const other = await rawRequest(ts.url, 'GET', '/', { host: `3002-${bobBox}.${DOMAIN}`, authorization: `Bearer ${alice}` });
    assert.equal(other.status, 404);
    // The API path on a box's host is the box's path, not the API.
    const api = await rawRequest(ts.url, 'GET', `/v1/boxes/${bobBox}`, { host: `3002-${aliceBox}.${DOMAIN}`, authorization: `Bearer ${alice}` });
    assert.equal(api.json.url, `/v1/boxes/${bobBox}`);
  });

  test('a token in the query on a box host sets a host-only cookie at Path=/', async () => {
    const token = await tokenFor(aliceBox, 3002, Date.now() + 30_000);
    const res = await rawRequest(ts.url, 'GET', `/app?sbx_token=${token}`, { host: `3002-${aliceBox}.${DOMAIN}` });
    assert.equal(res.status, 303);
    assert.equal(res.headers.get('location'), '/app');
    assert.match(res.headers.get('set-cookie') ?? '', /; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Lax$/);
    assert.doesNotMatch(res.headers.get('set-cookie') ?? '', /Domain=/);
  });
});

describe('box.proxy()', () => {
  test('library: a URL on the server (host-based with the domain), signed on request; a direct port without a public URL', async () => {
    const box = await ts.manager.get(aliceBox);
    const port = new URL(ts.url).port;
    assert.equal(await box.proxy(3002, '/x'), `http://3002-${aliceBox}.${DOMAIN}:${port}/x`);
    // A server registered later, without a proxy domain: box.proxy() points at it, path-based.
    const plain = await pathServer();
    try {
      assert.equal(await box.proxy(3002, 'x?y=1'), `${plain.url}/v1/boxes/${aliceBox}/ports/3002/x?y=1`);
      const signed = await box.proxy(3002, '/h', { signed: true, ttlMs: 5_000 });
      assert.match(signed, new RegExp(`^${plain.url}/v1/boxes/${aliceBox}/ports/3002/h\\?sbx_token=sbxp2\\.`));
      const res = await fetch(signed, { redirect: 'manual' });
      assert.equal(res.status, 303);
      await assert.rejects(box.proxy(4000), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'port_not_exposed');
      await assert.rejects(box.proxy(3002, '/', { ttlMs: 5_000 }), (e) => isSbxError(e, 'invalid_argument'));
      await assert.rejects(
        box.proxy(3002, '/', { signed: true, ttlMs: 25 * 3_600_000 }),
        (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'ttlMs',
      );
      await assert.rejects(box.proxy(0), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'port');
    } finally {
      await plain.close();
    }
    // A Manager no server fronts hands out the published port itself, and cannot sign.
    const lib = new Manager({
      name: `plib-${process.pid}`,
      dataDir: ts.dataDir,
      cleanupIntervalMs: 0,
      logger: pino({ level: 'silent' }),
      pools: [{ name: 'local', addr: testEnv.engineAddr }],
    });
    await lib.start();
    try {
      const own = await lib.create({
        image: testEnv.baseImage,
        ports: [{ containerPort: 3002 }],
        cmd: ['sh', '-c', 'mkdir -p /tmp/w && echo direct > /tmp/w/d && exec httpd -f -p 3002 -h /tmp/w'],
      });
      const direct = await own.proxy(3002, '/d');
      assert.match(direct, /^http:\/\/127\.0\.0\.1:\d+\/d$/);
      // Until httpd listens: wait for the page, not a number of tries.
      const page = await waitFor(
        () =>
          fetch(direct).then(
            async (r) => (r.ok ? r.text() : false),
            () => false,
          ),
        { what: 'the box service on its published port' },
      );
      assert.equal(page, 'direct\n');
      await assert.rejects(own.proxy(3002, '/', { signed: true }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'signed');
      await own.remove();
    } finally {
      await lib.close();
    }
  });

  test('SDK: box.proxy() answers what the library does, and refuses the same arguments', async () => {
    const sbx = new Sbx({ url: ts.url, apiKey: alice });
    const box = await sbx.get(aliceBox);
    const port = new URL(ts.url).port;
    assert.equal(await box.proxy(3002, '/x'), `http://3002-${aliceBox}.${DOMAIN}:${port}/x`);
    const signed = await box.proxy(3002, '/x', { signed: true });
    assert.match(signed, /\?sbx_token=sbxp2\./);
    const res = await rawRequest(ts.url, 'GET', signed.slice(signed.indexOf('/x')), { host: `3002-${aliceBox}.${DOMAIN}` });
    assert.equal(res.status, 303);
    await assert.rejects(box.proxy(4000), (e) => isSbxError(e, 'not_available'));
    await assert.rejects(box.proxy(3002, '/', { signed: true, ttlMs: 10 }), (e) => isSbxError(e, 'invalid_argument'));
    const bobs = await ts.call('POST', `/v1/boxes/${bobBox}/proxy-url`, { key: alice, body: { port: 3002 } });
    assert.equal(bobs.status, 404);
    const bad = await ts.call('POST', `/v1/boxes/${aliceBox}/proxy-url`, { key: alice, body: { port: 3002, extra: 1 } });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.code, 'invalid_argument');
    const openapi = await ts.call('GET', '/openapi.json', { key: null });
    assert.ok(openapi.json.paths['/v1/boxes/{id}/proxy-url']?.post, 'proxy-url is in the OpenAPI document');
  });
});

describe('signed URLs are bound to the box and the key they were signed for', () => {
  /** The token of a signed URL for `port` of box `id`, as the proxy-url route gives it to `key`. */
  async function signedToken(id: string, port: number, key: string): Promise<string> {
    const made = await ts.call('POST', `/v1/boxes/${id}/proxy-url`, { key, body: { port, signed: true, ttlMs: 3_600_000 } });
    assert.equal(made.status, 200, made.text);
    return new URL(made.json.url as string).searchParams.get('sbx_token')!;
  }

  /** The status of an HTTP request and of a WebSocket upgrade to port 3000 of `id` with `token` as the cookie, then in the query. */
  async function statuses(id: string, token: string): Promise<{ http: number; ws: number; wsQuery: number }> {
    const cookie = { cookie: `sbx_token=${token}` };
    const http = (await rawRequest(ts.url, 'GET', portPath(id, 3000, '/'), cookie)).status;
    const base = ts.url.replace('http', 'ws') + portPath(id, 3000, '/');
    return { http, ws: await upgradeStatus(base, cookie), wsQuery: await upgradeStatus(`${base}?sbx_token=${token}`, {}) };
  }

  /** Waits for the test image's WebSocket echo service on port 3000 of `id` to answer through the proxy. */
  async function listening(id: string): Promise<void> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const res = await ts.call('GET', portPath(id, 3000, '/'));
      if (res.status === 200) return;
      if (Date.now() > deadline) assert.fail(`port 3000 of ${id} never answered: ${res.status} ${res.text}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  test("a removed box's URL opens nothing under its reused id: another owner's box, then the same owner's (HTTP, WebSocket)", async () => {
    const id = `reuse-${process.pid}`;
    const create = async (owner: string) => {
      const c = await ts.call('POST', '/v1/boxes', { body: { id, owner, image: testEnv.testImage, ports: [{ containerPort: 3000 }] } });
      assert.equal(c.status, 201, c.text);
      await listening(id);
    };
    const remove = async () => assert.equal((await ts.call('DELETE', `/v1/boxes/${id}`)).status, 204);
    try {
      await create('alice');
      const token = await signedToken(id, 3000, alice);
      assert.deepEqual(await statuses(id, token), { http: 200, ws: 101, wsQuery: 101 }, 'the URL opens the box it was signed for');
      await remove();
      await create('bob');
      assert.deepEqual(await statuses(id, token), { http: 401, ws: 401, wsQuery: 401 }, "alice's old URL does not open bob's box under the same id");
      const refused = await rawRequest(ts.url, 'GET', portPath(id, 3000, '/'), { cookie: `sbx_token=${token}` });
      assert.equal(refused.json.error.code, 'unauthorized');
      assert.match(refused.json.error.message, /removed/);
      await remove();
      await create('alice');
      assert.deepEqual(await statuses(id, token), { http: 401, ws: 401, wsQuery: 401 }, "nor alice's own new box under the same id");
    } finally {
      await ts.call('DELETE', `/v1/boxes/${id}`);
    }
  });

  test("revoking the key a URL was signed for ends the URL (HTTP, WebSocket); URLs of the owner's other keys live on", async () => {
    const second = await ts.server.keys.create({ name: 'alice-2', role: 'user', owner: 'alice' });
    const token = await signedToken(aliceBox, 3000, second.key);
    const other = await signedToken(aliceBox, 3000, alice);
    assert.deepEqual(await statuses(aliceBox, token), { http: 200, ws: 101, wsQuery: 101 });
    assert.equal((await ts.call('DELETE', `/v1/keys/${second.id}`)).status, 204);
    assert.deepEqual(await statuses(aliceBox, token), { http: 401, ws: 401, wsQuery: 401 });
    const refused = await rawRequest(ts.url, 'GET', portPath(aliceBox, 3000, '/'), { cookie: `sbx_token=${token}` });
    assert.match(refused.json.error.message, /revoked/);
    assert.deepEqual(await statuses(aliceBox, other), { http: 200, ws: 101, wsQuery: 101 });
  });

  test("a WebSocket with the cookie opens only from the box's own origin (host-based) or the server's (path-based): else 403 before the upgrade", async () => {
    const token = await signedToken(aliceBox, 3000, alice);
    const cookie = `sbx_token=${token}`;
    const port = new URL(ts.url).port;
    const boxHost = `3000-${aliceBox}.${DOMAIN}:${port}`;
    const attacker = `http://3000-attacker.${DOMAIN}:${port}`;
    const wsUrl = ts.url.replace('http', 'ws');
    // Host-based: the box's page for this port, and nothing else, may use the cookie.
    assert.equal(await upgradeStatus(`${wsUrl}/`, { host: boxHost, cookie, origin: attacker }), 403);
    assert.equal(await upgradeStatus(`${wsUrl}/`, { host: boxHost, cookie, origin: `http://3000-${bobBox}.${DOMAIN}:${port}` }), 403);
    assert.equal(await upgradeStatus(`${wsUrl}/`, { host: boxHost, cookie, origin: `http://3001-${aliceBox}.${DOMAIN}:${port}` }), 403);
    assert.equal(await upgradeStatus(`${wsUrl}/`, { host: boxHost, cookie, origin: 'null' }), 403);
    assert.equal(await upgradeStatus(`${wsUrl}/`, { host: boxHost, cookie, origin: `http://${boxHost}` }), 101);
    // Path-based: the server's own origin.
    const path = `${wsUrl}${portPath(aliceBox, 3000, '/')}`;
    assert.equal(await upgradeStatus(path, { cookie, origin: attacker }), 403);
    const refused = await rawRequest(ts.url, 'GET', portPath(aliceBox, 3000, '/'), {
      cookie,
      origin: attacker,
      connection: 'Upgrade',
      upgrade: 'websocket',
      'sec-websocket-version': '13',
      'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
    });
    assert.equal(refused.json.error.code, 'forbidden');
    assert.equal(await upgradeStatus(path, { cookie, origin: ts.url }), 101);
    // Not a browser (no Origin), or credentials a page cannot send on its own: any Origin.
    assert.equal(await upgradeStatus(path, { cookie }), 101);
    assert.equal(await upgradeStatus(path, { authorization: `Bearer ${alice}`, origin: attacker }), 101);
    assert.equal(await upgradeStatus(`${path}?sbx_token=${token}`, { origin: attacker }), 101);
  });
});

describe('requests with side effects and the cookie come from the box page itself (CSRF)', () => {
  const port = () => new URL(ts.url).port;
  const boxHost = (p: number, id: string) => `${p}-${id}.${DOMAIN}:${port()}`;

  /** The requests the service on 3002 of `id` received whose URL holds `mark`, as `METHOD url`. */
  async function seen(id: string, mark: string): Promise<string[]> {
    const { stdout } = await (await ts.manager.get(id)).exec(['cat', '/tmp/seen.log']);
    return stdout.split('\n').filter((l) => l.includes(mark));
  }

  /** A request to port 3002 of alice's box on its box host with `headers` (a small form body unless GET/HEAD). */
  function toBoxHost(method: string, path: string, headers: Record<string, string>) {
    const body = method === 'GET' || method === 'HEAD' || method === 'OPTIONS' ? undefined : 'a=1';
    // Content-Length by hand: node's client sends a DELETE body with neither it nor chunked encoding.
    const type: Record<string, string> =
      body === undefined ? {} : { 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(body.length) };
    return rawRequest(ts.url, method, path, { host: boxHost(3002, aliceBox), ...type, ...headers }, body);
  }

  test('host-based: POST/PUT/PATCH/DELETE with the cookie from another box, another port of the same box or null: 403 forbidden, the service never sees it', async () => {
    const cookie = `sbx_token=${await tokenFor(aliceBox, 3002, Date.now() + 60_000)}`;
    const mark = `csrf-${randomUUID()}`;
    const foreign: Record<string, Record<string, string>> = {
      otherBox: { origin: `http://${boxHost(3002, bobBox)}` },
      otherPort: { origin: `http://${boxHost(3001, aliceBox)}` },
      null: { origin: 'null' },
      // No Origin, but the browser says where the request came from.
      crossSite: { 'sec-fetch-site': 'cross-site' },
      sameSite: { 'sec-fetch-site': 'same-site' },
    };
    for (const method of ['POST', 'PUT', 'PATCH', 'DELETE'])
      for (const [from, headers] of Object.entries(foreign)) {
        const res = await toBoxHost(method, `/${mark}/${from}`, { cookie, ...headers });
        assert.equal(res.status, 403, `${method} from ${from}: ${res.text}`);
        assert.equal(res.json.error.code, 'forbidden');
        assert.match(res.json.error.message, /sbx_token cookie .* own origin/);
      }
    // The box's own page, and clients that are no browser, reach it.
    const own = await toBoxHost('POST', `/${mark}/own`, { cookie, origin: `http://${boxHost(3002, aliceBox)}` });
    assert.equal(own.status, 200, own.text);
    assert.equal(own.json.method, 'POST');
    const sameOrigin = await toBoxHost('DELETE', `/${mark}/same-origin`, { cookie, 'sec-fetch-site': 'same-origin' });
    assert.equal(sameOrigin.status, 200, sameOrigin.text);
    const noBrowser = await toBoxHost('PUT', `/${mark}/no-browser`, { cookie });
    assert.equal(noBrowser.status, 200, noBrowser.text);
    // The service logs each request as it arrives: the refused ones would be in the log before these.
    assert.deepEqual(await seen(aliceBox, mark), [`POST /${mark}/own`, `DELETE /${mark}/same-origin`, `PUT /${mark}/no-browser`]);
  });

  test("path-based: a POST with the cookie from a box page is 403; from the server's own origin it reaches the service", async () => {
    const cookie = `sbx_token=${await tokenFor(aliceBox, 3002, Date.now() + 60_000)}`;
    const mark = `csrf-${randomUUID()}`;
    const refused = await rawRequest(
      ts.url,
      'POST',
      portPath(aliceBox, 3002, `/${mark}/foreign`),
      { cookie, origin: `http://${boxHost(3002, bobBox)}` },
      'a=1',
    );
    assert.equal(refused.status, 403, refused.text);
    assert.equal(refused.json.error.code, 'forbidden');
    const own = await rawRequest(ts.url, 'POST', portPath(aliceBox, 3002, `/${mark}/own`), { cookie, origin: ts.url }, 'a=1');
    assert.equal(own.status, 200, own.text);
    assert.deepEqual(await seen(aliceBox, mark), [`POST /${mark}/own`]);
  });

  test('GET, HEAD and OPTIONS with the cookie from a foreign Origin reach the service (no side effects by contract)', async () => {
    const cookie = `sbx_token=${await tokenFor(aliceBox, 3002, Date.now() + 60_000)}`;
    const mark = `csrf-${randomUUID()}`;
    const origin = `http://${boxHost(3002, bobBox)}`;
    for (const method of ['GET', 'HEAD', 'OPTIONS']) {
      const res = await toBoxHost(method, `/${mark}/${method}`, { cookie, origin });
      assert.equal(res.status, 200, `${method}: ${res.text}`);
    }
    assert.deepEqual(await seen(aliceBox, mark), [`GET /${mark}/GET`, `HEAD /${mark}/HEAD`, `OPTIONS /${mark}/OPTIONS`]);
  });

  test('a POST from a foreign Origin with Authorization or ?sbx_token= reaches the service: no page can send those on its own', async () => {
    const token = await tokenFor(aliceBox, 3002, Date.now() + 60_000);
    const mark = `csrf-${randomUUID()}`;
    const origin = `http://${boxHost(3002, bobBox)}`;
    const withKey = await toBoxHost('POST', `/${mark}/key`, { authorization: `Bearer ${alice}`, origin });
    assert.equal(withKey.status, 200, withKey.text);
    // The cookie beside the key changes nothing: the key is the credential.
    const keyAndCookie = await toBoxHost('POST', `/${mark}/key-cookie`, { authorization: `Bearer ${alice}`, cookie: `sbx_token=${token}`, origin });
    assert.equal(keyAndCookie.status, 200, keyAndCookie.text);
    const withQuery = await toBoxHost('POST', `/${mark}/query?sbx_token=${token}`, { origin });
    assert.equal(withQuery.status, 200, withQuery.text);
    assert.deepEqual(await seen(aliceBox, mark), [`POST /${mark}/key`, `POST /${mark}/key-cookie`, `POST /${mark}/query`]);
  });
});
