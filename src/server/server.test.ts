/**
 * The HTTP API on a real server (127.0.0.1, real engine) with real clients (fetch): auth and
 * owner scoping, boxes, exec (JSON and SSE), heartbeat and box tokens, keys, pools, images,
 * a table of malformed requests, metrics, logs without secrets, openapi.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { readSse } from '../client/sse.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { BoxTokenService } from '../sandbox/tokens.js';
import { testEnv } from '../testing/env.js';
import { IMAGE, rawRequest, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';
import { waitFor } from '../testing/wait.js';

/** A shell fragment that waits until `file` exists; after 60 s it gives up and prints gave-up. */
const gateWait = (file: string) => `i=0; while [ ! -e ${file} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; [ -e ${file} ] || echo gave-up`;

const TOKEN_SECRET = 'server-test-secret-0123456789abcdef';
const logLines: string[] = [];
const sink = new Writable({
  write(chunk: Buffer, _enc, cb) {
    logLines.push(...chunk.toString().split('\n').filter(Boolean));
    cb();
  },
});

let t: TestServer;
let alice: string;
let bob: string;
let bobKeyId: string;

before(async () => {
  t = await startTestServer('http', { config: { tokenSecret: TOKEN_SECRET }, logger: pino({ level: 'info' }, sink) });
  const a = await t.call('POST', '/v1/keys', { body: { name: 'alice', role: 'user' } });
  assert.equal(a.status, 201, a.text);
  alice = a.json.key;
  const b = await t.call('POST', '/v1/keys', { body: { name: 'bob', role: 'user', owner: 'bob' } });
  bob = b.json.key;
  bobKeyId = b.json.id;
});

after(async () => {
  await t.dispose();
});

async function newBox(key: string, extra: Record<string, unknown> = {}): Promise<string> {
  const r = await t.call('POST', '/v1/boxes', { key, body: { image: IMAGE, ...extra } });
  assert.equal(r.status, 201, r.text);
  return r.json.id;
}

async function boxToken(id: string): Promise<string> {
  const r = await t.call('POST', `/v1/boxes/${id}/exec`, { body: { cmd: ['sh', '-c', 'echo $SBX_TOKEN'] } });
  assert.equal(r.status, 200, r.text);
  return r.json.stdout.trim();
}

describe('health, openapi, first start', () => {
  test('healthz and readyz answer without auth; openapi lists the routes', async () => {
    assert.deepEqual((await t.call('GET', '/healthz', { key: null })).json, { ok: true });
    const ready = await t.call('GET', '/readyz', { key: null });
    assert.equal(ready.status, 200);
    assert.equal(ready.json.ready, true);
    const spec = await t.call('GET', '/openapi.json', { key: null });
    assert.equal(spec.status, 200);
    for (const p of ['/v1/boxes', '/v1/boxes/{id}/exec', '/v1/boxes/{id}/heartbeat', '/v1/workspaces', '/v1/keys', '/v1/pools', '/v1/images/pull'])
      assert.ok(spec.json.paths[p], `openapi has ${p}`);
    assert.ok(spec.json.paths['/v1/boxes'].post.requestBody, 'the create body schema is in the spec');
  });

  test('the first start made one admin key, stored as a hash only', async () => {
    const { readFile, stat } = await import('node:fs/promises');
    const file = t.server.keys.file;
    const text = await readFile(file, 'utf8');
    const secret = /^sbxk_[0-9a-f]{16}_(.{43})$/.exec(t.admin)?.[1];
    assert.ok(secret, 'the admin key has the documented shape');
    assert.ok(!text.includes(secret), 'the secret is not in the file');
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    const keys = await t.call('GET', '/v1/keys');
    assert.equal(keys.status, 200);
    assert.ok(keys.json.keys.some((k: { role: string; name: string }) => k.role === 'admin' && k.name === 'admin'));
    assert.ok(keys.json.keys.every((k: Record<string, unknown>) => !('hash' in k) && !('key' in k)));
  });
});

