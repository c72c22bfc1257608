// Workspaces on a Kubernetes pool, on real pods and PVCs of the test cluster (skipped with the
// reason when there is none; src/testing/kube-cluster.ts): a workspace is a PVC, boxes
// mount it, and `manager.workspaces.fs(id)` works through a short-lived helper pod.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import * as tar from 'tar-stream';
import { isSbxError } from '../errors.js';
import { parseKubeAddress } from '../runtime/kubernetes/address.js';
import { KubeConnection } from '../runtime/kubernetes/connection.js';
import { openTestKube, testAgentImage, testKubeAddress, unavailable } from '../testing/kube-cluster.js';
import { testEnv } from '../testing/env.js';
import { WorkspaceManager } from '../workspace/manager.js';
import type { WorkspaceFS } from '../workspace/types.js';
import { rejectsWithCode } from '../testing/workspace/fixtures.js';
import type { PoolConfig } from './config.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';
import { HELPER_LABEL, WORKSPACE_LABEL, WorkspaceVolumes, hasWorkspaceVolumes, helperLabels } from './workspace-volumes.js';

const why = await unavailable();
const IMAGE = testEnv.baseImage;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-kube-ws-'));
const hostDir = mkdtempSync(join(tmpdir(), 'sbx-kube-ws-host-'));
const managers: Manager[] = [];
const names = new Set<string>();
const workspaceIds = new Set<string>();
let seq = 0;
const cluster = why ? undefined : openTestKube({ agentImage: testAgentImage });
const conn = why ? undefined : await KubeConnection.open(parseKubeAddress(testKubeAddress()));
const log = pino({ level: 'silent' });

function kubePool(extra: Partial<PoolConfig> = {}): PoolConfig {
  return { name: 'kube', addr: testKubeAddress(), agentImage: testAgentImage, readyTimeoutMs: 60_000, ...extra };
}

function newManager(name = `kws${++seq}-${process.pid}`, pool: Partial<PoolConfig> = {}): Manager {
  names.add(name);
  const m = new Manager({ name, pools: [kubePool(pool)], dataDir, cleanupIntervalMs: 0, logger: log });
  managers.push(m);
  return m;
}

function wsId(tag: string): string {
  const id = `kws-${tag}-${process.pid}`;
  workspaceIds.add(id);
  return id;
}

/** Helper pods of a Manager, asked of the cluster. */
async function helpersOf(name: string) {
  return cluster!.list({ labels: { [HELPER_LABEL]: name } });
}

/** A workspace's PVCs, asked of the cluster. */
async function pvcsOf(id: string) {
  return (await conn!.core.listNamespacedPersistentVolumeClaim({ namespace: conn!.namespace, labelSelector: `${WORKSPACE_LABEL}=${id}` })).items;
}

async function until(what: string, check: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`${what}: not within ${ms} ms`);
    await sleep(100);
  }
}

/** The error code (and field) a call ends with, or 'ok'. */
async function outcome(work: () => Promise<unknown>): Promise<string> {
  try {
    await work();
    return 'ok';
  } catch (err) {
    if (!isSbxError(err)) throw err;
    return `${err.code}${err.details?.['field'] ? ` field=${String(err.details['field'])}` : ''}`;
  }
}

after(async () => {
  if (why) {
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(hostDir, { recursive: true, force: true });
    return;
  }
  await Promise.all(managers.map((m) => m.close()));
  // Looked at first, then removed: a leak fails the file instead of staying in the namespace.
  const pods = (await Promise.all([...names].flatMap((n) => [helpersOf(n), cluster!.list({ labels: managerSelector(n) })]))).flat();
  const pvcs = (await Promise.all([...workspaceIds].map(pvcsOf))).flat().filter((c) => !c.metadata?.deletionTimestamp);
  await Promise.all(pods.map((p) => cluster!.remove(p.id, { force: true }).catch(() => undefined)));
  await Promise.all(
    pvcs.map((c) => conn!.core.deleteNamespacedPersistentVolumeClaim({ name: c.metadata!.name!, namespace: conn!.namespace }).catch(() => undefined)),
  );
  await cluster!.close();
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(hostDir, { recursive: true, force: true });
  assert.deepEqual(
    [...pods.map((p) => `pod ${p.name}`), ...pvcs.map((c) => `PVC ${c.metadata!.name!}`)],
    [],
    'helper pods, boxes or PVCs left behind by the workspace tests',
  );
});

