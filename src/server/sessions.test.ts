/**
 * Console sessions over real HTTP (sessions.ts, routes-session.ts): sign-in sets an HttpOnly,
 * SameSite=Strict cookie and answers the session token; a request needs both halves; another
 * origin, a revoked key, sign-out and a wrong token all end in a refusal; the port proxy never
 * passes the session on to a box.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { WebSocket } from 'ws';
import { MAX_SESSIONS_PER_KEY, SessionStore } from './sessions.js';
import type { Principal } from './keys.js';
import { testEnv } from '../testing/env.js';
import { startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

const alice: Principal = { kind: 'key', keyId: 'a'.repeat(16), name: 'alice', role: 'user', owner: 'alice' };

describe('SessionStore', () => {
  test('needs the cookie and its token; ends with its key, its lifetime and sign-out', () => {
    let now = 1_000;
    let live = true;
    const store = new SessionStore({ principal: () => (live ? alice : undefined) }, 60_000, () => now);
    const s = store.open(alice);
    assert.equal(store.verify(s.cookie, s.sessionToken)?.principal.owner, 'alice');
    assert.equal(store.verify(s.cookie, undefined), undefined, 'no token');
    assert.equal(store.verify(s.cookie, `${s.sessionToken}x`), undefined, 'a wrong token');
    assert.equal(store.verify(s.sessionToken, s.cookie), undefined, 'halves swapped');
    const other = store.open(alice);
    assert.equal(store.verify(s.cookie, other.sessionToken), undefined, "another session's token");
    store.close(other.cookie);
    assert.equal(store.verify(other.cookie, other.sessionToken), undefined, 'signed out');
    now += 60_000;
    assert.equal(store.verify(s.cookie, s.sessionToken), undefined, 'expired');
    const third = store.open(alice);
    live = false;
    assert.equal(store.verify(third.cookie, third.sessionToken), undefined, 'key revoked');
    assert.equal(store.size, 0, 'ended sessions are dropped');
  });
});

describe('SessionStore bounds', () => {
  test('one key signing in over and over ends only its own oldest sessions', () => {
    const bob: Principal = { ...alice, keyId: 'b'.repeat(16), name: 'bob', owner: 'bob' };
    const store = new SessionStore({ principal: (id) => (id === bob.keyId ? bob : alice) });
    const bobs = store.open(bob);
    const first = store.open(alice);
    for (let i = 0; i < MAX_SESSIONS_PER_KEY + 10; i++) store.open(alice);
    assert.equal(store.verify(first.cookie, first.sessionToken), undefined, "alice's oldest is ended");
    assert.equal(store.verify(bobs.cookie, bobs.sessionToken)?.principal.owner, 'bob', "bob's session lives on");
    assert.equal(store.size, MAX_SESSIONS_PER_KEY + 1);
  });
});

describe('console sessions over HTTP', () => {
  let srv: TestServer;
  let userKey: string;
  let userKeyId: string;

  before(async () => {
    srv = await startTestServer('sessions');
    const made = await srv.call('POST', '/v1/keys', { body: { name: 'carol', role: 'user' } });
    assert.equal(made.status, 201, made.text);
    userKey = made.json.key;
    userKeyId = made.json.id;
  });
  after(async () => srv?.dispose());

  interface SignInAnswer {
    cookie: string;
    token: string;
    setCookie: string;
    status: number;
    body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  }

  async function signIn(key: string, headers: Record<string, string> = {}): Promise<SignInAnswer> {
    const res = await fetch(`${srv.url}/v1/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ apiKey: key }),
    });
    const setCookie = res.headers.get('set-cookie') ?? '';
    const body = (await res.json()) as { sessionToken: string };
    return { cookie: /^sbx_session=([^;]*)/.exec(setCookie)?.[1] ?? '', token: body.sessionToken, setCookie, status: res.status, body };
  }

  function asSession(
    s: { cookie: string; token?: string },
    path: string,
    init: Omit<RequestInit, 'headers'> & { headers?: Record<string, string> } = {},
  ): Promise<Response> {
    const headers: Record<string, string> = { cookie: `sbx_session=${s.cookie}`, ...init.headers };
    if (s.token !== undefined) headers['x-sbx-session'] = s.token;
    return fetch(srv.url + path, { ...init, headers });
  }

  test('sign-in answers an HttpOnly, SameSite=Strict cookie and the token; never the key', async () => {
    const s = await signIn(userKey);
    assert.equal(s.status, 200);
    assert.match(s.setCookie, /HttpOnly/);
    assert.match(s.setCookie, /SameSite=Strict/);
    assert.match(s.setCookie, /Path=\/v1/);
    assert.deepEqual(s.body.whoami, { keyId: userKeyId, name: 'carol', role: 'user', owner: 'carol', admin: false });
    assert.ok(!JSON.stringify(s.body).includes(/^sbxk_[0-9a-f]{16}_(.+)$/.exec(userKey)![1]!), 'the answer holds not the secret');
    const who = await asSession(s, '/v1/whoami');
    assert.equal(who.status, 200);
    assert.equal(((await who.json()) as { owner: string }).owner, 'carol');
  });

  test('a wrong key is unauthorized and sets no cookie', async () => {
    const s = await signIn(`${userKey.slice(0, -2)}xx`);
    assert.equal(s.status, 401);
    assert.equal(s.body.error.code, 'unauthorized');
    assert.equal(s.setCookie, '');
  });

  test('the cookie alone opens nothing, reads included (a same-origin box page has only the cookie)', async () => {
    const s = await signIn(userKey);
    for (const path of ['/v1/whoami', '/v1/boxes', '/v1/workspaces']) {
      const res = await asSession({ cookie: s.cookie }, path);
      assert.equal(res.status, 401, path);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'unauthorized');
    }
    const wrong = await asSession({ cookie: s.cookie, token: 'x'.repeat(43) }, '/v1/whoami');
    assert.equal(wrong.status, 401);
  });

  test('a request from another origin is refused before anything runs (CSRF)', async () => {
    const s = await signIn(userKey);
    const res = await asSession(s, '/v1/boxes', {
      method: 'POST',
      headers: { origin: 'http://attacker.example', 'content-type': 'application/json' },
      body: JSON.stringify({ image: 'sbx-base:latest' }),
    });
    assert.equal(res.status, 403);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'forbidden');
    assert.equal((await srv.manager.list()).length, 0, 'no box was made');
    const own = await asSession(s, '/v1/whoami', { headers: { origin: srv.url } });
    assert.equal(own.status, 200, 'our own origin passes');
    const signInElsewhere = await signIn(userKey, { origin: 'http://attacker.example' });
    assert.equal(signInElsewhere.status, 403, 'no sign-in from another origin (login CSRF)');
  });

  test('the WebSocket exec takes the session as subprotocols, and refuses another origin', async () => {
    const s = await signIn(userKey);
    const wsUrl = `${srv.url.replace('http', 'ws')}/v1/boxes/nope/exec/ws?cmd=true`;
    const outcome = (origin: string, protocols: string[]) =>
      new Promise<number>((resolve) => {
        const ws = new WebSocket(wsUrl, protocols, { headers: { cookie: `sbx_session=${s.cookie}`, origin } });
        ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        ws.on('open', () => {
          ws.close();
          resolve(101);
        });
        ws.on('error', () => undefined);
      });
    // Authenticated: the box is missing (404), which the hook only reaches with a valid session.
    assert.equal(await outcome(srv.url, ['sbx.v1', `sbx.session.${s.token}`]), 404);
    assert.equal(await outcome(srv.url, ['sbx.v1']), 401, 'no token: the cookie alone');
    assert.equal(await outcome('http://attacker.example', ['sbx.v1', `sbx.session.${s.token}`]), 403, 'another origin');
  });

  test('sign-out ends the session and clears the cookie', async () => {
    const s = await signIn(userKey);
    const out = await asSession(s, '/v1/session', { method: 'DELETE', headers: { origin: srv.url } });
    assert.equal(out.status, 204);
    assert.match(out.headers.get('set-cookie') ?? '', /sbx_session=;.*Max-Age=0/);
    assert.equal((await asSession(s, '/v1/whoami')).status, 401);
  });

  test('revoking the key ends its sessions', async () => {
    const made = await srv.call('POST', '/v1/keys', { body: { name: 'dave', role: 'user' } });
    const s = await signIn(made.json.key);
    assert.equal((await asSession(s, '/v1/whoami')).status, 200);
    assert.equal((await srv.call('DELETE', `/v1/keys/${made.json.id}`)).status, 204);
    assert.equal((await asSession(s, '/v1/whoami')).status, 401);
  });

  test('the console page is strict: CSP, no framing, its own opener group; assets are gzip', async () => {
    const res = await fetch(`${srv.url}/`, { headers: { 'accept-encoding': 'gzip' } });
    assert.equal(res.status, 200);
    const csp = res.headers.get('content-security-policy') ?? '';
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.doesNotMatch(csp, /unsafe-eval/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.equal(res.headers.get('cross-origin-opener-policy'), 'same-origin');
    const html = await res.text();
    const script = /src="(assets\/[^"]+\.js)"/.exec(html)?.[1];
    assert.ok(script, html);
    const asset = await fetch(`${srv.url}/console/${script}`, { headers: { 'accept-encoding': 'gzip' } });
    assert.equal(asset.status, 200);
    assert.equal(asset.headers.get('content-encoding'), 'gzip');
    assert.match(asset.headers.get('cache-control') ?? '', /immutable/);
    assert.equal((await fetch(`${srv.url}/console/assets/nope.js`)).status, 404);
    assert.equal((await fetch(`${srv.url}/console/assets/..%2f..%2fpackage.json`)).status, 404);
  });
  test('a cookie of the same name that another page of the origin added does not shadow the session', async () => {
    const s = await signIn(userKey);
    const res = await fetch(`${srv.url}/v1/whoami`, { headers: { cookie: `sbx_session=planted; sbx_session=${s.cookie}`, 'x-sbx-session': s.token } });
    assert.equal(res.status, 200);
  });

  test("sign-in sets the token's cookie for the console's path only; the page lives there", async () => {
    const res = await fetch(`${srv.url}/v1/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ apiKey: userKey }),
    });
    const cookies = res.headers.getSetCookie();
    assert.equal(cookies.length, 2);
    assert.match(cookies[1]!, /^sbx_console=[A-Za-z0-9_-]{43}; Path=\/console\/; Max-Age=\d+; SameSite=Strict$/);
    assert.doesNotMatch(cookies[1]!, /HttpOnly/, "the console's script reads it");
    const root = await fetch(`${srv.url}/`, { redirect: 'manual' });
    assert.equal(root.status, 302);
    assert.equal(root.headers.get('location'), 'console/');
  });

  test("a box's service cannot set sbx's cookies, Service-Worker-Allowed or Clear-Site-Data through the proxy", async () => {
    const made = await srv.call('POST', '/v1/boxes', { body: { image: testEnv.testImage, ports: [{ containerPort: 3002 }] } });
    assert.equal(made.status, 201, made.text);
    const id = made.json.id as string;
    try {
      const server = `require('http').createServer((q, r) => { r.writeHead(200, { 'set-cookie': ['sbx_session=evil; Path=/v1', 'sbx_console=evil; Path=/console/', 'sbx_token=evil; Path=/', 'app=1; Path=/'], 'service-worker-allowed': '/', 'clear-site-data': '"storage"' }); r.end('ok'); }).listen(3002, '0.0.0.0', () => console.log('listening'))`;
      // The service runs as long as its exec stream is open (until the box is removed).
      const stream = await (await srv.manager.get(id)).stream(['node', '-e', server]);
      stream.stdin.end();
      await new Promise<void>((resolve, reject) => {
        stream.stdout.on('data', (c: Buffer) => c.toString().includes('listening') && resolve());
        stream.wait().then(() => reject(new Error('the in-box service exited')), reject);
      });
      const res = await fetch(`${srv.url}/v1/boxes/${id}/ports/3002/`, { headers: { authorization: `Bearer ${srv.admin}` } });
      const body = await res.text();
      assert.equal(res.status, 200, body);
      assert.equal(body, 'ok');
      assert.deepEqual(res.headers.getSetCookie(), ['app=1; Path=/'], "only the box's own cookie passes");
      assert.equal(res.headers.get('service-worker-allowed'), null);
      assert.equal(res.headers.get('clear-site-data'), null);
    } finally {
      await srv.call('DELETE', `/v1/boxes/${id}`);
    }
  });
});
