/**
 * `sbx serve` as its own process: 100 concurrent clients run 1,000 execs (0 errors, p50/p99
 * reported); then the server is killed with SIGKILL in the middle of a load, started again on
 * the same data dir, and every box is served again with every field, keys and workspace files
 * intact.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { IMAGE, removeContainersOf } from '../testing/server.js';

const dataDir = mkdtempSync(join(tmpdir(), 'sbx-server-restart-'));
const name = `srv-load-${process.pid}`;
// The first start picks a free port (a fixed one could be a docker-proxy's or a client's
// ephemeral port); the restart binds the same one again, so clients keep their URL.
let port = 0;
let url = '';
const entry = fileURLToPath(new URL('../testing/serve-child.ts', import.meta.url));
let child: ChildProcess | undefined;

function start(): Promise<{ proc: ChildProcess; printed: string }> {
  const proc = spawn(process.execPath, ['--import', 'tsx', entry, '--port', String(port), '--shutdown-grace', '1s'], {
    env: { ...process.env, SBX_NAME: name, SBX_DATA_DIR: dataDir, SBX_CLEANUP_INTERVAL: '0', SBX_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child = proc;
  let printed = '';
  proc.stdout!.on('data', (d: Buffer) => (printed += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (printed += d.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start: ${printed}`)), 30_000);
    const check = () => {
      const served = /sbx: serving http:\/\/127\.0\.0\.1:(\d+)/.exec(printed);
      if (served) {
        clearTimeout(timer);
        port = Number(served[1]);
        url = `http://127.0.0.1:${port}`;
        resolve({ proc, printed });
      } else setTimeout(check, 50);
    };
    proc.once('exit', (code) => reject(new Error(`server exited ${code}: ${printed}`)));
    check();
  });
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

async function call(key: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: Json }> {
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

after(async () => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  const left = await removeContainersOf(name);
  rmSync(dataDir, { recursive: true, force: true });
  assert.equal(left, 0, 'the test removed its boxes itself');
});

describe('sbx serve as a process', () => {
  test('load: 100 concurrent clients, 1,000 execs, 0 errors; restart after SIGKILL serves every box again', { timeout: 300_000 }, async () => {
    const { printed } = await start();
    const admin = /sbxk_\S+/.exec(printed)?.[0];
    assert.ok(admin, 'the first start printed an admin key');
    const boxes: string[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await call(admin, 'POST', '/v1/boxes', {
        image: IMAGE,
        owner: `u${i % 3}`,
        labels: { n: String(i) },
        idleTimeoutMs: 3_600_000 + i,
        policy: i % 2 ? 'longrunning' : 'session',
      });
      assert.equal(r.status, 201, JSON.stringify(r.json));
      boxes.push(r.json.id);
    }
    const ws = await call(admin, 'POST', '/v1/workspaces', { name: 'kept' });
    const put = await fetch(`${url}/v1/workspaces/${ws.json.id}/files/data.txt`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/octet-stream' },
      body: 'survives\n',
    });
    assert.equal(put.status, 204);
    const before = new Map<string, unknown>();
    for (const id of boxes) before.set(id, (await call(admin, 'GET', `/v1/boxes/${id}`)).json);

    // Load: 100 clients, 1,000 execs in all.
    const latencies: number[] = [];
    const errors: string[] = [];
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: 100 }, async () => {
        while (next < 1000) {
          const n = next++;
          const id = boxes[n % boxes.length]!;
          const s = performance.now();
          try {
            const r = await call(admin, 'POST', `/v1/boxes/${id}/exec`, { cmd: ['echo', String(n)] });
            if (r.status !== 200 || r.json.stdout !== `${n}\n`) errors.push(`${r.status} ${JSON.stringify(r.json).slice(0, 200)}`);
          } catch (err) {
            errors.push(String(err));
          }
          latencies.push(performance.now() - s);
        }
      }),
    );
    const wall = (performance.now() - t0) / 1000;
    latencies.sort((a, b) => a - b);
    console.log(
      `# load: 1000 execs, 100 clients, ${wall.toFixed(1)} s (${(1000 / wall).toFixed(0)}/s), p50 ${pct(latencies, 50).toFixed(0)} ms, p99 ${pct(latencies, 99).toFixed(0)} ms, errors ${errors.length}`,
    );
    assert.deepEqual(errors.slice(0, 5), []);
    assert.equal(latencies.length, 1000);

    // Kill -9 in the middle of a load.
    let stop = false;
    const inflight = Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        while (!stop) await call(admin, 'POST', `/v1/boxes/${boxes[i % boxes.length]}/exec`, { cmd: ['sleep', '0.05'] }).catch(() => undefined);
      }),
    );
    await new Promise((r) => setTimeout(r, 500));
    child!.kill('SIGKILL');
    await new Promise((r) => child!.once('exit', r));
    stop = true;
    await inflight;

    const again = await start();
    assert.ok(!/sbxk_/.test(again.printed), 'no new admin key on a restart: the stored one still works');
    const list = await call(admin, 'GET', '/v1/boxes');
    assert.equal(list.status, 200);
    assert.deepEqual(list.json.boxes.map((b: { id: string }) => b.id).sort(), [...boxes].sort(), 'every box is served again');
    for (const id of boxes) {
      const info: Record<string, unknown> = (await call(admin, 'GET', `/v1/boxes/${id}`)).json;
      const old = before.get(id) as Record<string, unknown>;
      for (const field of [
        'id',
        'containerId',
        'pool',
        'owner',
        'policy',
        'labels',
        'image',
        'createdAt',
        'idleTimeoutMs',
        'maxLifetimeMs',
        'stopTimeoutMs',
        'status',
        'workspaceId',
        'vnc',
      ])
        assert.deepEqual(info[field], old[field], `${id}.${field} survived the restart`);
      const r = await call(admin, 'POST', `/v1/boxes/${id}/exec`, { cmd: ['echo', 'back'] });
      assert.equal(r.json.stdout, 'back\n');
    }
    const file = await fetch(`${url}/v1/workspaces/${ws.json.id}/files/data.txt`, { headers: { authorization: `Bearer ${admin}` } });
    assert.equal(await file.text(), 'survives\n', 'workspace data survived');

    for (const id of boxes) assert.equal((await call(admin, 'DELETE', `/v1/boxes/${id}`)).status, 204);
    await call(admin, 'DELETE', `/v1/workspaces/${ws.json.id}`);
    child!.kill('SIGTERM');
    const code = await new Promise((r) => child!.once('exit', r));
    assert.equal(code, 0, 'SIGTERM shuts down cleanly');
  });
});