describe('auth and scoping', () => {
  test('no key, bad key, malformed header, revoked key → 401', async () => {
    for (const key of [null, 'sbxk_0000000000000000_' + 'A'.repeat(43), 'garbage']) {
      const r = await t.call('GET', '/v1/boxes', { key });
      assert.equal(r.status, 401, String(key));
      assert.equal(r.json.error.code, 'unauthorized');
    }
    const basic = await t.call('GET', '/v1/boxes', { key: null, headers: { authorization: 'Basic Zm9vOmJhcg==' } });
    assert.equal(basic.status, 401);
    const tmp = await t.call('POST', '/v1/keys', { body: { name: 'temp', role: 'user' } });
    assert.equal((await t.call('GET', '/v1/boxes', { key: tmp.json.key })).status, 200);
    assert.equal((await t.call('DELETE', `/v1/keys/${tmp.json.id}`)).status, 204);
    const revoked = await t.call('GET', '/v1/boxes', { key: tmp.json.key });
    assert.equal(revoked.status, 401, 'revocation is effective at once');
  });

  test('users: stamped as their owner, spoofing 403, others’ boxes 404, admin routes 403', async () => {
    const spoof = await t.call('POST', '/v1/boxes', { key: alice, body: { image: IMAGE, owner: 'bob' } });
    assert.equal(spoof.status, 403);
    assert.equal(spoof.json.error.code, 'forbidden');
    const id = await newBox(alice);
    const info = await t.call('GET', `/v1/boxes/${id}`, { key: alice });
    assert.equal(info.json.owner, 'alice');
    for (const [method, path] of [
      ['GET', `/v1/boxes/${id}`],
      ['DELETE', `/v1/boxes/${id}`],
      ['POST', `/v1/boxes/${id}/stop`],
    ] as const) {
      const r = await t.call(method, path, { key: bob });
      assert.equal(r.status, 404, `${method} ${path} as bob`);
      assert.equal(r.json.error.code, 'not_found');
    }
    const bobExec = await t.call('POST', `/v1/boxes/${id}/exec`, { key: bob, body: { cmd: ['true'] } });
    assert.equal(bobExec.status, 404);
    assert.deepEqual(
      (await t.call('GET', '/v1/boxes', { key: bob })).json.boxes.map((b: { id: string }) => b.id),
      [],
    );
    assert.equal((await t.call('GET', '/v1/boxes?owner=alice', { key: bob })).status, 403);
    assert.ok((await t.call('GET', '/v1/boxes', { key: alice })).json.boxes.some((b: { id: string }) => b.id === id));
    assert.ok(
      (await t.call('GET', '/v1/boxes?owner=alice')).json.boxes.some((b: { id: string }) => b.id === id),
      'admin filters by owner',
    );
    for (const [method, path, body] of [
      ['GET', '/v1/pools', undefined],
      ['POST', '/v1/pools', { name: 'x' }],
      ['DELETE', '/v1/pools/local', undefined],
      ['GET', `/v1/images/exists?ref=${IMAGE}`, undefined],
      ['POST', '/v1/images/pull', { ref: IMAGE }],
      ['GET', '/v1/keys', undefined],
      ['POST', '/v1/keys', { name: 'x', role: 'admin' }],
      ['DELETE', `/v1/keys/${bobKeyId}`, undefined],
    ] as const) {
      const r = await t.call(method, path, { key: alice, ...(body ? { body } : {}) });
      assert.equal(r.status, 403, `${method} ${path} as a user`);
      assert.equal(r.json.error.code, 'forbidden');
    }
    assert.equal((await t.call('DELETE', `/v1/boxes/${id}`, { key: alice })).status, 204);
  });

  test('box tokens: only on that box’s heartbeat; another box 403; expired 401; forged 401', async () => {
    const a = await newBox(alice);
    const b = await newBox(alice);
    const token = await boxToken(a);
    const hb = await t.call('POST', `/v1/boxes/${a}/heartbeat`, { key: token, body: { active: true, processCount: 3 } });
    assert.equal(hb.status, 204, hb.text);
    assert.equal((await t.call('GET', `/v1/boxes/${a}`)).json.processCount, 3);
    const other = await t.call('POST', `/v1/boxes/${b}/heartbeat`, { key: token, body: { active: true } });
    assert.equal(other.status, 403);
    for (const [method, path] of [
      ['GET', `/v1/boxes/${a}`],
      ['GET', '/v1/boxes'],
      ['POST', `/v1/boxes/${a}/exec`],
      ['GET', '/v1/keys'],
    ] as const) {
      const r = await t.call(method, path, { key: token, ...(method === 'POST' ? { body: { cmd: ['true'] } } : {}) });
      assert.equal(r.status, 403, `${method} ${path} with a box token`);
    }
    const nonce = token.split('.').at(-3)!;
    const expired = new BoxTokenService(Buffer.from(TOKEN_SECRET), () => Date.now() - 3_600_000).issue(a, nonce, 1000);
    const e = await t.call('POST', `/v1/boxes/${a}/heartbeat`, { key: expired, body: { active: true } });
    assert.equal(e.status, 401);
    assert.match(e.json.error.message, /expired/);
    const forged = token.slice(0, -4) + 'AAAA';
    assert.equal((await t.call('POST', `/v1/boxes/${a}/heartbeat`, { key: forged, body: { active: true } })).status, 401);
    // An owner's key may heartbeat too; another user's may not see the box.
    assert.equal((await t.call('POST', `/v1/boxes/${a}/heartbeat`, { key: alice, body: { active: false } })).status, 204);
    assert.equal((await t.call('POST', `/v1/boxes/${a}/heartbeat`, { key: bob, body: { active: true } })).status, 404);
    await t.call('DELETE', `/v1/boxes/${a}`);
    await t.call('DELETE', `/v1/boxes/${b}`);
  });

  test('failed authentications are rate-limited per address; a valid credential is never locked out', async () => {
    const s = await startTestServer('ratelimit'); // the default: 20 failures a minute per address
    try {
      const made = await s.call('POST', '/v1/boxes', { body: { image: IMAGE, ports: [{ containerPort: 3000 }] } });
      assert.equal(made.status, 201, made.text);
      const signed = await s.call('POST', `/v1/boxes/${made.json.id}/proxy-url`, { body: { port: 3000, signed: true } });
      const goodUrl = new URL(signed.json.url as string);
      for (let i = 0; i < 20; i++) assert.equal((await s.call('GET', '/v1/boxes', { key: 'wrong' })).status, 401);
      const limited = await s.call('GET', '/v1/boxes', { key: 'wrong' });
      assert.equal(limited.status, 429);
      assert.equal(limited.json.error.code, 'limit_exceeded');
      assert.ok(Number(limited.headers.get('retry-after')) > 0);
      // Twenty bad keys from this address, and the good key still works from it.
      assert.equal((await s.call('GET', '/v1/boxes')).status, 200, 'the admin key is not locked out');
      assert.equal((await s.call('GET', '/v1/boxes', { key: 'wrong' })).status, 429, 'a bad key still is');
      // The same for the e2b control plane's X-API-KEY and the proxy's signed URLs: one limiter.
      const e2b = (key: string) => fetch(`${s.url}/e2b/api/sandboxes`, { headers: { 'x-api-key': key } });
      assert.equal((await e2b('wrong')).status, 429);
      assert.equal((await e2b(s.admin)).status, 200);
      const forged = `${goodUrl.pathname}?sbx_token=${goodUrl.searchParams.get('sbx_token')!.slice(0, -4)}AAAA`;
      assert.equal((await s.call('GET', forged, { key: null })).status, 429);
      const good = await rawRequest(s.url, 'GET', `${goodUrl.pathname}${goodUrl.search}`, {});
      assert.equal(good.status, 303, `a good signed URL is not locked out: ${good.text}`);
      assert.equal((await s.call('GET', '/healthz', { key: null })).status, 200);
    } finally {
      await s.dispose();
    }
  });

  test('a request with no credential at all is a failed authentication too, at the API and at the port proxy', async () => {
    const s = await startTestServer('nocred', { serve: { authFailures: { max: 3, windowMs: 60_000 } } });
    try {
      const made = await s.call('POST', '/v1/boxes', { body: { image: IMAGE, ports: [{ containerPort: 3000 }] } });
      assert.equal(made.status, 201, made.text);
      const proxied = new URL((await s.call('POST', `/v1/boxes/${made.json.id}/proxy-url`, { body: { port: 3000 } })).json.url as string).pathname;
      assert.equal((await s.call('GET', '/v1/boxes', { key: null })).status, 401);
      for (let i = 0; i < 2; i++) assert.equal((await s.call('GET', proxied, { key: null })).status, 401);
      const limited = await s.call('GET', proxied, { key: null });
      assert.equal(limited.status, 429, 'the proxy counted its requests without a credential');
      assert.ok(Number(limited.headers.get('retry-after')) > 0);
      assert.equal((await s.call('GET', '/v1/boxes', { key: null })).status, 429, 'one count for the API and the proxy');
      assert.equal((await s.call('GET', '/v1/boxes')).status, 200, 'a valid key still works');
    } finally {
      await s.dispose();
    }
  });

  test('the timing-safe comparison is in the code', async () => {
    const { readFile } = await import('node:fs/promises');
    const src = await readFile(new URL('./keys.ts', import.meta.url), 'utf8');
    assert.match(src, /timingSafeEqual\(got, want\)/);
  });
});

