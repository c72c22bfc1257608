// The sandbox Manager with a Kubernetes pool, on real pods of the test cluster (skipped with the
// reason when there is none; src/testing/kube-cluster.ts): what the Manager promises on
// Docker, where it means something on Kubernetes. Boxes run the in-box agent (pool agentImage).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { after, describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import type { KubernetesRuntime } from '../runtime/kubernetes/runtime.js';
import { ManualClock } from '../testing/clock.js';
import { openTestKube, testAgentImage, testKubeAddress, unavailable } from '../testing/kube-cluster.js';
import { testEnv } from '../testing/env.js';
import { managerSelector } from './labels.js';
import { GRACEFUL_CMD } from './box-spec.js';
import { Manager } from './manager.js';
import type { ManagerConfig, PoolConfig } from './config.js';

const why = await unavailable();
const IMAGE = testEnv.baseImage;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-kube-manager-'));
/** The node's address on the pod network: the host as the test cluster's pods see it (docs/kubernetes.md). */
const NODE_IP = '10.244.0.1';
let seq = 0;
const managers: Manager[] = [];
let cluster: KubernetesRuntime | undefined;

function kubePool(extra: Partial<PoolConfig> = {}): PoolConfig {
  return { name: 'kube', addr: testKubeAddress(), agentImage: testAgentImage, readyTimeoutMs: 60_000, ...extra };
}

function newManager(pool: Partial<PoolConfig> = {}, extra: ManagerConfig = {}, name = `k${++seq}-${process.pid}`): Manager {
  const m = new Manager({ name, pools: [kubePool(pool)], dataDir, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }), ...extra });
  managers.push(m);
  return m;
}

/** The pods of a Manager, asked of the cluster (not of the Manager). */
async function podsOf(m: Manager) {
  cluster ??= openTestKube();
  return cluster.list({ labels: managerSelector(m.config.name) });
}

async function until(what: string, check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`${what}: not within ${ms} ms`);
    await sleep(100);
  }
}

after(async () => {
  if (why) return rmSync(dataDir, { recursive: true, force: true });
  const leaked = (await Promise.all(managers.map(podsOf))).flat();
  await Promise.all(leaked.map((c) => cluster!.remove(c.id, { force: true }).catch(() => undefined)));
  await Promise.all(managers.map((m) => m.close()));
  await cluster?.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(
    leaked.map((c) => c.name),
    [],
    'pods left behind by the Kubernetes Manager tests',
  );
});

