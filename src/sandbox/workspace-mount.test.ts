import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { testEnv } from '../testing/env.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';

const IMAGE = testEnv.baseImage;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-mount-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const name = `mount-${process.pid}`;
const pools = [
  { name: 'local', addr: testEnv.engineAddr },
  { name: 'other', addr: testEnv.engineAddr },
];
const manager = new Manager({ name, dataDir, pools, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }) });

after(async () => {
  const left = await engine.list({ labels: managerSelector(name) });
  await Promise.all(left.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
  await manager.close();
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(
    left.map((c) => c.name),
    [],
    'containers left behind by the mount tests',
  );
});

describe('workspaces mounted into boxes through the Manager', () => {
  test('manager.workspaces lists one node per local pool', () => {
    assert.deepEqual(manager.workspaces.nodes(), [
      { name: 'local', addr: testEnv.engineAddr, online: true },
      { name: 'other', addr: testEnv.engineAddr, online: true },
    ]);
  });

  test('files pass both ways between the workspace FS and the box', async () => {
    const ws = await manager.workspaces.create({ name: 'both-ways', owner: 'alice', node: 'local' });
    await using box = await manager.create({ image: IMAGE, owner: 'alice', workspaceId: ws.id });
    assert.equal(box.workspaceId, ws.id);
    const files = await box.workspace();
    await files.writeFile('from-api.txt', 'written by the host\n');
    assert.equal((await box.exec(['cat', '/workspace/from-api.txt'])).stdout, 'written by the host\n');
    // The box runs as uid 1000 and can edit what the API wrote.
    const edit = await box.exec(['sh', '-c', 'echo appended >> /workspace/from-api.txt && mkdir -p /workspace/out && echo made-in-box > /workspace/out/f']);
    assert.equal(edit.exitCode, 0, edit.stderr);
    assert.equal(await files.readFile('from-api.txt', 'utf8'), 'written by the host\nappended\n');
    assert.equal(await files.readFile('out/f', 'utf8'), 'made-in-box\n');
  });

  test('the box is placed on the workspace node; a contrary pool is a conflict', async () => {
    const ws = await manager.workspaces.create({ name: 'placed', owner: 'bob', node: 'other' });
    await using box = await manager.create({ image: IMAGE, owner: 'bob', workspaceId: ws.id });
    assert.equal(box.pool, 'other');
    await assert.rejects(
      manager.create({ image: IMAGE, owner: 'bob', workspaceId: ws.id, pool: 'local' }),
      (e) => isSbxError(e, 'conflict') && /other/.test(e.message),
    );
  });

  test('a custom mount path, read-only: writes inside the box fail', async () => {
    const ws = await manager.workspaces.create({ name: 'ro', owner: 'carol', node: 'local' });
    await (await manager.workspaces.fs(ws.id)).writeFile('keep.txt', 'original');
    await using box = await manager.create({ image: IMAGE, owner: 'carol', workspaceId: ws.id, mountMode: 'ro', mountPath: '/data', workDir: '/tmp' });
    assert.equal((await box.exec(['cat', '/data/keep.txt'])).stdout, 'original');
    const w = await box.exec(['sh', '-c', 'echo changed > /data/keep.txt']);
    assert.notEqual(w.exitCode, 0);
    assert.match(w.stderr, /Read-only file system/);
    assert.equal(await (await manager.workspaces.fs(ws.id)).readFile('keep.txt', 'utf8'), 'original');
  });

  test('metadata and other workspaces are not reachable from the box', async () => {
    const mine = await manager.workspaces.create({ name: 'mine', owner: 'dave', node: 'local', labels: { secret: 'meta-value' } });
    const theirs = await manager.workspaces.create({ name: 'theirs', owner: 'erin', node: 'local' });
    await (await manager.workspaces.fs(theirs.id)).writeFile('private.txt', 'not for dave');
    await using box = await manager.create({ image: IMAGE, owner: 'dave', workspaceId: mine.id });
    const search = 'grep -r -l -e meta-value -e "not for dave" /workspace /tmp /home /etc /var /root /mnt /opt /srv /run 2>/dev/null';
    const look = await box.exec(['sh', '-c', `ls -a /workspace; cat /workspace/../workspace.json 2>&1; ${search}; true`], { timeoutMs: 20_000 });
    assert.equal(look.timedOut, false);
    assert.doesNotMatch(look.stdout, /workspace\.json\n|meta-value|not for dave/);
    assert.doesNotMatch(look.stdout, new RegExp(theirs.id));
    // The only host directory of the data dir inside the box is this workspace's root.
    const mounts = (await box.exec(['cat', '/proc/self/mountinfo'])).stdout.split('\n').filter((l) => l.includes('/workspaces/'));
    assert.equal(mounts.length, 1, mounts.join('\n'));
    assert.match(mounts[0]!, new RegExp(`/${mine.id}/root /workspace `));
  });

  test("another owner's workspace is not_found on create and getOrCreate, and creates nothing", async () => {
    const ws = await manager.workspaces.create({ name: 'alices', owner: 'alice', node: 'local' });
    const notFound = (e: unknown) => isSbxError(e, 'not_found') && /not found for owner 'bob'/.test((e as Error).message);
    await assert.rejects(manager.create({ image: IMAGE, owner: 'bob', workspaceId: ws.id }), notFound);
    await assert.rejects(manager.getOrCreate({ id: 'sb-bob-steals', image: IMAGE, owner: 'bob', workspaceId: ws.id }), notFound);
    await assert.rejects(manager.create({ image: IMAGE, workspaceId: ws.id }), (e) => isSbxError(e, 'not_found'), 'no owner is the default owner, not alice');
    assert.equal((await manager.list()).length, 0);
    assert.deepEqual(await engine.list({ labels: managerSelector(name) }), []);
    await manager.workspaces.delete(ws.id);
  });

  test(
    'a setuid-root program a box plants in its workspace is closed to other users of the host',
    { skip: process.getuid?.() !== 0 && 'needs root to act as another host user' },
    async () => {
      chmodSync(dataDir, 0o755); // as an operator's /var/lib/sbx would be: open to walk through
      const ws = await manager.workspaces.create({ name: 'planted', owner: 'hana', node: 'local' });
      await using box = await manager.create({ image: IMAGE, owner: 'hana', workspaceId: ws.id });
      const plant = await box.exec(['sh', '-c', 'cp /bin/busybox /workspace/true && chmod 4755 /workspace/true && ls -l /workspace/true'], { user: '0' });
      assert.equal(plant.exitCode, 0, plant.stderr);
      assert.match(plant.stdout, /^-rwsr-xr-x/, 'the box made it setuid root');
      const planted = join(await manager.workspaces.mountPath(ws.id), 'true'); // busybox runs the applet its name says
      // As `nobody` on the host: the data directory's modes stop the path before the file.
      const run = spawnSync('runuser', ['-u', 'nobody', '--', planted]);
      assert.notEqual(run.status, 0, 'a host user ran the planted program');
      assert.match(run.stderr.toString(), /Permission denied/);
      assert.equal(statSync(join(dataDir, 'workspaces')).mode & 0o777, 0o700);
    },
  );

  test('an unknown workspace id is not_found and creates nothing', async () => {
    await assert.rejects(manager.create({ image: IMAGE, workspaceId: 'ws-does-not-exist' }), (e) => isSbxError(e, 'not_found'));
    assert.equal((await manager.list()).length, 0);
    assert.deepEqual(await engine.list({ labels: managerSelector(name) }), []);
  });

  test('deleting a mounted workspace is a conflict; after the box is gone it works', async () => {
    const ws = await manager.workspaces.create({ name: 'busy', owner: 'frank', node: 'local' });
    const box = await manager.create({ image: IMAGE, owner: 'frank', workspaceId: ws.id });
    await assert.rejects(manager.workspaces.delete(ws.id), (e) => isSbxError(e, 'conflict'));
    await box.remove();
    await manager.workspaces.delete(ws.id);
    await assert.rejects(manager.workspaces.get(ws.id), (e) => isSbxError(e, 'not_found'));
    // A deleted workspace does not come back as an empty directory under a new box.
    await assert.rejects(manager.create({ image: IMAGE, owner: 'frank', workspaceId: ws.id }), (e) => isSbxError(e, 'not_found'));
  });

  test('recovery keeps the workspace binding', async () => {
    const ws = await manager.workspaces.create({ name: 'recovered', owner: 'gina', node: 'local' });
    const box = await manager.create({ image: IMAGE, owner: 'gina', workspaceId: ws.id, mountPath: '/w' });
    const again = new Manager({ name, dataDir, pools, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }) });
    await again.start();
    const got = await again.get(box.id);
    assert.equal(got.workspaceId, ws.id);
    assert.equal(got.mountPath, '/w');
    await (await got.workspace()).writeFile('x.txt', 'via recovered');
    assert.equal((await got.exec(['cat', '/w/x.txt'])).stdout, 'via recovered');
    await assert.rejects(again.workspaces.delete(ws.id), (e) => isSbxError(e, 'conflict'));
    await got.remove();
    await again.close();
    await box.remove().catch(() => undefined);
  });

  test('a box without a workspace says so', async () => {
    await using box = await manager.create({ image: IMAGE });
    await assert.rejects(box.workspace(), (e) => isSbxError(e, 'not_found'));
  });
});