describe('boxes and exec', () => {
  test('create, get, list with filters, stop, start, getOrCreate, remove', async () => {
    const id = `srv-${process.pid}-a`;
    const c = await t.call('POST', '/v1/boxes', { key: alice, body: { id, image: IMAGE, labels: { team: 'x' }, idleTimeoutMs: 600_000 } });
    assert.equal(c.status, 201, c.text);
    assert.equal(c.json.idleTimeoutMs, 600_000);
    assert.equal(c.json.status, 'running');
    const dup = await t.call('POST', '/v1/boxes', { key: alice, body: { id, image: IMAGE } });
    assert.equal(dup.status, 409);
    assert.equal(dup.json.error.code, 'conflict');
    const again = await t.call('POST', '/v1/boxes?getOrCreate=true', { key: alice, body: { id, image: IMAGE } });
    assert.equal(again.status, 200);
    assert.equal(again.json.containerId, c.json.containerId);
    const bobs = await t.call('POST', '/v1/boxes?getOrCreate=true', { key: bob, body: { id, image: IMAGE } });
    assert.equal(bobs.status, 404, 'another owner cannot get it, and is told what a missing box tells');
    assert.deepEqual(bobs.json, (await t.call('GET', `/v1/boxes/${id}`, { key: bob })).json, 'the same body as GET of that box');
    const missing = (await t.call('GET', `/v1/boxes/${id}-gone`, { key: bob })).json;
    assert.deepEqual(bobs.json, JSON.parse(JSON.stringify(missing).replaceAll(`${id}-gone`, id)), 'the same body as for an id that does not exist');
    assert.ok(!bobs.text.includes('alice') && !/taken|another owner|exists/.test(bobs.text), bobs.text);
    assert.deepEqual(
      (await t.call('GET', '/v1/boxes?label=team=x', { key: alice })).json.boxes.map((b: { id: string }) => b.id),
      [id],
    );
    assert.deepEqual((await t.call('GET', '/v1/boxes?label=team=y', { key: alice })).json.boxes, []);
    assert.equal((await t.call('GET', '/v1/boxes?pool=local', { key: alice })).json.boxes.length >= 1, true);
    const stopped = await t.call('POST', `/v1/boxes/${id}/stop`, { key: alice });
    assert.equal(stopped.status, 200);
    assert.equal(stopped.json.status, 'stopped');
    const started = await t.call('POST', `/v1/boxes/${id}/start`, { key: alice });
    assert.equal(started.json.status, 'running');
    assert.equal((await t.call('DELETE', `/v1/boxes/${id}`, { key: alice })).status, 204);
    assert.equal((await t.call('GET', `/v1/boxes/${id}`, { key: alice })).status, 404);
    assert.equal((await t.call('DELETE', `/v1/boxes/${id}`, { key: alice })).status, 404);
    const created = await t.call('POST', '/v1/boxes?getOrCreate=1', { key: alice, body: { id, image: IMAGE } });
    assert.equal(created.status, 201, 'getOrCreate creates when absent');
    await t.call('DELETE', `/v1/boxes/${id}`);
  });

  test('a box whose command fails is stopped with its exit code, not restarted; an OOM kill says so', async () => {
    const engine = new DockerRuntime(testEnv.engineAddr);
    try {
      const before = (await t.call('GET', '/v1/boxes', { key: alice })).json.boxes.length;
      const missing = await t.call('POST', '/v1/boxes', { key: alice, body: { image: IMAGE, cmd: ['no-such-program'] } });
      assert.equal(missing.status, 400, missing.text);
      assert.deepEqual([missing.json.error.code, missing.json.error.details?.field], ['invalid_argument', 'cmd']);
      assert.match(missing.json.error.message, /no-such-program/);
      assert.equal((await t.call('GET', '/v1/boxes', { key: alice })).json.boxes.length, before, 'nothing is left of it');
      const cases = [
        { cmd: ['sh', '-c', 'echo hi; exit 4'], exitCode: 4, oomKilled: false },
        // The shell holds 200 MB of output in a variable under a 16 MiB limit: the kernel's OOM killer.
        { cmd: ['sh', '-c', 'a=$(head -c 200000000 /dev/zero | tr "\\0" a); echo survived'], memory: 16 * 1024 * 1024, exitCode: 137, oomKilled: true },
      ];
      for (const { cmd, memory, exitCode, oomKilled } of cases) {
        const c = await t.call('POST', '/v1/boxes', { key: alice, body: { image: IMAGE, cmd, ...(memory ? { memory } : {}) } });
        assert.equal(c.status, 201, c.text);
        // The engine's own view: wait until the main process has ended once (a restart shows as
        // `restarting`, or as a later StartedAt).
        let seen = await engine.inspect(c.json.containerId);
        const firstStart = seen.startedAt;
        for (let i = 0; i < 600 && seen.status === 'running' && seen.startedAt === firstStart; i++) {
          await new Promise((r) => setTimeout(r, 100));
          seen = await engine.inspect(c.json.containerId);
        }
        assert.equal(seen.status, 'exited', `the engine does not restart it (${seen.status})`);
        const got = await t.call('GET', `/v1/boxes/${c.json.id}`, { key: alice });
        assert.deepEqual([got.json.status, got.json.exitCode, got.json.oomKilled], ['stopped', exitCode, oomKilled], got.text);
        assert.equal((await engine.inspect(c.json.containerId)).startedAt, firstStart, 'never started again');
        assert.equal((await t.call('DELETE', `/v1/boxes/${c.json.id}`, { key: alice })).status, 204);
      }
    } finally {
      await engine.close();
    }
  });

  test('GET /v1/boxes/:id/logs: SSE follows the command to its end, JSON lines otherwise; a read, not use; owner-checked; bad input names the field', async () => {
    const cmd = ['sh', '-c', 'echo one; echo two >&2; until [ -e /tmp/go ]; do sleep 0.05; done; echo three; exit 4'];
    const c = await t.call('POST', '/v1/boxes', { key: alice, body: { image: IMAGE, cmd } });
    assert.equal(c.status, 201, c.text);
    const id = c.json.id as string;
    const res = await fetch(`${t.url}/v1/boxes/${id}/logs?follow=true`, { headers: { authorization: `Bearer ${alice}`, accept: 'text/event-stream' } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    const events = readSse(res.body as unknown as AsyncIterable<Uint8Array>);
    const followed: Array<{ stream: string; data: string }> = [];
    while (followed.length < 2) {
      const e = (await events.next()).value!;
      if (e.event === 'log') followed.push(JSON.parse(e.data));
    }
    assert.equal((await t.call('POST', `/v1/boxes/${id}/exec`, { key: alice, body: { cmd: ['touch', '/tmp/go'] } })).json.exitCode, 0);
    const rest = [];
    for await (const e of events) rest.push(e);
    assert.equal(rest.at(-1)?.event, 'end', 'the follow ends with the command');
    followed.push(...rest.filter((e) => e.event === 'log').map((e) => JSON.parse(e.data)));
    const by = (stream: string) => followed.filter((x) => x.stream === stream).map((x) => x.data);
    assert.deepEqual([by('stdout'), by('stderr')], [['one\n', 'three\n'], ['two\n']]);
    const box = await t.call('GET', `/v1/boxes/${id}`, { key: alice });
    assert.deepEqual([box.json.status, box.json.exitCode], ['stopped', 4]);

    const lines = await t.call('GET', `/v1/boxes/${id}/logs?tail=1`, { key: alice });
    assert.equal(lines.status, 200, lines.text);
    assert.match(lines.headers.get('content-type') ?? '', /application\/x-ndjson/);
    const chunks = lines.text
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      chunks.map((x: { stream: string; data: string }) => [x.stream, x.data]),
      [['stdout', 'three\n']],
    );
    assert.ok(!Number.isNaN(Date.parse(chunks[0].time)));
    const since = await t.call('GET', `/v1/boxes/${id}/logs?since=${encodeURIComponent(chunks[0].time)}`, { key: alice });
    assert.deepEqual(
      since.text
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l).data),
      ['three\n'],
    );
    const recent = await t.call('GET', `/v1/boxes/${id}/logs?sinceMs=3600000`, { key: alice });
    assert.equal(recent.text.split('\n').filter((l) => l !== '').length, 3);
    assert.equal((await t.call('GET', `/v1/boxes/${id}`, { key: alice })).json.lastActive, box.json.lastActive, 'reading logs is not use');

    const bobs = await t.call('GET', `/v1/boxes/${id}/logs`, { key: bob });
    assert.equal(bobs.status, 404);
    const missing = await t.call('GET', `/v1/boxes/${id}-gone/logs`, { key: alice });
    assert.deepEqual(bobs.json, JSON.parse(JSON.stringify(missing.json).replaceAll(`${id}-gone`, id)), 'the same body as for a box that does not exist');
    for (const [query, field] of [
      ['tail=-1', 'tail'],
      ['tail=1.5', 'tail'],
      ['since=yesterday', 'since'],
      ['sinceMs=10m', 'sinceMs'],
      [`since=${encodeURIComponent(new Date().toISOString())}&sinceMs=5`, 'sinceMs'],
      ['follow=maybe', 'follow'],
      ['nope=1', ''],
    ] as const) {
      const bad = await t.call('GET', `/v1/boxes/${id}/logs?${query}`, { key: alice });
      assert.equal(bad.status, 400, `${query}: ${bad.text}`);
      assert.equal(bad.json.error.code, 'invalid_argument');
      if (field) assert.match(String(bad.json.error.details?.field), new RegExp(`(^|\\.)${field}$`), `${query}: ${bad.text}`);
    }
    assert.equal((await t.call('DELETE', `/v1/boxes/${id}`, { key: alice })).status, 204);
  });

  test('getOrCreate racing another owner’s create of the same id: 404 like a missing box, never 409', async () => {
    for (let i = 0; i < 3; i++) {
      const id = `srv-${process.pid}-race${i}`;
      const [a, b] = await Promise.all([
        t.call('POST', '/v1/boxes', { key: alice, body: { id, image: IMAGE } }),
        t.call('POST', '/v1/boxes?getOrCreate=true', { key: bob, body: { id, image: IMAGE } }),
      ]);
      const winner = a.status === 201 ? alice : bob;
      assert.ok([a.status, b.status].includes(201), `${a.text} ${b.text}`);
      if (a.status === 201) {
        assert.equal(b.status, 404, b.text);
        assert.deepEqual(b.json, (await t.call('GET', `/v1/boxes/${id}`, { key: bob })).json);
      } else assert.equal(a.status, 409, 'a plain create of a taken id stays a conflict');
      assert.equal((await t.call('DELETE', `/v1/boxes/${id}`, { key: winner })).status, 204);
    }
  });

  test('exec: stdout, stderr, exit code, string and base64 stdin, env, workDir, user, timeout', async () => {
    const id = await newBox(alice);
    const r = await t.call('POST', `/v1/boxes/${id}/exec`, {
      key: alice,
      body: { cmd: ['sh', '-c', 'cat; echo "$FOO $(pwd) $(id -u)" >&2; exit 7'], stdin: 'in\n', env: { FOO: 'bar' }, workDir: '/tmp', user: '1000' },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.exitCode, 7);
    assert.equal(r.json.stdout, 'in\n');
    assert.equal(r.json.stderr, 'bar /tmp 1000\n');
    const b64 = await t.call('POST', `/v1/boxes/${id}/exec`, {
      key: alice,
      body: { cmd: ['od', '-An', '-tx1'], stdin: { base64: Buffer.from([0, 255, 10]).toString('base64') } },
    });
    assert.match(b64.json.stdout, /00 ff 0a/);
    const slow = await t.call('POST', `/v1/boxes/${id}/exec`, { key: alice, body: { cmd: ['sleep', '30'], timeoutMs: 300 } });
    assert.equal(slow.json.timedOut, true);
    assert.equal(slow.json.exitCode, 137);
    await t.call('DELETE', `/v1/boxes/${id}`);
  });

  test('SSE exec: events arrive over time, not as one buffer; stdin; exit event', async () => {
    const id = await newBox(alice);
    const res = await fetch(`${t.url}/v1/boxes/${id}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      // Each part after 'one' waits until the test saw the one before (it then creates a gate
      // file): a stream that held output back would keep the gates shut, and the command says so.
      body: JSON.stringify({
        cmd: ['sh', '-c', `cat; echo one; ${gateWait('/tmp/g1')}; echo two >&2; ${gateWait('/tmp/g2')}; echo three; exit 4`],
        stdin: 'zero\n',
      }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    const gates = [
      { after: 'one', file: '/tmp/g1' },
      { after: 'two', file: '/tmp/g2' },
    ];
    const opened: Array<Promise<unknown>> = [];
    let all = '';
    const decoder = new TextDecoder();
    for await (const chunk of res.body!) {
      all += decoder.decode(chunk as Uint8Array, { stream: true });
      const next = gates[opened.length];
      if (next && all.includes(next.after)) opened.push(t.call('POST', `/v1/boxes/${id}/exec`, { body: { cmd: ['touch', next.file] } }));
    }
    await Promise.all(opened);
    const events = all
      .split('\n\n')
      .filter((e) => e.startsWith('event:'))
      .map((e) => ({ event: /^event: (\w+)/.exec(e)![1], data: JSON.parse(/\ndata: (.*)$/.exec(e)![1]!) }));
    // Output that arrives together may travel as one event ('zero' and 'one' often do): merge
    // neighbours of one stream, then the order and the texts are what the command wrote.
    const merged: Array<{ event: string; text: string }> = [];
    for (const e of events.slice(0, -1)) {
      const prev = merged.at(-1);
      if (prev && prev.event === e.event) prev.text += e.data.text;
      else merged.push({ event: e.event!, text: e.data.text });
    }
    assert.deepEqual(merged, [
      { event: 'stdout', text: 'zero\none\n' },
      { event: 'stderr', text: 'two\n' },
      { event: 'stdout', text: 'three\n' },
    ]);
    assert.equal(events.at(-1)!.event, 'exit');
    assert.equal(events.at(-1)!.data.exitCode, 4);
    await t.call('DELETE', `/v1/boxes/${id}`);
  });

  test('SSE exec: a client that goes away kills the process inside the box', async () => {
    const id = await newBox(alice);
    const controller = new AbortController();
    const res = await fetch(`${t.url}/v1/boxes/${id}/exec`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ cmd: ['sh', '-c', 'echo started; exec sleep 300'] }),
    });
    const reader = res.body!.getReader();
    let seen = '';
    while (!seen.includes('started')) seen += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    await waitFor(
      async () => {
        const ps = await t.call('POST', `/v1/boxes/${id}/exec`, { body: { cmd: ['sh', '-c', 'ps | grep -c "[s]leep 300" || true'] } });
        return ps.json.stdout.trim() === '0';
      },
      { what: 'sleep 300 to be killed', intervalMs: 100 },
    );
    await t.call('DELETE', `/v1/boxes/${id}`);
  });

  test('SSE exec: a client that left while its paused box woke up does not leave the process running', async () => {
    const id = await newBox(alice);
    assert.equal((await t.call('POST', `/v1/boxes/${id}/pause`, { key: alice })).status, 200);
    // The whole request, then the connection closed at once: the server reads it, wakes the box
    // and starts the command after the client's 'close' went by.
    const body = JSON.stringify({ cmd: ['sh', '-c', 'touch /tmp/sse-left; exec sleep 301'] });
    const u = new URL(t.url);
    const sock = connect({ host: u.hostname, port: Number(u.port) });
    await once(sock, 'connect');
    sock.end(
      `POST /v1/boxes/${id}/exec HTTP/1.1\r\nhost: ${u.host}\r\nauthorization: Bearer ${alice}\r\ncontent-type: application/json\r\n` +
        `accept: text/event-stream\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    sock.resume();
    await once(sock, 'close');
    const sh = async (cmd: string) => (await t.call('POST', `/v1/boxes/${id}/exec`, { body: { cmd: ['sh', '-c', cmd] } })).json.stdout.trim();
    await waitFor(async () => (await sh('[ -e /tmp/sse-left ] && echo yes || true')) === 'yes', { what: 'the command to have started', intervalMs: 100 });
    await waitFor(async () => (await sh('ps | grep -c "[s]leep 301" || true')) === '0', { what: 'sleep 301 to be killed', intervalMs: 100 });
    await t.call('DELETE', `/v1/boxes/${id}`);
  });
});

describe('admin: keys, pools, images', () => {
  test('keys: create (shown once), list, revoke, last admin kept', async () => {
    const k = await t.call('POST', '/v1/keys', { body: { name: 'ops', role: 'admin' } });
    assert.equal(k.status, 201);
    assert.match(k.json.key, /^sbxk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);
    const list = await t.call('GET', '/v1/keys');
    assert.ok(list.json.keys.some((x: { id: string }) => x.id === k.json.id));
    assert.equal((await t.call('DELETE', `/v1/keys/${k.json.id}`)).status, 204);
    assert.equal((await t.call('DELETE', `/v1/keys/${k.json.id}`)).status, 404);
    const first = list.json.keys.find((x: { name: string }) => x.name === 'admin');
    const last = await t.call('DELETE', `/v1/keys/${first.id}`);
    assert.equal(last.status, 409, 'the last admin key is not revoked');
  });

  test('pools: list, add, duplicate, remove, unknown', async () => {
    const list = await t.call('GET', '/v1/pools');
    assert.equal(list.json.pools[0].name, 'local');
    const add = await t.call('POST', '/v1/pools', { body: { name: 'extra', addr: 'local', maxTotal: 2 } });
    assert.equal(add.status, 201, add.text);
    assert.equal(add.json.maxTotal, 2);
    assert.equal((await t.call('POST', '/v1/pools', { body: { name: 'extra' } })).status, 409);
    assert.equal((await t.call('DELETE', '/v1/pools/extra')).status, 204);
    const gone = await t.call('DELETE', '/v1/pools/extra');
    assert.equal(gone.status, 404);
    assert.equal(gone.json.error.code, 'pool_not_found');
  });

  test('a refused pool leaves nothing behind: the list is unchanged, workspaces and boxes are still created', async () => {
    const before = (await t.call('GET', '/v1/pools')).json;
    const bad = await t.call('POST', '/v1/pools', { body: { name: 'bad', addr: 'ftp://x' } });
    assert.equal(bad.status, 400, bad.text);
    assert.deepEqual([bad.json.error.code, bad.json.error.details?.field], ['invalid_argument', 'addr']);
    assert.deepEqual((await t.call('GET', '/v1/pools')).json, before);
    assert.equal((await t.call('DELETE', '/v1/pools/bad')).status, 404);
    const ws = await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'after-a-bad-pool' } });
    assert.equal(ws.status, 201, ws.text);
    const id = await newBox(alice, { workspaceId: ws.json.id });
    assert.equal((await t.call('DELETE', `/v1/boxes/${id}`)).status, 204);
    assert.equal((await t.call('DELETE', `/v1/workspaces/${ws.json.id}`)).status, 204);
  });

  test('a refusal that force would let through says ?force=true over HTTP', async () => {
    const ws = await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'force-hint' } });
    const id = await newBox(alice, { workspaceId: ws.json.id });
    const pool = await t.call('DELETE', '/v1/pools/local');
    assert.equal(pool.status, 409);
    assert.equal(pool.json.error.code, 'pool_in_use');
    assert.match(pool.json.error.message, /add \?force=true$/);
    assert.doesNotMatch(pool.json.error.message, /pass|\{ force/);
    assert.deepEqual([pool.json.error.details.option, pool.json.error.details.hint], ['force', 'add ?force=true']);
    const mounted = await t.call('DELETE', `/v1/workspaces/${ws.json.id}`, { key: alice });
    assert.equal(mounted.status, 409);
    assert.match(mounted.json.error.message, /mounted by a running box.*add \?force=true$/);
    await t.call('DELETE', `/v1/boxes/${id}`);
    assert.equal((await t.call('DELETE', `/v1/workspaces/${ws.json.id}`, { key: alice })).status, 204);
  });

  test('pull from a registry whose name does not resolve: not_available naming the registry host, not internal', async () => {
    const pull = await t.call('POST', '/v1/images/pull', { body: { ref: 'nosuchhost.invalid/img:1' }, headers: { accept: 'text/event-stream' } });
    assert.equal(pull.status, 200);
    const data = /event: error\ndata: (.*)\n/.exec(pull.text)?.[1];
    assert.ok(data, pull.text);
    const { error } = JSON.parse(data) as { error: { code: string; message: string; details: Record<string, unknown> } };
    assert.equal(error.code, 'not_available', error.message);
    assert.match(error.message, /registry nosuchhost\.invalid cannot be reached/);
    assert.equal(error.details['registry'], 'nosuchhost.invalid');
  });

  test('images: exists, and pull progress as SSE (an error event for an unknown image)', async () => {
    const yes = await t.call('GET', `/v1/images/exists?ref=${encodeURIComponent(IMAGE)}`);
    assert.deepEqual(yes.json, { pool: 'local', ref: IMAGE, exists: true });
    const no = await t.call('GET', '/v1/images/exists?ref=sbx-no-such-image:latest');
    assert.equal(no.json.exists, false);
    const pull = await t.call('POST', '/v1/images/pull', { body: { ref: '127.0.0.1:1/sbx/nothing:latest' }, headers: { accept: 'text/event-stream' } });
    assert.equal(pull.status, 200);
    assert.match(pull.text, /event: error\ndata: \{"error":\{"code":"/);
    const unknownPool = await t.call('POST', '/v1/images/pull', { body: { ref: IMAGE, pool: 'nope' } });
    assert.equal(unknownPool.status, 404);
  });
});

describe('malformed requests', () => {
  test('a bad field is named as the caller sent it, with where it was (body, query, path)', async () => {
    const box = await newBox(alice);
    const cases: Array<[string, string, unknown, string, string, RegExp]> = [
      ['POST', '/v1/boxes', {}, 'image', 'body', /^image: is required/],
      ['POST', '/v1/boxes', { image: 42 }, 'image', 'body', /^image: /],
      ['POST', '/v1/boxes', { image: IMAGE, memory: '1g' }, 'memory', 'body', /^memory: /],
      ['POST', '/v1/boxes', { image: IMAGE, labels: { k: 5 } }, 'labels.k', 'body', /^labels\.k: /],
      ['POST', '/v1/boxes', { image: IMAGE, bogus: 1 }, 'bogus', 'body', /^bogus: unknown field/],
      ['GET', '/v1/boxes?colour=red', undefined, 'colour', 'query', /^colour: unknown query parameter/],
      ['POST', '/v1/boxes?getOrCreate=maybe', { image: IMAGE, id: 'x1' }, 'getOrCreate', 'query', /^getOrCreate: /],
      ['POST', `/v1/boxes/${box}/exec`, { cmd: ['true'], timeoutMs: -5 }, 'timeoutMs', 'body', /^timeoutMs: /],
      ['GET', `/v1/boxes/${'a'.repeat(64)}`, undefined, 'id', 'path', /^id: /],
    ];
    const failures: string[] = [];
    for (const [method, path, body, field, place, message] of cases) {
      const r = await t.call(method, path, body === undefined ? { key: alice } : { key: alice, body });
      const e = r.json?.error;
      if (r.status !== 400 || e?.details?.field !== field || e?.details?.in !== place || !message.test(e?.message ?? ''))
        failures.push(`${method} ${path.slice(0, 60)} ${JSON.stringify(body)}: got ${r.status} ${r.text.slice(0, 200)}; want ${field} in ${place}`);
      if (/\b(body|querystring|params)\./.test(r.text)) failures.push(`${method} ${path}: a wire path in ${r.text.slice(0, 200)}`);
    }
    assert.deepEqual(failures, []);
    await t.call('DELETE', `/v1/boxes/${box}`);
  });

  test('errors of a box name its id, never its container id', async () => {
    const id = await newBox(alice, { stopTimeoutMs: 1000 });
    const containerId = (await t.call('GET', `/v1/boxes/${id}`, { key: alice })).json.containerId as string;
    const missing = await t.call('POST', `/v1/boxes/${id}/exec`, { key: alice, body: { cmd: ['no-such-program'] } });
    assert.equal(missing.status, 404);
    assert.match(missing.json.error.message, new RegExp(`'no-such-program' was not found in box ${id}`));
    assert.equal((await t.call('POST', `/v1/boxes/${id}/stop`, { key: alice })).status, 200);
    const stopped = await t.call('POST', `/v1/boxes/${id}/exec`, { key: alice, body: { cmd: ['true'] } });
    assert.equal(stopped.status, 409);
    assert.match(stopped.json.error.message, new RegExp(`box ${id} is not running`));
    for (const r of [missing, stopped]) assert.ok(!r.json.error.message.includes(containerId.slice(0, 12)), r.json.error.message);
    await t.call('DELETE', `/v1/boxes/${id}`, { key: alice });
  });

  test('each is a 4xx with its code; the server stays healthy', async () => {
    const box = await newBox(alice);
    const ws = await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'bad-input' } });
    assert.equal(ws.status, 201, ws.text);
    const wsId = ws.json.id;
    const json = (body: unknown) => ({ body });
    const cases: Array<
      [string, string, { body?: unknown; headers?: Record<string, string>; raw?: string; key?: string | null; rawPath?: boolean }, number, string]
    > = [
      ['POST', '/v1/boxes', { body: '{"image": ', headers: { 'content-type': 'application/json' } }, 400, 'invalid_argument'],
      ['POST', '/v1/boxes', { raw: '', headers: { 'content-type': 'application/json' } }, 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({ image: IMAGE, bogus: 1 }), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({ image: 42 }), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({}), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json([1, 2]), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', { body: 'null', headers: { 'content-type': 'application/json' } }, 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({ image: IMAGE, idleTimeoutMs: -1 }), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({ image: IMAGE, memory: '1g' }), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({ image: IMAGE, labels: ['a'] }), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({ image: IMAGE, env: { SBX_TOKEN: 'x' } }), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({ image: IMAGE, id: '../etc' }), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({ image: IMAGE, network: 'host' }), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({ image: 'UPPER/Case:bad tag' }), 400, 'invalid_argument'],
      ['POST', '/v1/boxes', json({ image: IMAGE, labels: { k: 'x'.repeat(2_000_000) } }), 413, 'invalid_argument'],
      ['POST', '/v1/boxes', { raw: 'image=x', headers: { 'content-type': 'text/plain' } }, 415, 'invalid_argument'],
      ['POST', '/v1/boxes?getOrCreate=maybe', json({ image: IMAGE, id: 'x1' }), 400, 'invalid_argument'],
      ['GET', '/v1/boxes/%2e%2e', { rawPath: true }, 400, 'invalid_argument'],
      ['GET', `/v1/boxes/${'a'.repeat(64)}`, {}, 400, 'invalid_argument'],
      ['GET', '/v1/boxes/sb-doesnotexist', {}, 404, 'not_found'],
      ['GET', '/v1/boxes?label=novalue', {}, 400, 'invalid_argument'],
      ['GET', '/v1/boxes?colour=red', {}, 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/exec`, json({ cmd: [] }), 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/exec`, json({ cmd: 'ls -l' }), 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/exec`, json({ cmd: ['cat'], stdin: { base64: 'not*base64' } }), 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/exec`, json({ cmd: ['cat'], stdin: 42 }), 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/exec`, json({ cmd: ['true'], timeoutMs: -5 }), 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/exec`, json({ cmd: ['true'], timeoutMs: 1.5 }), 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/exec`, json({ cmd: ['true'], shell: true }), 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/exec`, json({ cmd: ['true'], workDir: 'relative/dir' }), 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/exec`, json({ cmd: ['a\u0000b'] }), 400, 'invalid_argument'],
      ['POST', '/v1/boxes/sb-doesnotexist/exec', json({ cmd: ['true'] }), 404, 'not_found'],
      ['POST', `/v1/boxes/${box}/heartbeat`, json({}), 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/heartbeat`, json({ active: true, processCount: -1 }), 400, 'invalid_argument'],
      ['POST', `/v1/boxes/${box}/heartbeat`, json({ active: 'yes' }), 400, 'invalid_argument'],
      ['GET', '/v1/workspaces/Bad_ID', {}, 400, 'invalid_argument'],
      ['GET', `/v1/workspaces/${wsId}/files/%2e%2e/%2e%2e/etc/passwd`, { rawPath: true }, 400, 'invalid_argument'],
      [
        'PUT',
        `/v1/workspaces/${wsId}/files/a/%2e%2e/%2e%2e/escape`,
        { raw: 'x', rawPath: true, headers: { 'content-type': 'application/octet-stream' } },
        400,
        'invalid_argument',
      ],
      ['GET', `/v1/workspaces/${wsId}/files/%2Fetc%2Fpasswd`, {}, 400, 'invalid_argument'],
      ['POST', `/v1/workspaces/${wsId}/files/x`, json({ op: 'rename', to: '../../out' }), 400, 'invalid_argument'],
      ['POST', `/v1/workspaces/${wsId}/files/x`, json({ op: 'explode' }), 400, 'invalid_argument'],
      ['PATCH', `/v1/workspaces/${wsId}`, json({ labels: 5 }), 400, 'invalid_argument'],
      ['GET', `/v1/workspaces/${wsId}/files/missing.txt`, {}, 404, 'not_found'],
      ['POST', '/v1/keys', json({ name: 'x', role: 'root' }), 400, 'invalid_argument'],
      ['DELETE', '/v1/keys/not-a-key-id', {}, 400, 'invalid_argument'],
      ['POST', '/v1/pools', json({ name: 'Upper' }), 400, 'invalid_argument'],
      ['GET', '/v1/images/exists', {}, 400, 'invalid_argument'],
      ['GET', '/v1/nothing-here', {}, 404, 'not_found'],
      ['GET', '/v1/boxes/%zz', { rawPath: true }, 400, 'invalid_argument'],
      ['GET', '/v1/boxes', { key: null, headers: { authorization: 'Bearer' } }, 401, 'unauthorized'],
    ];
    const failures: string[] = [];
    for (const [method, path, opts, status, code] of cases) {
      const r = await t.call(method, path, opts.key === undefined ? { key: alice, ...opts } : opts);
      if (r.status !== status || r.json?.error?.code !== code || typeof r.json?.error?.message !== 'string')
        failures.push(`${method} ${path.slice(0, 80)}: got ${r.status} ${r.text.slice(0, 160)}, want ${status} ${code}`);
    }
    assert.deepEqual(failures, []);
    assert.ok(cases.length >= 30);
    assert.equal((await t.call('GET', '/healthz', { key: null })).status, 200);
    assert.ok(!logLines.some((l) => l.includes('"status":500')), 'no request ended in a 500');
    await t.call('DELETE', `/v1/boxes/${box}`);
    await t.call('DELETE', `/v1/workspaces/${wsId}?force=true`);
  });
});