describe('Manager with a Kubernetes pool, on a real cluster', { skip: why ?? false }, () => {
  test('create, exec with argv kept as argv, stream with stdin, remove: the pod is gone', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, owner: 'alice', labels: { app: 'k8s test' } });
    const info = await box.info();
    assert.equal(info.status, 'running');
    assert.equal(info.execPath, 'agent');
    assert.deepEqual(info.labels, { app: 'k8s test' });
    const argv = ['two words', `it's "quoted"`, '$(id -u)', '`id`', '; echo pwned', '', '*'];
    const r = await box.exec(['printf', '[%s]\\n', ...argv]);
    assert.equal(r.stdout, argv.map((a) => `[${a}]\n`).join(''));
    // The box's identity reaches every exec; the default working directory and user too.
    assert.equal((await box.exec(['sh', '-c', 'echo $SBX_SANDBOX_ID; pwd; id -u'])).stdout, `${box.id}\n/workspace\n1000\n`);

    const s = await box.stream(['sh', '-c', 'tr a-z A-Z; echo done >&2']);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    s.stdout.on('data', (d: Buffer) => out.push(d));
    s.stderr.on('data', (d: Buffer) => err.push(d));
    s.stdin.end('hello pods\n');
    assert.equal(await s.wait(), 0);
    assert.equal(Buffer.concat(out).toString(), 'HELLO PODS\n');
    assert.equal(Buffer.concat(err).toString(), 'done\n');

    assert.equal((await podsOf(m)).length, 1);
    await box.remove();
    assert.deepEqual(await podsOf(m), []);
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));
  });

  // Issue #27: a pod has no freezer and no commit (capabilities.pause / commit false).
  test('pause and archive are not_available naming the reason; resume of a running pod does nothing; the idle ladder skips both steps, the idle timeout still ends the box', async () => {
    const clock = new ManualClock(Date.now());
    const m = newManager({}, { clock: clock.now });
    const box = await m.create({ image: IMAGE, policy: 'longrunning', idlePauseMs: 1000, idleArchiveMs: 2000, idleTimeoutMs: 3000 });
    const pod = box.containerId;
    await assert.rejects(box.pause(), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'pause_unsupported');
    await assert.rejects(box.archive(), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'archive_unsupported');
    await box.resume();
    assert.equal(box.status, 'running');
    assert.equal(box.containerId, pod, 'the same pod');
    assert.equal((await box.exec(['echo', 'still'])).stdout, 'still\n');
    const ran = m.cleanupStats.ticks;
    // resume() and the exec were uses: the idle clock counts from now. Past the pause, then past the archive.
    for (const step of [1000, 1000]) {
      clock.advance(step);
      await m.cleanup();
      assert.equal((await box.info()).status, 'running', 'neither paused nor archived');
      assert.deepEqual(
        (await podsOf(m)).map((p) => [p.id, p.status]),
        [[pod, 'running']],
      );
    }
    assert.equal(m.cleanupStats.ticks - ran, 2);
    assert.deepEqual([m.cleanupStats.pausedIdle, m.cleanupStats.archivedIdle, m.cleanupStats.errors], [0, 0, 0], 'the steps skipped, not tried and failed');
    clock.advance(1000);
    await m.cleanup();
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'), 'the idle timeout applies as before');
    assert.equal(m.cleanupStats.removedIdle, 1);
    assert.deepEqual(await podsOf(m), []);
  });

  test("maxLifetimeAction 'pause' on a pod removes the box at the end of its lifetime (the pool cannot pause)", async () => {
    const clock = new ManualClock(Date.now());
    const m = newManager({}, { clock: clock.now });
    const box = await m.create({ image: IMAGE, maxLifetimeMs: 3000, maxLifetimeAction: 'pause', idleTimeoutMs: 0 });
    assert.equal((await box.info()).maxLifetimeAction, 'pause');
    clock.set(Date.parse(box.createdAt) + 2999);
    await m.cleanup();
    assert.equal((await box.info()).status, 'running');
    clock.advance(1);
    await m.cleanup();
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));
    assert.deepEqual([m.cleanupStats.removedLifetime, m.cleanupStats.pausedLifetime, m.cleanupStats.errors], [1, 0, 0]);
    assert.deepEqual(await podsOf(m), []);
  });

  test('a timeout kills the exec and what it started: setsid, env -i and double-forked children', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE });
    const r = await box.exec(['sh', '-c', 'setsid sleep 361 & env -i sleep 362 & (sleep 363 &); sleep 364'], { timeoutMs: 500 });
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, 137);
    const ps = await box.exec(['ps', '-o', 'args']);
    assert.doesNotMatch(ps.stdout, /sleep 36[1-4]/);
    await box.remove();
  });

  test('idle cleanup removes a session box; an idle longrunning box is removed too, since a pod cannot be stopped and started', async () => {
    const m = newManager();
    const session = await m.create({ image: IMAGE, idleTimeoutMs: 500 });
    const longrunning = await m.create({ image: IMAGE, policy: 'longrunning', idleTimeoutMs: 500 });
    const busy = await m.create({ image: IMAGE, idleTimeoutMs: 60_000 });
    await sleep(700);
    await m.cleanup();
    for (const gone of [session, longrunning]) await assert.rejects(m.get(gone.id), (e) => isSbxError(e, 'not_found'));
    assert.equal(m.cleanupStats.removedIdle, 2);
    assert.equal(m.cleanupStats.stoppedIdle, 0);
    assert.deepEqual(
      (await podsOf(m)).map((p) => p.id),
      [busy.containerId],
    );
    await busy.remove();
  });

  test('oneshot: removed once its first exec completes', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, policy: 'oneshot' });
    assert.equal((await box.exec(['echo', 'once'])).stdout, 'once\n');
    await until('the oneshot box removed', async () => (await m.list()).length === 0);
    await until('its pod gone', async () => (await podsOf(m)).length === 0);
  });

  test('stop deletes the pod and removes the box; max lifetime removes a busy box', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, stopTimeoutMs: 1000 });
    await box.stop();
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));
    assert.deepEqual(await podsOf(m), []);
    const capped = await m.create({ image: IMAGE, maxLifetimeMs: 1500 });
    const s = await capped.stream(['sleep', '30']);
    await sleep(Math.max(0, Date.parse(capped.createdAt) + 1600 - Date.now()));
    await m.cleanup();
    assert.equal(m.cleanupStats.removedLifetime, 1);
    assert.equal(await s.wait(), 137);
    assert.deepEqual(await podsOf(m), []);
  });

  test('limits: maxTotal holds under 6 concurrent creates, maxPerUser per owner; a refused create leaves no pod', async () => {
    const m = newManager({ maxTotal: 2, maxPerUser: 1 });
    const results = await Promise.allSettled([
      m.create({ image: IMAGE, owner: 'a' }),
      m.create({ image: IMAGE, owner: 'a' }),
      m.create({ image: IMAGE, owner: 'b' }),
      m.create({ image: IMAGE, owner: 'c' }),
      m.create({ image: IMAGE, owner: 'd' }),
      m.create({ image: IMAGE, owner: 'e' }),
    ]);
    const ok = results.filter((r) => r.status === 'fulfilled');
    assert.equal(ok.length, 2);
    for (const r of results) if (r.status === 'rejected') assert.ok(isSbxError(r.reason, 'limit_exceeded'), String(r.reason));
    assert.equal((await podsOf(m)).length, 2);
    // Memory and CPU reach the pod's limits.
    const box = await m.get((await m.list())[0]!.id);
    const mem = await box.exec(['sh', '-c', 'cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes']);
    assert.equal(mem.stdout.trim(), String(1024 * 1024 * 1024));
    await Promise.all((await m.list()).map((b) => b.remove()));
    assert.deepEqual(await podsOf(m), []);
  });

  test('a box whose image the cluster does not have fails create with the reason, and nothing is left', async () => {
    const m = newManager({ readyTimeoutMs: 30_000 });
    const ref = `sbx-not-imported-${process.pid}:none`;
    await assert.rejects(m.create({ image: ref }), (e) => isSbxError(e, 'not_found') && e.message.includes(ref));
    assert.deepEqual(await m.list(), []);
    await until('the failed pod deleted', async () => (await podsOf(m)).length === 0);
  });

  test('recovery: a restarted Manager finds its pods with every field, and execs through their agents', async () => {
    const name = `krec-${process.pid}`;
    const first = newManager({}, {}, name);
    const box = await first.create({
      image: IMAGE,
      id: 'krec-1',
      owner: 'carol',
      labels: { app: 'x', note: 'free text: a/b' },
      policy: 'longrunning',
      idleTimeoutMs: 1200,
      stopTimeoutMs: 700,
      maxLifetimeMs: 3_600_000,
    });
    const before = await box.info();
    await first.close();

    const second = newManager({}, {}, name);
    await second.start();
    const got = await second.get('krec-1');
    const after = await got.info();
    for (const k of [
      'id',
      'containerId',
      'pool',
      'owner',
      'policy',
      'labels',
      'image',
      'createdAt',
      'idleTimeoutMs',
      'stopTimeoutMs',
      'maxLifetimeMs',
      'execPath',
    ] as const) {
      assert.deepEqual(after[k], before[k], `field ${k}`);
    }
    assert.equal((await got.exec(['sh', '-c', 'echo $SBX_SANDBOX_ID'])).stdout, 'krec-1\n');
    await sleep(1300);
    await second.cleanup();
    await assert.rejects(second.get('krec-1'), (e) => isSbxError(e, 'not_found'), 'the recovered idle timeout applies');
    assert.deepEqual(await podsOf(second), []);
  });

  test('attach reaches services in the pod through port-forward: a WebSocket echo and an SSE stream', async () => {
    const m = newManager();
    // The image's ENTRYPOINT starts the services; on Kubernetes the agent runs the spec's command
    // only (no image config is read), so the test gives the entrypoint itself.
    const box = await m.create({
      image: testEnv.testImage,
      cmd: ['/bin/sh', '/usr/local/bin/sbx-test-entrypoint', ...GRACEFUL_CMD],
      ports: [{ containerPort: 3000 }, { containerPort: 3001 }],
    });
    const ws = await box.attach(3000, { protocol: 'ws' });
    assert.equal(ws.protocol, 'ws');
    if (ws.protocol === 'ws') {
      ws.send('through the API server');
      assert.deepEqual((await ws[Symbol.asyncIterator]().next()).value, { type: 'text', data: 'through the API server' });
    }
    ws.close();
    await ws.closed;
    const sse = await box.attach(3001, { protocol: 'sse' });
    const events: string[] = [];
    for await (const e of sse) events.push(e.data);
    assert.deepEqual(events, ['event-0', 'event-1', 'event-2', 'event-3', 'event-4']);
    await assert.rejects(box.attach(3999, { protocol: 'ws' }), (e) => isSbxError(e, 'not_available'));
    await box.remove();
  });

  test('snapshot: not_available (a pod cannot be saved as an image), and nothing is recorded', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, owner: 'alice' });
    try {
      await assert.rejects(box.snapshot({ name: 'pod' }), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'commit_unsupported');
      assert.deepEqual(await m.snapshots.list(), []);
      assert.equal((await box.info()).status, 'running');
    } finally {
      await box.remove();
    }
  });

  test('box.files() works in a pod: the agent binary is the file tool', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE });
    const files = box.files();
    await files.writeFile('/tmp/k8s/a.txt', 'written through the agent');
    assert.equal(await files.readFile('/tmp/k8s/a.txt', 'utf8'), 'written through the agent');
    assert.deepEqual(
      (await files.readDir('/tmp/k8s')).map((e) => e.name),
      ['a.txt'],
    );
    assert.equal((await box.exec(['stat', '-c', '%u', '/tmp/k8s/a.txt'])).stdout, '1000\n');
    await assert.rejects(box.files().readFile('/root/.profile'), (e) => isSbxError(e));
    await box.remove();
  });

  test('warm pools: a create claims a ready spare pod, which learns its identity through its agent', async () => {
    const m = newManager({ warm: [{ image: IMAGE, size: 1 }] });
    await m.start();
    await until('a spare ready', async () => (await m.warm())[0]?.ready === 1, 60_000);
    const spare = (await podsOf(m))[0]!.id;
    const box = await m.create({ image: IMAGE, owner: 'warm', env: { FOO: 'bar' } });
    assert.equal(box.containerId, spare, 'the box is the spare pod');
    assert.equal((await m.warm())[0]!.hits, 1);
    assert.equal((await box.exec(['sh', '-c', 'echo $SBX_SANDBOX_ID $FOO; id -u'])).stdout, `${box.id} bar\n1000\n`);
    // The agent itself was told (CONFIGURE), not only the Manager's execs: its heartbeat speaks for the box.
    cluster ??= openTestKube();
    assert.equal((await cluster.exec(spare, ['sh', '-c', 'echo $SBX_SANDBOX_ID'])).stdout, `${box.id}\n`);
    await until('the pool refilled', async () => (await m.warm())[0]?.ready === 1, 60_000);
    await box.remove();
    await m.removePool('kube', { force: true });
    assert.deepEqual(await podsOf(m), [], 'removePool removes the spares');
  });

  test('heartbeats: the agent in the pod reports activity to the Manager over the pod network', async () => {
    const beats: Array<{ path: string; body: string }> = [];
    let m: Manager | undefined;
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        beats.push({ path: req.url ?? '', body });
        const id = /^\/v1\/boxes\/([^/]+)\/heartbeat$/.exec(req.url ?? '')?.[1];
        if (id && m) void m.heartbeat(id, JSON.parse(body) as { active: boolean; processCount?: number }).catch(() => undefined);
        res.end('{}');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, NODE_IP, resolve));
    try {
      m = newManager({}, { apiUrl: `http://${NODE_IP}:${(server.address() as AddressInfo).port}`, heartbeatIntervalMs: 200 });
      const box = await m.create({ image: IMAGE });
      const s = await box.stream(['sleep', '5']);
      await until('a heartbeat from the pod', async () => beats.some((b) => b.path === `/v1/boxes/${box.id}/heartbeat`));
      const beat = JSON.parse(beats.find((b) => b.path.includes(box.id))!.body) as { active: boolean; processCount: number };
      assert.equal(beat.active, true);
      assert.ok(beat.processCount >= 1);
      await s.cancel();
      await box.remove();
    } finally {
      server.close();
    }
  });
});
