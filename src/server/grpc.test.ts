/**
 * The gRPC heartbeat: from inside a real box over the engine's bridge gateway (a raw HTTP/2
 * gRPC call made by node in the box), and from a grpc-js client built from heartbeat.proto
 * (so the hand-written codec is checked against the .proto). Heartbeats keep an idle session
 * box alive past its idle timeout; bad tokens are refused.
 */
import assert from 'node:assert/strict';
import { connect as http2Connect } from 'node:http2';
import { connect as netConnect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { testEnv } from '../testing/env.js';
import { waitFor } from '../testing/wait.js';
import { decodeHeartbeatRequest, encodeHeartbeatRequest } from './grpc.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

/** Runs in the box: one gRPC call per mode over plain HTTP/2, prints grpc-status codes. */
const IN_BOX = `
const http2 = require('http2');
const fs = require('fs');
const [mode, a1, a2] = process.argv.slice(1);
const addr = process.env.SBX_GRPC_ADDR, id = process.env.SBX_SANDBOX_ID, tok = process.env.SBX_TOKEN;
function frame(sid) {
  const b = Buffer.from(sid);
  const msg = Buffer.from([0x0a, b.length, ...b, 0x10, 1, 0x18, 2]);
  const f = Buffer.alloc(5); f.writeUInt32BE(msg.length, 1);
  return Buffer.concat([f, msg]);
}
function call(token, sid) {
  return new Promise((res) => {
    const c = http2.connect('http://' + addr);
    c.on('error', (e) => res('conn:' + e.code));
    const r = c.request({ ':method': 'POST', ':path': '/sbx.v1.Sandbox/Heartbeat', 'content-type': 'application/grpc', te: 'trailers', authorization: 'Bearer ' + token });
    let st = '?';
    r.on('response', (h) => { if (h['grpc-status'] !== undefined) st = h['grpc-status']; });
    r.on('trailers', (h) => { st = h['grpc-status']; });
    r.on('data', () => {});
    r.on('end', () => { c.close(); res(st); });
    r.on('error', (e) => res('err:' + e.code));
    r.end(frame(sid));
  });
}
(async () => {
  if (mode === 'loop') {
    for (;;) { fs.appendFileSync('/tmp/hb.log', (await call(tok, id)) + '\\n'); await new Promise((r) => setTimeout(r, 500)); }
  }
  const good = await call(tok, id);
  const bad = await call(tok.slice(0, -4) + 'AAAA', id);
  const none = await call('', id);
  const unknown = await call(tok, a1);
  const other = await call(tok, a2);
  console.log(JSON.stringify({ good, bad, none, unknown, other }));
})();
`;

/**
 * One raw gRPC heartbeat from [::1] on a source port of four digits (a fresh connection each):
 * resolves to the grpc-status. Ports below 10000 make grpc-js's getPeer() (`::1:5123`) a valid
 * IPv6 address itself, the case a port-stripping parser gets wrong.
 */
async function lowPortCall(port: number, token: string, sandboxId: string): Promise<string> {
  for (;;) {
    const localPort = 2000 + Math.floor(Math.random() * 7000);
    const status = await new Promise<string>((resolve) => {
      const session = http2Connect(`http://[::1]:${port}`, { createConnection: () => netConnect({ host: '::1', port, localAddress: '::1', localPort }) });
      session.on('error', (e: NodeJS.ErrnoException) => resolve(`conn:${e.code}`));
      const msg = encodeHeartbeatRequest({ sandboxId, active: true, processCount: 1 });
      const head = Buffer.alloc(5);
      head.writeUInt32BE(msg.length, 1);
      const req = session.request({
        ':method': 'POST',
        ':path': '/sbx.v1.Sandbox/Heartbeat',
        'content-type': 'application/grpc',
        te: 'trailers',
        authorization: `Bearer ${token}`,
      });
      let st = '?';
      req.on('response', (h) => h['grpc-status'] !== undefined && (st = String(h['grpc-status'])));
      req.on('trailers', (h) => (st = String(h['grpc-status'])));
      req.on('data', () => undefined);
      req.on('end', () => {
        session.close();
        resolve(st);
      });
      req.on('error', (e: NodeJS.ErrnoException) => resolve(`err:${e.code}`));
      req.end(Buffer.concat([head, msg]));
    });
    // A source port already taken: another one.
    if (status !== 'conn:EADDRINUSE') return status;
  }
}

let t: TestServer;
let gateway: string;

/** A grpc-js client built from heartbeat.proto: call(token, request) resolves to the call's error, or null when OK. */
function protoClient(address: string) {
  const def = protoLoader.loadSync(fileURLToPath(new URL('./heartbeat.proto', import.meta.url)), { keepCase: false });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { sbx: { v1: { Sandbox: grpc.ServiceClientConstructor } } };
  const client = new pkg.sbx.v1.Sandbox(address, grpc.credentials.createInsecure());
  const call = (tok: string, req: Record<string, unknown>) =>
    new Promise<grpc.ServiceError | null>((resolve) => {
      const md = new grpc.Metadata();
      if (tok) md.set('authorization', `Bearer ${tok}`);
      (client['heartbeat'] as (r: unknown, m: grpc.Metadata, cb: (e: grpc.ServiceError | null) => void) => void).call(client, req, md, (e) => resolve(e));
    });
  return { call, close: () => client.close() };
}

before(async () => {
  // Which address does a box reach the host on? Ask a box: its default route's gateway.
  const probe = await startTestServer('gwprobe');
  try {
    const box = (await probe.call('POST', '/v1/boxes', { body: { image: IMAGE } })).json.id;
    const unset = await probe.call('POST', `/v1/boxes/${box}/exec`, { body: { cmd: ['sh', '-c', 'echo "${SBX_GRPC_ADDR-unset}"'] } });
    assert.equal(unset.json.stdout, 'unset\n', 'without the gRPC heartbeat, boxes get no SBX_GRPC_ADDR');
    const route = await probe.call('POST', `/v1/boxes/${box}/exec`, { body: { cmd: ['cat', '/proc/net/route'] } });
    const line = route.json.stdout.split('\n').find((l: string) => l.split(/\s+/)[1] === '00000000');
    const hex = line.split(/\s+/)[2] as string;
    gateway = [3, 2, 1, 0].map((i) => parseInt(hex.slice(i * 2, i * 2 + 2), 16)).join('.');
  } finally {
    await probe.dispose();
  }
  t = await startTestServer('grpc', { serve: { grpc: { host: gateway, port: 0 } } });
});
after(async () => {
  await t?.dispose();
});

describe('SBX_GRPC_ADDR', () => {
  test('advertise wins; a loopback bind without it hands nothing (a box cannot dial it); close() takes it back', async () => {
    const adv = await startTestServer('grpcadv', { serve: { grpc: { host: '127.0.0.1', port: 0, advertise: 'sbx-host.internal:7071' } } });
    try {
      assert.equal(adv.server.boxGrpcAddr, 'sbx-host.internal:7071');
      const box = (await adv.call('POST', '/v1/boxes', { body: { image: IMAGE } })).json.id;
      const env = await adv.call('POST', `/v1/boxes/${box}/exec`, { body: { cmd: ['sh', '-c', 'echo "$SBX_GRPC_ADDR"'] } });
      assert.equal(env.json.stdout, 'sbx-host.internal:7071\n');
      await adv.server.close();
      // The Manager lives on: a box it creates now is told of no closed server.
      const after = await adv.manager.create({ image: IMAGE });
      const unset = await after.exec(['sh', '-c', 'echo "${SBX_GRPC_ADDR-unset}"']);
      assert.equal(unset.stdout, 'unset\n', 'a closed server no longer hands its address');
    } finally {
      await adv.dispose();
    }
    const loop = await startTestServer('grpcloop', { serve: { grpc: { host: '127.0.0.1', port: 0 } } });
    try {
      assert.equal(loop.server.boxGrpcAddr, undefined);
      const box = (await loop.call('POST', '/v1/boxes', { body: { image: IMAGE } })).json.id;
      const env = await loop.call('POST', `/v1/boxes/${box}/exec`, { body: { cmd: ['sh', '-c', 'echo "${SBX_GRPC_ADDR-unset}"'] } });
      assert.equal(env.json.stdout, 'unset\n');
    } finally {
      await loop.dispose();
    }
  });
});

describe('gRPC heartbeat', () => {
  test('the codec round-trips and matches heartbeat.proto (a grpc-js client built from the .proto)', async () => {
    const msg = { sandboxId: 'sb-1.a', active: true, processCount: 300 };
    assert.deepEqual(decodeHeartbeatRequest(encodeHeartbeatRequest(msg)), msg);
    const client = protoClient(t.server.grpc!.address);
    const call = client.call;
    const box = (await t.call('POST', '/v1/boxes', { body: { image: IMAGE } })).json.id;
    const token = (await t.call('POST', `/v1/boxes/${box}/exec`, { body: { cmd: ['sh', '-c', 'echo $SBX_TOKEN'] } })).json.stdout.trim();
    assert.equal(await call(token, { sandboxId: box, active: true, processCount: 4 }), null);
    assert.equal((await (await t.call('GET', `/v1/boxes/${box}`)).json).processCount, 4, 'process_count arrived through the .proto encoding');
    assert.equal((await call('', { sandboxId: box, active: true }))?.code, grpc.status.UNAUTHENTICATED);
    assert.equal((await call(token, { sandboxId: 'sb-unknown', active: true }))?.code, grpc.status.NOT_FOUND);
    client.close();
    await t.call('DELETE', `/v1/boxes/${box}`);
  });

  test('from inside a real box, dialing its SBX_GRPC_ADDR (the bridge gateway): keeps an idle session box alive; bad tokens refused', async () => {
    const short = { policy: 'session', idleTimeoutMs: 2500 };
    // The box is told nothing but what sbx hands every box: it dials its own SBX_GRPC_ADDR.
    const alive = await t.call('POST', '/v1/boxes', { body: { image: testEnv.testImage, cmd: ['node', '-e', IN_BOX, 'loop'], ...short } });
    assert.equal(alive.status, 201, alive.text);
    const addr = await t.call('POST', `/v1/boxes/${alive.json.id}/exec`, { body: { cmd: ['sh', '-c', 'echo "$SBX_GRPC_ADDR"'] } });
    assert.equal(addr.json.stdout.trim(), `${gateway}:${t.server.grpc!.port}`, 'SBX_GRPC_ADDR is the gateway address the heartbeat is bound on');
    assert.equal(t.server.boxGrpcAddr, `${gateway}:${t.server.grpc!.port}`);
    const control = await t.call('POST', '/v1/boxes', { body: { image: IMAGE, ...short } });
    await new Promise((r) => setTimeout(r, 4000)); // past both boxes' idle timeout
    // Right after a heartbeat arrived, however late the box's loop ran on a loaded machine.
    const beats = async () => Number(/sbx_heartbeats_total\{transport="grpc"\} (\d+)/.exec((await t.call('GET', '/metrics', { key: null })).text)?.[1] ?? 0);
    const seen = await beats();
    await waitFor(async () => (await beats()) > seen, { what: 'the next heartbeat from the box' });
    await t.manager.cleanup();
    const ids = (await t.manager.list()).map((b) => b.id);
    assert.ok(ids.includes(alive.json.id), 'the heartbeating box outlived its idle timeout');
    assert.ok(!ids.includes(control.json.id), 'the control box without heartbeats was removed as idle');
    const log = await t.call('POST', `/v1/boxes/${alive.json.id}/exec`, { body: { cmd: ['cat', '/tmp/hb.log'] } });
    const statuses: string[] = log.json.stdout.trim().split('\n');
    // The loop starts with the box, and a beat sent before its create has answered finds no box
    // to check the token against yet (UNAUTHENTICATED, once, on a loaded machine): from the first
    // OK on, every beat must be OK.
    const fromFirstOk = statuses.slice(statuses.indexOf('0'));
    assert.ok(
      statuses.indexOf('0') >= 0 && statuses.indexOf('0') <= 1 && fromFirstOk.length >= 2 && fromFirstOk.every((s) => s === '0'),
      `heartbeats from the box answered OK: ${statuses.join(',')}`,
    );
    const other = (await t.call('POST', '/v1/boxes', { body: { image: IMAGE } })).json.id;
    const once = await t.call('POST', `/v1/boxes/${alive.json.id}/exec`, { body: { cmd: ['node', '-e', IN_BOX, 'once', 'sb-nope', other] } });
    assert.deepEqual(JSON.parse(once.json.stdout), {
      good: '0',
      bad: String(grpc.status.UNAUTHENTICATED),
      none: String(grpc.status.UNAUTHENTICATED),
      unknown: String(grpc.status.NOT_FOUND),
      other: String(grpc.status.PERMISSION_DENIED),
    });
    assert.match((await t.call('GET', '/metrics', { key: null })).text, /sbx_heartbeats_total\{transport="grpc"\} [1-9]/);
    console.log(`# boxes reached the gRPC heartbeat at their SBX_GRPC_ADDR ${t.server.boxGrpcAddr} (the bridge gateway)`);
    await t.call('DELETE', `/v1/boxes/${alive.json.id}`);
    await t.call('DELETE', `/v1/boxes/${other}`);
  });

  test('bad box tokens count toward the one per-address failure limit, HTTP and gRPC together: over it RESOURCE_EXHAUSTED; a valid token still passes', async () => {
    const limited = await startTestServer('grpclimit', { serve: { grpc: { host: '127.0.0.1', port: 0 }, authFailures: { max: 3, windowMs: 600_000 } } });
    const client = protoClient(limited.server.grpc!.address);
    try {
      const box = (await limited.call('POST', '/v1/boxes', { body: { image: IMAGE } })).json.id;
      const token = (await limited.call('POST', `/v1/boxes/${box}/exec`, { body: { cmd: ['sh', '-c', 'echo $SBX_TOKEN'] } })).json.stdout.trim();
      const bad = `${token.slice(0, -4)}AAAA`;
      const heartbeat = { sandboxId: box, active: true, processCount: 7 };
      // One failure over HTTP, two over gRPC: the limit (3) of this address is reached.
      assert.equal((await limited.call('POST', `/v1/boxes/${box}/heartbeat`, { key: bad, body: { active: true } })).status, 401);
      assert.equal((await client.call(bad, heartbeat))?.code, grpc.status.UNAUTHENTICATED);
      assert.equal((await client.call(bad, heartbeat))?.code, grpc.status.UNAUTHENTICATED);
      const over = await client.call(bad, heartbeat);
      assert.equal(over?.code, grpc.status.RESOURCE_EXHAUSTED, `a bad token over the limit: ${over?.code} ${over?.details}`);
      assert.match(over!.details, /too many failed authentications/);
      assert.equal((await client.call('', heartbeat))?.code, grpc.status.RESOURCE_EXHAUSTED, 'no token is a failure too');
      // The same limiter answers HTTP: the gRPC failures counted there.
      assert.equal((await limited.call('POST', `/v1/boxes/${box}/heartbeat`, { key: bad, body: { active: true } })).status, 429);
      // A valid box token is never refused for its address's failures.
      assert.equal(await client.call(token, heartbeat), null);
      assert.equal((await limited.call('GET', `/v1/boxes/${box}`)).json.processCount, 7, 'the heartbeat arrived');
      assert.match((await limited.call('GET', '/metrics', { key: null })).text, /sbx_auth_failures_total 6/);
    } finally {
      client.close();
      await limited.dispose();
    }
  });
  test('over IPv6 the failure count is per address, not per source port: a client on low source ports (::1:5123 reads as an address) shares one count with HTTP', async () => {
    const limited = await startTestServer('grpc6', { serve: { host: '::1', grpc: { host: '::1', port: 0 }, authFailures: { max: 3, windowMs: 600_000 } } });
    try {
      const box = (await limited.call('POST', '/v1/boxes', { body: { image: IMAGE } })).json.id;
      const token = (await limited.call('POST', `/v1/boxes/${box}/exec`, { body: { cmd: ['sh', '-c', 'echo $SBX_TOKEN'] } })).json.stdout.trim();
      const bad = `${token.slice(0, -4)}AAAA`;
      // One failure over HTTP from ::1, two over gRPC from ::1 on ports of four digits, each a new connection.
      assert.equal((await limited.call('POST', `/v1/boxes/${box}/heartbeat`, { key: bad, body: { active: true } })).status, 401);
      const port = limited.server.grpc!.port;
      assert.equal(await lowPortCall(port, bad, box), String(grpc.status.UNAUTHENTICATED));
      assert.equal(await lowPortCall(port, bad, box), String(grpc.status.UNAUTHENTICATED));
      assert.equal(await lowPortCall(port, bad, box), String(grpc.status.RESOURCE_EXHAUSTED), 'the address ::1 reached its limit whatever its source port');
      assert.equal(
        (await limited.call('POST', `/v1/boxes/${box}/heartbeat`, { key: bad, body: { active: true } })).status,
        429,
        'HTTP sees the gRPC failures under the same key',
      );
      assert.equal(await lowPortCall(port, token, box), '0', 'a valid box token still passes');
    } finally {
      await limited.dispose();
    }
  });
});
