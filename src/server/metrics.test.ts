/**
 * /metrics on a real server (real engine, fetch and ws clients): each metric is scraped before
 * and after the thing it counts, and must have moved by what happened, not merely exist.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { testEnv } from '../testing/env.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';
import { waitFor } from '../testing/wait.js';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

let t: TestServer;
let alice: string;

before(async () => {
  t = await startTestServer('metrics');
  alice = (await t.call('POST', '/v1/keys', { body: { name: 'alice', role: 'user' } })).json.key;
});
after(async () => {
  await t?.dispose();
});

async function scrape(): Promise<Sample[]> {
  const res = await t.call('GET', '/metrics', { key: null });
  assert.equal(res.status, 200);
  const out: Sample[] = [];
  for (const line of res.text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `unparsable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[k!] = v!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** The sum over every series of `name` whose labels include `labels`. */
function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0);
}

/** Runs `action` between two scrapes; returns a reader of how much a series moved. */
async function moved(action: () => Promise<unknown>): Promise<(name: string, labels?: Record<string, string>) => number> {
  const before = await scrape();
  await action();
  const after = await scrape();
  return (name, labels = {}) => value(after, name, labels) - value(before, name, labels);
}

async function newBox(extra: Record<string, unknown> = {}): Promise<string> {
  const r = await t.call('POST', '/v1/boxes', { key: alice, body: { image: IMAGE, ...extra } });
  assert.equal(r.status, 201, r.text);
  return r.json.id;
}