describe('workspaces on a Kubernetes pool, on a real cluster', { skip: why ?? false }, () => {
  test('the pool is an online node with storage; a workspace is a labelled PVC sized by its quota, only its metadata on disk', async () => {
    const m = newManager();
    const [node] = m.workspaces.nodes();
    assert.equal(node?.name, 'kube');
    assert.equal(node?.online, true);
    assert.ok(node?.storage instanceof WorkspaceVolumes);
    assert.ok(hasWorkspaceVolumes(openTestKube()));
    const ws = await m.workspaces.create({ id: wsId('meta'), name: 'meta', owner: 'alice', node: 'kube', quotaBytes: 64 * 1024 * 1024 });
    const [pvc, ...more] = await pvcsOf(ws.id);
    assert.equal(more.length, 0);
    assert.equal(pvc?.spec?.resources?.requests?.['storage'], String(64 * 1024 * 1024));
    assert.deepEqual(pvc?.spec?.accessModes, ['ReadWriteOnce']);
    assert.equal(pvc?.metadata?.labels?.['sbx.workspace-node'], 'kube');
    assert.equal(pvc?.metadata?.annotations?.['sbx.dev/workspace-path'], await m.workspaces.mountPath(ws.id));
    assert.deepEqual(readdirSync(join(dataDir, 'workspaces', 'kube', ws.id)), ['workspace.json']);
    // The same id again is a conflict, and leaves the first workspace's PVC alone.
    await rejectsWithCode(m.workspaces.create({ id: ws.id, name: 'again', owner: 'bob', node: 'kube' }), 'conflict');
    // A PVC of that name made elsewhere (another data directory of the same path) is never taken over.
    await rejectsWithCode(cluster!.createWorkspaceVolume(await m.workspaces.mountPath(ws.id), { exclusive: true }), 'conflict');
    assert.equal((await pvcsOf(ws.id)).length, 1);
    await m.workspaces.delete(ws.id);
    await until('the PVC deleted', async () => (await pvcsOf(ws.id)).length === 0);
    assert.equal(existsSync(join(dataDir, 'workspaces', 'kube', ws.id)), false);

    // The pool's storageClass names the PVCs' class (one no provisioner serves: the PVC stays Pending).
    const classed = newManager(undefined, { storageClass: 'sbx-test-no-such-class' });
    const other = await classed.workspaces.create({ id: wsId('class'), name: 'class', owner: 'alice', node: 'kube' });
    const [pending] = await pvcsOf(other.id);
    assert.equal(pending?.spec?.storageClassName, 'sbx-test-no-such-class');
    assert.equal(pending?.spec?.resources?.requests?.['storage'], String(1024 ** 3), 'no quota: 1 GiB');
    await classed.workspaces.delete(other.id);
    await until('the pending PVC deleted', async () => (await pvcsOf(other.id)).length === 0);
  });

  test('data written in one box is read in a second box after the first pod is deleted, and through the file API both ways', async (t) => {
    const m = newManager();
    const ws = await m.workspaces.create({ id: wsId('two-pods'), name: 'two pods', owner: 'alice', node: 'kube' });
    const files = await m.workspaces.fs(ws.id);
    let t0 = performance.now();
    await files.writeFile('from-api/hello.txt', 'written through the helper\n');
    t.diagnostic(`first file operation (helper pod start + write): ${Math.round(performance.now() - t0)} ms`);
    assert.equal((await helpersOf(m.config.name)).length, 1, 'one helper pod serves the workspace');

    const a = await m.create({ image: IMAGE, owner: 'alice', workspaceId: ws.id });
    assert.equal(a.pool, 'kube');
    const inA = await a.exec([
      'sh',
      '-c',
      'id -u; cat /workspace/from-api/hello.txt; stat -c %u:%g /workspace/from-api/hello.txt; echo "from box A" > /workspace/a.txt',
    ]);
    assert.equal(inA.exitCode, 0, inA.stderr);
    assert.equal(inA.stdout, '1000\nwritten through the helper\n1000:1000\n');
    // Deleting a workspace a box mounts is refused.
    await rejectsWithCode(m.workspaces.delete(ws.id), 'conflict');
    const podA = a.containerId;
    await a.remove();
    assert.deepEqual(
      (await cluster!.list({ labels: managerSelector(m.config.name) })).map((p) => p.id),
      [],
      `box A's pod ${podA} is gone`,
    );

    const b = await m.create({ image: IMAGE, owner: 'alice', workspaceId: ws.id });
    const inB = await b.exec([
      'sh',
      '-c',
      'cat /workspace/a.txt && mkdir -p /workspace/b && echo "from box B" > /workspace/b/b.txt && echo edited >> /workspace/from-api/hello.txt',
    ]);
    assert.equal(inB.exitCode, 0, inB.stderr);
    assert.equal(inB.stdout, 'from box A\n');
    assert.equal(await files.readFile('b/b.txt', 'utf8'), 'from box B\n');
    assert.equal(await files.readFile('from-api/hello.txt', 'utf8'), 'written through the helper\nedited\n');
    assert.equal(await (await b.workspace()).readFile('a.txt', 'utf8'), 'from box A\n');

    t0 = performance.now();
    for (let i = 0; i < 10; i++) await files.writeFile('lat.txt', `n${i}`);
    const writeMs = (performance.now() - t0) / 10;
    t0 = performance.now();
    for (let i = 0; i < 10; i++) await files.readFile('lat.txt');
    const readMs = (performance.now() - t0) / 10;
    t.diagnostic(`through a running helper: writeFile ${writeMs.toFixed(1)} ms, readFile ${readMs.toFixed(1)} ms (mean of 10)`);

    // The rest of the API on the PVC.
    assert.deepEqual(
      (await files.readDir('', { recursive: true })).map((e) => `${e.name}${e.isDir ? '/' : ''}`),
      ['a.txt', 'b/', 'b/b.txt', 'from-api/', 'from-api/hello.txt', 'lat.txt'],
    );
    const root = await files.stat('');
    assert.equal(root.name, '');
    assert.equal(root.isDir, true);
    assert.equal((await files.stat('b/b.txt')).size, 'from box B\n'.length);
    await files.mkdirAll('deep/er', 0o750);
    assert.equal((await files.stat('deep/er')).mode, 0o750);
    await files.rename('a.txt', 'deep/er/moved.txt');
    assert.equal(await files.exists('a.txt'), false);
    await files.copy('deep/er/moved.txt', 'copied.txt');
    await files.writeFileBase64('b64.bin', Buffer.from([0, 1, 2, 255]).toString('base64'));
    assert.equal(await files.readFileBase64('b64.bin'), 'AAEC/w==');
    const big = Buffer.alloc(3 * 1024 * 1024, 7);
    await files.writeFile('big.bin', Readable.from([big.subarray(0, 1 << 20), big.subarray(1 << 20)]));
    const chunks: Buffer[] = [];
    for await (const c of await files.createReadStream('big.bin')) chunks.push(c as Buffer);
    assert.ok(Buffer.concat(chunks).equals(big));
    const hostFile = join(hostDir, 'host.txt');
    writeFileSync(hostFile, 'from the host\n', { mode: 0o640 });
    await files.copyFromHost(hostFile, 'in/host.txt');
    assert.equal(
      (await b.exec(['sh', '-c', 'cat /workspace/copied.txt /workspace/in/host.txt; stat -c %a /workspace/in/host.txt'])).stdout,
      'from box A\nfrom the host\n640\n',
    );
    await rejectsWithCode(files.remove('deep'), 'conflict', 'a non-empty directory');
    await files.removeAll('deep');
    await files.remove('copied.txt');
    await rejectsWithCode(files.readFile('copied.txt'), 'not_found');
    const usage = await m.workspaces.usage(ws.id);
    assert.deepEqual(usage, {
      bytes: 'from box B\n'.length + 'written through the helper\nedited\n'.length + 2 + 4 + big.length + 'from the host\n'.length,
      files: 6,
    });

    // Tar streams and tree copies through the tool (tar-out, tar-in, copy), as on a host node.
    const linked = await b.exec(['sh', '-c', 'ln -s b.txt /workspace/b/link && ln -s /etc/passwd /workspace/b/out']);
    assert.equal(linked.exitCode, 0, linked.stderr);
    const archive: Buffer[] = [];
    for await (const c of await files.exportTar('b')) archive.push(c as Buffer);
    assert.deepEqual(await files.importTar('restored', Buffer.concat(archive)), { entries: 2, bytes: 'from box B\n'.length });
    assert.deepEqual(
      (await files.readDir('restored')).map((e) => [e.name, e.isSymlink]),
      [
        ['b.txt', false],
        ['link', true],
      ],
      'the symlink out of the tree is left out of the archive',
    );
    await rejectsWithCode(files.exportTar('b/b.txt'), 'invalid_argument', 'exportTar of a file');
    await rejectsWithCode(files.importTar('bad', Buffer.alloc(1024, 1)), 'invalid_argument', 'importTar of garbage');
    const escape = tar.pack();
    escape.entry({ name: '../escape.txt' }, 'x');
    escape.finalize();
    await rejectsWithCode(files.importTar('bad', Readable.from(escape)), 'invalid_argument', 'importTar of ../');
    assert.equal(await files.exists('bad'), false, 'a refused import leaves nothing');
    t0 = performance.now();
    const whole: Buffer[] = [];
    for await (const c of await files.exportTar('')) whole.push(c as Buffer);
    const outMs = performance.now() - t0;
    t0 = performance.now();
    const all = await files.importTar('all', Readable.from(whole));
    t.diagnostic(
      `the whole workspace as tar (${(Buffer.concat(whole).length / 2 ** 20).toFixed(1)} MiB, ${all.entries} entries): exportTar ${outMs.toFixed(0)} ms, importTar ${(performance.now() - t0).toFixed(0)} ms`,
    );
    assert.ok((await files.readFile('all/big.bin')).equals(big));
    await files.copy('b', 'b2');
    assert.deepEqual(
      (await files.readDir('b2')).map((e) => e.name),
      ['b.txt', 'link', 'out'],
    );
    await files.copy('b/link', 'link2');
    assert.equal((await files.stat('link2')).isSymlink, true);
    mkdirSync(join(hostDir, 'tree', 'sub'), { recursive: true });
    writeFileSync(join(hostDir, 'tree', 'sub', 'x.txt'), 'host tree\n', { mode: 0o600 });
    await files.copyFromHost(join(hostDir, 'tree'), 'tree');
    assert.equal(
      (await b.exec(['sh', '-c', 'cat /workspace/b2/b.txt /workspace/tree/sub/x.txt; stat -c %a:%u:%g /workspace/tree/sub/x.txt; readlink /workspace/b2/out']))
        .stdout,
      'from box B\nhost tree\n600:1000:1000\n/etc/passwd\n',
    );

    await b.remove();
    await m.workspaces.delete(ws.id);
    await until('the helper pod deleted with its workspace', async () => (await helpersOf(m.config.name)).length === 0);
    await until('the PVC deleted', async () => (await pvcsOf(ws.id)).length === 0);
    await rejectsWithCode(files.readFile('b/b.txt'), 'not_found', 'the old file API after delete');
    assert.equal((await helpersOf(m.config.name)).length, 0, 'a call after the delete starts no helper');
  });

  test('paths: the host API lexical policy, the same codes; a symlink a box plants leads only into the empty helper pod', async () => {
    const m = newManager();
    const ws = await m.workspaces.create({ id: wsId('paths'), name: 'paths', owner: 'alice', node: 'kube' });
    const files = await m.workspaces.fs(ws.id);
    await files.writeFile('inside.txt', 'in');
    const host = new WorkspaceManager({ dataDir: join(hostDir, 'data') });
    const hostWs = await host.create({ name: 'paths', owner: 'alice', node: 'local' });
    const hostFiles = await host.fs(hostWs.id);
    await hostFiles.writeFile('inside.txt', 'in');
    const calls: Array<[string, (f: WorkspaceFS) => Promise<unknown>]> = [];
    for (const p of ['../x', '/etc/passwd', 'a/../../x', './../x', 'x/../..', '//x', 'a\\b', 'nul\0byte', 'n'.repeat(256), '']) {
      calls.push([`readFile ${JSON.stringify(p)}`, (f) => f.readFile(p)]);
      calls.push([`writeFile ${JSON.stringify(p)}`, (f) => f.writeFile(p, 'x')]);
      calls.push([`readDir ${JSON.stringify(p)}`, (f) => f.readDir(p)]);
      calls.push([`removeAll ${JSON.stringify(p)}`, (f) => f.removeAll(p)]);
      calls.push([`rename to ${JSON.stringify(p)}`, (f) => f.rename('inside.txt', p)]);
    }
    calls.push(['readFile a/../inside.txt', (f) => f.readFile('a/../inside.txt')]);
    for (const [what, call] of calls) {
      const want = await outcome(() => call(hostFiles));
      assert.equal(await outcome(() => call(files)), want, what);
      if (what !== 'readFile a/../inside.txt' && !what.startsWith('readDir ""')) assert.notEqual(want, 'ok', what);
    }

    // A box links the workspace to `/` and to the agent's environment: through the link the
    // file API sees the helper pod's own filesystem, which has nothing but the agent binary.
    const box = await m.create({ image: IMAGE, owner: 'alice', workspaceId: ws.id });
    const planted = await box.exec(['sh', '-c', 'ln -s / /workspace/up && ln -s /proc/1/environ /workspace/env && ls /workspace/up/bin >/dev/null && echo ok']);
    assert.equal(planted.stdout, 'ok\n', planted.stderr);
    const seen = (await files.readDir('up')).map((e) => e.name);
    assert.ok(seen.includes('sbx-agent') && seen.includes('workspace'), `the helper's root: ${seen.join(' ')}`);
    for (const absent of ['bin', 'home', 'usr', 'root', 'var']) assert.ok(!seen.includes(absent), `no ${absent} in the helper pod: ${seen.join(' ')}`);
    await rejectsWithCode(files.readFile('env'), 'forbidden', "the agent's environment (its token)");
    await rejectsWithCode(files.writeFile('up/planted.txt', 'x'), 'forbidden', "the helper's read-only root");
    await box.remove();
    await m.workspaces.delete(ws.id);
  });

  test('recovery: a restarted Manager finds the workspace on disk and its PVC by name; start sweeps helpers a crash left, never adopting them as boxes', async () => {
    const name = `kwsrec-${process.pid}`;
    const first = newManager(name);
    const ws = await first.workspaces.create({ id: wsId('recover'), name: 'recover', owner: 'carol', node: 'kube' });
    await (await first.workspaces.fs(ws.id)).writeFile('kept.txt', 'survives the Manager');
    // A crash: the Manager goes without closing; its helper pod stays (closing would delete it).
    assert.equal((await helpersOf(name)).length, 1);
    managers.splice(managers.indexOf(first), 1);

    const second = newManager(name);
    await second.start();
    assert.equal((await helpersOf(name)).length, 0, 'the start sweep deleted the left helper');
    assert.deepEqual(await second.list(), [], 'a helper pod is never adopted as a box');
    assert.deepEqual(await second.workspaces.get(ws.id), ws);
    assert.equal(await (await second.workspaces.fs(ws.id)).readFile('kept.txt', 'utf8'), 'survives the Manager');
    await second.close();
    assert.equal((await helpersOf(name)).length, 0, 'close deletes the helper pods');
    managers.splice(managers.indexOf(second), 1);

    const third = newManager(name);
    await third.workspaces.delete(ws.id);
    await until('the PVC deleted', async () => (await pvcsOf(ws.id)).length === 0);
    await third.close();
  });

  test('a helper pod is deleted after it was idle; the next operation starts another', async () => {
    const m = newManager();
    const ws = await m.workspaces.create({ id: wsId('idle'), name: 'idle', owner: 'dave', node: 'kube' });
    const storage = new WorkspaceVolumes({ runtime: () => cluster!, manager: m.config.name, node: 'kube', log, helperIdleMs: 300 });
    const files = storage.open(ws, await m.workspaces.mountPath(ws.id), { uid: 1000, gid: 1000 });
    await files.writeFile('x.txt', 'one');
    const first = (await helpersOf(m.config.name)).map((p) => p.id);
    assert.equal(first.length, 1);
    await until('the idle helper deleted', async () => (await helpersOf(m.config.name)).length === 0, 10_000);
    assert.equal(await files.readFile('x.txt', 'utf8'), 'one');
    const second = (await helpersOf(m.config.name)).map((p) => p.id);
    assert.equal(second.length, 1);
    assert.notEqual(second[0], first[0]);
    await storage.close();
    assert.equal((await helpersOf(m.config.name)).length, 0);
    await rejectsWithCode(files.readFile('x.txt'), 'not_available', 'after close');
    await m.workspaces.delete(ws.id);
  });

  test('a helper left by a crash carries labels no box selector matches', () => {
    const labels = helperLabels('sbx', 'kube', 'ws-1');
    const selector = managerSelector('sbx');
    assert.ok(!Object.entries(selector).every(([k, v]) => labels[k] === v));
  });
});