describe('observability', () => {
  test('metrics count requests, creates, errors, execs and heartbeats', async () => {
    const id = await newBox(alice);
    await t.call('POST', `/v1/boxes/${id}/exec`, { key: alice, body: { cmd: ['true'] } });
    await t.call('POST', `/v1/boxes/${id}/heartbeat`, { key: alice, body: { active: true } });
    const m = (await t.call('GET', '/metrics', { key: null })).text;
    assert.match(m, /sbx_boxes\{pool="local",status="running"\} [1-9]/);
    assert.match(m, /sbx_box_creates_total\{pool="local"\} [1-9]/);
    assert.match(m, /sbx_errors_total\{code="invalid_argument"\} [1-9]/);
    assert.match(m, /sbx_execs_total\{transport="http",outcome="exited"\} [1-9]/);
    assert.match(m, /sbx_exec_duration_seconds_count\{transport="http"\} [1-9]/);
    assert.match(m, /sbx_heartbeats_total\{transport="http"\} [1-9]/);
    assert.match(m, /sbx_http_request_duration_seconds_bucket\{le="[^"]+",method="POST",route="\/v1\/boxes\/:id\/exec",status="200"\}/);
    assert.match(m, /sbx_cleanup_actions\{reason="ticks"\}/);
    await t.call('DELETE', `/v1/boxes/${id}`);
  });

  test('one log line per request with route, status, ms, subject; never a key or a token', async () => {
    const id = await newBox(alice);
    const token = await boxToken(id);
    await t.call('POST', `/v1/boxes/${id}/heartbeat`, { key: token, body: { active: true } });
    const created = await t.call('POST', '/v1/keys', { body: { name: 'logged', role: 'user' } });
    await t.call('GET', '/v1/boxes', { key: 'sbxk_0123456789abcdef_' + 'S'.repeat(43) });
    await t.call('DELETE', `/v1/boxes/${id}`);
    const requests = logLines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
    const hb = requests.find((l) => l.route === '/v1/boxes/:id/heartbeat' && l.subject === `box:${id}`);
    assert.ok(hb, 'the heartbeat is logged with the box as subject');
    assert.equal(hb.status, 204);
    assert.equal(typeof hb.ms, 'number');
    assert.ok(requests.some((l) => l.subject === 'user:alice'));
    const everything = logLines.join('\n');
    for (const secret of [t.admin, alice, bob, token, created.json.key, 'S'.repeat(43)]) assert.ok(!everything.includes(secret), 'a secret reached the log');
    assert.ok(!/authorization/i.test(everything), 'no authorization header in the log');
  });
});