describe('metrics move when the thing happens', () => {
  test('boxes by pool and status; creates and removes; engine calls by operation', async () => {
    let id = '';
    let d = await moved(async () => (id = await newBox()));
    assert.equal(d('sbx_boxes', { pool: 'local', status: 'running' }), 1);
    assert.equal(d('sbx_box_creates_total', { pool: 'local' }), 1);
    assert.equal(d('sbx_engine_call_duration_seconds_count', { op: 'create', outcome: 'ok' }), 1);
    assert.equal(d('sbx_engine_call_duration_seconds_count', { op: 'start', outcome: 'ok' }), 1);
    assert.ok(d('sbx_engine_call_duration_seconds_sum', { op: 'create' }) > 0, 'the create took time');

    d = await moved(() => t.call('POST', `/v1/boxes/${id}/stop`, { key: alice }));
    assert.equal(d('sbx_boxes', { pool: 'local', status: 'running' }), -1);
    assert.equal(d('sbx_boxes', { pool: 'local', status: 'stopped' }), 1);
    assert.equal(d('sbx_engine_call_duration_seconds_count', { op: 'stop', outcome: 'ok' }), 1);
    const stopped = (await scrape()).find((s) => s.name === 'sbx_boxes' && s.labels['status'] === 'creating');
    assert.ok(stopped, 'a status with no boxes is still a series (0)');

    d = await moved(() => t.call('DELETE', `/v1/boxes/${id}`, { key: alice }));
    assert.equal(d('sbx_boxes', { pool: 'local', status: 'stopped' }), -1);
    assert.equal(d('sbx_box_removes_total', { pool: 'local' }), 1);
    assert.equal(d('sbx_engine_call_duration_seconds_count', { op: 'remove', outcome: 'ok' }), 1);

    // A failed engine call is counted under its error code.
    d = await moved(async () => {
      const r = await t.call('POST', '/v1/boxes', { key: alice, body: { image: '127.0.0.1:5000/sbx/no-such-image:latest' } });
      assert.equal(r.status, 404, r.text);
    });
    assert.equal(d('sbx_engine_call_duration_seconds_count', { op: 'create', outcome: 'not_found' }), 1);
    assert.equal(d('sbx_errors_total', { code: 'not_found' }), 1);

    d = await moved(() => t.call('GET', `/v1/images/exists?ref=${encodeURIComponent(IMAGE)}`));
    assert.equal(d('sbx_engine_call_duration_seconds_count', { op: 'images.exists', outcome: 'ok' }), 1);
    d = await moved(async () => {
      const r = await t.call('POST', '/v1/images/pull', { body: { ref: testEnv.pullImage }, headers: { accept: 'text/event-stream' } });
      assert.match(r.text, /event: done/, r.text.slice(-300));
    });
    assert.equal(d('sbx_engine_call_duration_seconds_count', { op: 'images.pull', outcome: 'ok' }), 1, 'a pull is timed to the end of its progress');
  });

  test('exec count and duration per transport (http, sse, ws); engine exec calls; requests by route and status', async () => {
    const id = await newBox();
    let d = await moved(async () => {
      const r = await t.call('POST', `/v1/boxes/${id}/exec`, { key: alice, body: { cmd: ['sleep', '0.3'] } });
      assert.equal(r.status, 200, r.text);
    });
    assert.equal(d('sbx_execs_total', { transport: 'http', outcome: 'exited' }), 1);
    assert.equal(d('sbx_exec_duration_seconds_count', { transport: 'http' }), 1);
    assert.ok(d('sbx_exec_duration_seconds_sum', { transport: 'http' }) >= 0.3, 'the duration covers the 0.3 s the command ran');
    assert.equal(d('sbx_engine_call_duration_seconds_count', { op: 'exec', outcome: 'ok' }), 1);
    assert.ok(d('sbx_engine_call_duration_seconds_sum', { op: 'exec' }) >= 0.3);
    assert.equal(d('sbx_http_request_duration_seconds_count', { method: 'POST', route: '/v1/boxes/:id/exec', status: '200' }), 1);

    d = await moved(async () => {
      const r = await t.call('POST', `/v1/boxes/${id}/exec`, { key: alice, body: { cmd: ['sh', '-c', 'echo hi'] }, headers: { accept: 'text/event-stream' } });
      assert.match(r.text, /event: exit/);
    });
    assert.equal(d('sbx_execs_total', { transport: 'sse', outcome: 'exited' }), 1);
    assert.equal(d('sbx_exec_duration_seconds_count', { transport: 'sse' }), 1);
    assert.equal(d('sbx_engine_call_duration_seconds_count', { op: 'execStream', outcome: 'ok' }), 1);

    // While an SSE exec runs, it is an open stream: one that runs until this test ends it.
    const open = async () => value(await scrape(), 'sbx_open_streams', { transport: 'sse' });
    const controller = new AbortController();
    const running = fetch(`${t.url}/v1/boxes/${id}/exec`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ cmd: ['sleep', '3600'] }),
    });
    await waitFor(async () => (await open()) === 1, { what: 'the SSE exec to count as an open stream' });
    controller.abort();
    await running.then((r) => r.text()).catch(() => undefined);
    await waitFor(async () => (await open()) === 0, { what: 'the ended SSE exec to be counted out' });

    d = await moved(
      () =>
        new Promise<void>((resolve, reject) => {
          const ws = new WebSocket(`${t.url.replace(/^http/, 'ws')}/v1/boxes/${id}/exec/ws?cmd=true`, { headers: { authorization: `Bearer ${alice}` } });
          ws.on('error', reject);
          ws.on('close', () => resolve());
        }),
    );
    assert.equal(d('sbx_execs_total', { transport: 'ws', outcome: 'exited' }), 1);
    assert.equal(d('sbx_exec_duration_seconds_count', { transport: 'ws' }), 1);

    d = await moved(() => t.call('GET', `/v1/boxes/${id}`, { key: alice }));
    assert.equal(d('sbx_http_request_duration_seconds_count', { method: 'GET', route: '/v1/boxes/:id', status: '200' }), 1);
    assert.equal(d('sbx_engine_call_duration_seconds_count', { op: 'inspect', outcome: 'ok' }), 1, 'info asks the engine');
    await t.call('DELETE', `/v1/boxes/${id}`, { key: alice });
  });

  test('errors by code, auth failures, heartbeats', async () => {
    const id = await newBox();
    let d = await moved(async () => {
      await t.call('GET', '/v1/boxes/nope', { key: alice });
      await t.call('POST', '/v1/boxes', { key: alice, body: '{bad json' });
      await t.call('GET', '/v1/boxes', { key: 'sbxk_0000000000000000_' + 'A'.repeat(43) });
    });
    assert.equal(d('sbx_errors_total', { code: 'not_found' }), 1);
    assert.equal(d('sbx_errors_total', { code: 'invalid_argument' }), 1);
    assert.equal(d('sbx_errors_total', { code: 'unauthorized' }), 1);
    assert.equal(d('sbx_auth_failures_total'), 1);
    assert.equal(d('sbx_http_request_duration_seconds_count', { route: '/v1/boxes/:id', status: '404' }), 1);
    d = await moved(() => t.call('POST', `/v1/boxes/${id}/heartbeat`, { key: alice, body: { active: true } }));
    assert.equal(d('sbx_heartbeats_total', { transport: 'http' }), 1);
    await t.call('DELETE', `/v1/boxes/${id}`, { key: alice });
  });

  test('cleanup actions by reason', async () => {
    const id = await newBox({ policy: 'session', idleTimeoutMs: 500 });
    await new Promise((r) => setTimeout(r, 900));
    const d = await moved(() => t.manager.cleanup());
    assert.equal(d('sbx_cleanup_actions', { reason: 'ticks' }), 1);
    assert.equal(d('sbx_cleanup_actions', { reason: 'removedIdle' }), 1, 'the idle box was removed and counted');
    assert.equal(d('sbx_boxes', { pool: 'local' }), -1);
    assert.ok(!(await t.manager.list()).some((b) => b.id === id));
  });

  test('workspace bytes read and written', async () => {
    const ws = await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'metrics' } });
    assert.equal(ws.status, 201, ws.text);
    const bytes = Buffer.alloc(100_000, 7);
    let d = await moved(async () => {
      const r = await t.call('PUT', `/v1/workspaces/${ws.json.id}/files/a.bin`, {
        key: alice,
        raw: bytes,
        headers: { 'content-type': 'application/octet-stream' },
      });
      assert.ok(r.status < 300, r.text);
    });
    assert.equal(d('sbx_workspace_bytes_total', { direction: 'written' }), bytes.length);
    assert.equal(d('sbx_workspace_bytes_total', { direction: 'read' }), 0);
    d = await moved(async () => {
      const r = await t.call('GET', `/v1/workspaces/${ws.json.id}/files/a.bin`, { key: alice });
      assert.equal(r.status, 200);
    });
    assert.equal(d('sbx_workspace_bytes_total', { direction: 'read' }), bytes.length);
    await t.call('DELETE', `/v1/workspaces/${ws.json.id}?force=true`, { key: alice });
  });

  test('warm pools: spares ready, hits, the last claim; a pool added over HTTP with a template', async () => {
    const add = await t.call('POST', '/v1/pools', { body: { name: 'warmp', addr: testEnv.engineAddr, warm: [{ image: IMAGE, size: 1 }] } });
    assert.equal(add.status, 201, add.text);
    assert.deepEqual(add.json.warm, [{ image: IMAGE, size: 1 }], 'the pool answers with its template');
    const ready = async () => value(await scrape(), 'sbx_warm_spares_ready', { pool: 'warmp', image: IMAGE });
    await waitFor(async () => (await ready()) === 1, { what: 'the spare to be counted once it is ready' });
    const before = await scrape();
    assert.equal(value(before, 'sbx_warm_size', { pool: 'warmp' }), 1);
    const id = await newBox({ pool: 'warmp' });
    const after = await scrape();
    assert.equal(value(after, 'sbx_warm_hits', { pool: 'warmp' }) - value(before, 'sbx_warm_hits', { pool: 'warmp' }), 1, 'the create claimed the spare');
    const claim = value(after, 'sbx_warm_last_claim_seconds', { pool: 'warmp' });
    assert.ok(claim > 0 && claim < 5, `last claim ${claim} s`);
    assert.equal((await t.call('DELETE', `/v1/boxes/${id}`, { key: alice })).status, 204);
    assert.equal((await t.call('DELETE', '/v1/pools/warmp?force=true')).status, 204);
    assert.equal(value(await scrape(), 'sbx_warm_spares_ready', { pool: 'warmp' }), 0, 'a removed pool has no spares');
  });
});
