/**
 * Snapshots on the real engine: a box's files come back in a box made from its snapshot, its
 * processes do not; the source box keeps its state; only the owner sees or uses a snapshot (by
 * id, by image reference, by image id prefix); names, limits, deletion, a restart.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { MemoryRuntime } from '../testing/memory-runtime.js';
import { testEnv } from '../testing/env.js';
import { untilEngineSays } from '../testing/freezer.js';
import type { LocalBox } from './box.js';
import type { ManagerConfig } from './config.js';
import { Manager } from './manager.js';
import type { SnapshotInfo } from './snapshots.js';

const IMAGE = testEnv.baseImage;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-snapshots-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const managers: Manager[] = [];
const NAME = `snaptest${process.pid}`;

function newManager(extra: Partial<ManagerConfig> = {}): Manager {
  const m = new Manager({
    name: NAME,
    pools: [
      { name: 'local', addr: testEnv.engineAddr },
      // A second pool on the same engine: a create naming it for a snapshot of `local` is refused.
      { name: 'other', addr: testEnv.engineAddr },
      { name: 'nocommit', runtime: noCommit() },
    ],
    dataDir,
    cleanupIntervalMs: 0,
    logger: pino({ level: 'silent' }),
    ...extra,
  });
  managers.push(m);
  return m;
}

/** A runtime without the engine's commit, as Kubernetes is (capabilities.commit false). */
function noCommit(): MemoryRuntime {
  const rt = new MemoryRuntime();
  Object.defineProperty(rt, 'capabilities', { value: { ...rt.capabilities, commit: false } });
  return rt;
}

/** The snapshot images this file's Manager made that are still on the engine. */
async function snapshotImages(): Promise<string[]> {
  return (await engine.images.list()).flatMap((i) => i.tags.filter((t) => t.startsWith(`sbx-snapshot/${NAME}:`)));
}

const rejectsWith = (p: Promise<unknown>, code: string, field?: string) =>
  assert.rejects(p, (e) => {
    assert.ok(isSbxError(e, code as never), `expected ${code}, got ${String(e)}`);
    if (field !== undefined) assert.equal((e as { details?: { field?: string } }).details?.field, field);
    return true;
  });

let manager: Manager;
before(async () => {
  manager = newManager();
  await manager.start();
});
after(async () => {
  const boxes = (await Promise.all(managers.map((m) => m.list()))).flat();
  await Promise.all(boxes.map((b) => b.remove().catch(() => undefined)));
  const left = await snapshotImages();
  await Promise.all(left.map((ref) => engine.images.remove(ref, { force: true }).catch(() => undefined)));
  await Promise.all(managers.map((m) => m.close()));
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(left, [], 'snapshot images left behind (each test deletes its own)');
});

async function deleteAll(...snaps: SnapshotInfo[]): Promise<void> {
  for (const s of snaps) await manager.snapshots.delete(s.id);
}

describe('snapshots', () => {
  test('a box made from a snapshot has its files, not its processes; the source box keeps running', async () => {
    const box = await manager.create({ image: IMAGE, owner: 'alice' });
    let copy: LocalBox | undefined;
    let byRef: LocalBox | undefined;
    const snap = await (async () => {
      assert.equal(
        (
          await box.exec([
            'sh',
            '-c',
            "set -e; echo kept > /tmp/saved.txt; (exec sleep 31337) & until ps -o args | grep -qx 'sleep 31337'; do sleep 0.01; done",
          ])
        ).exitCode,
        0,
      );
      // ps lists the grep too, but its arguments are not exactly these.
      const sleeper = async (b: LocalBox) => (await b.exec(['sh', '-c', "ps -o args | grep -x 'sleep 31337' || echo none"])).stdout;
      assert.equal(await sleeper(box), 'sleep 31337\n', 'the background process runs in the source box');
      const s = await box.snapshot({ name: 'with-file' });
      assert.equal((await box.info()).status, 'running', 'left running');
      // The engine's own word lags its freezer for a moment (the commit pauses it: docker/freezer.ts).
      await untilEngineSays(engine, box.containerId, 'running');
      assert.equal(await sleeper(box), 'sleep 31337\n', 'its processes kept running');
      return s;
    })();
    try {
      assert.match(snap.id, /^snap-[0-9a-f]{12}$/);
      assert.equal(snap.name, 'with-file');
      assert.equal(snap.owner, 'alice');
      assert.equal(snap.pool, 'local');
      assert.equal(snap.sourceBoxId, box.id);
      assert.equal(snap.image, `sbx-snapshot/${NAME}:${snap.id}`);
      assert.ok(snap.sizeBytes > 0, 'the engine told the size');
      assert.ok(!Number.isNaN(Date.parse(snap.createdAt)));
      assert.deepEqual(await manager.snapshots.get(snap.id), snap);
      assert.deepEqual(await manager.snapshots.get('with-file', { owner: 'alice' }), snap, 'by name');

      copy = await manager.create({ image: snap.id, owner: 'alice' });
      assert.equal(copy.pool, 'local');
      assert.equal(copy.image, snap.image);
      assert.equal((await copy.exec(['cat', '/tmp/saved.txt'])).stdout, 'kept\n');
      assert.equal(
        (await copy.exec(['sh', '-c', "ps -o args | grep -x 'sleep 31337' || echo none"])).stdout,
        'none\n',
        'no process of the source box is in the copy',
      );
      // The copy's own identity, not the source's (sbx's variables were blanked in the image).
      assert.equal((await copy.exec(['sh', '-c', 'echo $SBX_SANDBOX_ID'])).stdout, `${copy.id}\n`);
      assert.equal((await copy.info()).execPath, 'agent', 'the agent is injected as in any box');

      byRef = await manager.create({ image: snap.image, owner: 'alice' });
      assert.equal((await byRef.exec(['cat', '/tmp/saved.txt'])).stdout, 'kept\n', 'the image reference works as the id');
    } finally {
      await copy?.remove();
      await byRef?.remove();
      await box.remove();
      await deleteAll(snap);
    }
  });

  test('a paused box stays paused and a stopped one stopped; both can be snapshotted', async () => {
    const box = await manager.create({ image: IMAGE, owner: 'alice' });
    const snaps: SnapshotInfo[] = [];
    try {
      assert.equal((await box.exec(['sh', '-c', 'echo one > /tmp/n.txt'])).exitCode, 0);
      await box.pause();
      snaps.push(await box.snapshot());
      await untilEngineSays(engine, box.containerId, 'paused');
      await box.resume();
      assert.equal((await box.exec(['sh', '-c', 'echo two > /tmp/n.txt'])).exitCode, 0);
      await box.stop();
      snaps.push(await box.snapshot());
      assert.equal((await box.info()).status, 'stopped');
      assert.equal(snaps[0]!.name, null);
      for (const [i, want] of [
        [0, 'one'],
        [1, 'two'],
      ] as const) {
        await using copy = await manager.create({ image: snaps[i]!.id, owner: 'alice' });
        assert.equal((await copy.exec(['cat', '/tmp/n.txt'])).stdout, `${want}\n`);
      }
    } finally {
      await box.remove();
      await deleteAll(...snaps);
    }
  });

  test("another owner's snapshot is not found by any way of naming it, as a missing one", async () => {
    const box = await manager.create({ image: IMAGE, owner: 'alice' });
    const snap = await box.snapshot({ name: 'private' });
    try {
      assert.deepEqual(await manager.snapshots.list({ owner: 'bob' }), []);
      assert.deepEqual(
        (await manager.snapshots.list({ owner: 'alice' })).map((s) => s.id),
        [snap.id],
      );
      await rejectsWith(manager.snapshots.get(snap.id, { owner: 'bob' }), 'not_found');
      await rejectsWith(manager.snapshots.get('private', { owner: 'bob' }), 'not_found');
      await rejectsWith(manager.snapshots.delete(snap.id, { owner: 'bob' }), 'not_found');
      const imageId = (await engine.images.list()).find((i) => i.tags.includes(snap.image))!.id;
      const ghost = 'snap-000000000000';
      for (const image of [snap.id, snap.image, `docker.io/${snap.image}`, imageId, imageId.slice(0, 12), imageId.replace('sha256:', '').slice(0, 6), ghost]) {
        await assert.rejects(manager.create({ image, owner: 'bob' }), (e) => {
          assert.ok(isSbxError(e, 'not_found'), `${image}: ${String(e)}`);
          assert.equal((e as Error).message, `image '${image}' not found: no snapshot of owner 'bob' has that id`);
          return true;
        });
      }
      // A reference under sbx-snapshot/ that is nobody's is refused the same way (never asked of the engine).
      await rejectsWith(manager.create({ image: `sbx-snapshot/elsewhere:${snap.id}`, owner: 'alice' }), 'not_found');
      assert.deepEqual(await manager.list({ owner: 'bob' }), [], 'no box was made for bob');
      assert.ok(await engine.images.exists(snap.image), "bob's delete removed nothing");
    } finally {
      await box.remove();
      await deleteAll(snap);
    }
  });

  test('names are unique per owner; the per-owner limit; bad input names the field', async () => {
    const limited = newManager({ maxSnapshotsPerOwner: 2 });
    const box = await limited.create({ image: IMAGE, owner: 'alice' });
    const bobBox = await limited.create({ image: IMAGE, owner: 'bob' });
    const snaps: SnapshotInfo[] = [];
    try {
      snaps.push(await box.snapshot({ name: 'same' }));
      await rejectsWith(box.snapshot({ name: 'same' }), 'conflict', 'name');
      snaps.push(await bobBox.snapshot({ name: 'same' }));
      snaps.push(await box.snapshot());
      await rejectsWith(box.snapshot({ name: 'third' }), 'limit_exceeded');
      await rejectsWith(box.snapshot({ name: 'has space' }), 'invalid_argument', 'name');
      await rejectsWith(box.snapshot({ name: '' }), 'invalid_argument', 'name');
      await rejectsWith(box.snapshot({ nmae: 'x' } as never), 'invalid_argument');
      await rejectsWith(limited.snapshots.get('same'), 'invalid_argument', 'id');
      assert.equal((await limited.snapshots.get('same', { owner: 'bob' })).owner, 'bob');
      await rejectsWith(limited.create({ image: snaps[0]!.id, owner: 'alice', pool: 'other' }), 'invalid_argument', 'pool');
      assert.equal((await snapshotImages()).length, 3, 'the refused snapshots made no image');
    } finally {
      await box.remove();
      await bobBox.remove();
      for (const s of snaps) await limited.snapshots.delete(s.id);
    }
  });

  test('delete: conflict while a box made from it exists; then the image is gone and creating from it is not_found', async () => {
    const box = await manager.create({ image: IMAGE, owner: 'alice' });
    const snap = await box.snapshot();
    await box.remove();
    await rejectsWith(box.snapshot(), 'not_found');
    const copy = await manager.create({ image: snap.id, owner: 'alice' });
    await rejectsWith(manager.snapshots.delete(snap.id), 'conflict');
    await copy.remove();
    await manager.snapshots.delete(snap.id, { owner: 'alice' });
    assert.equal(await engine.images.exists(snap.image), false, 'the image is removed');
    await rejectsWith(manager.snapshots.get(snap.id), 'not_found');
    await rejectsWith(manager.create({ image: snap.id, owner: 'alice' }), 'not_found');
    await rejectsWith(manager.create({ image: snap.image, owner: 'alice' }), 'not_found');
    await rejectsWith(manager.snapshots.delete(snap.id), 'not_found');
  });

  test('a restarted Manager knows its snapshots', async () => {
    // carol: the two Managers share a name, and only `again` learns of the delete at the end.
    const box = await manager.create({ image: IMAGE, owner: 'carol' });
    const snap = await box.snapshot({ name: 'survives' });
    await box.remove();
    const again = newManager();
    await again.start();
    assert.deepEqual(await again.snapshots.get('survives', { owner: 'carol' }), snap);
    await using copy = await again.create({ image: snap.id, owner: 'carol' });
    assert.equal(copy.image, snap.image);
    await copy.remove();
    await again.snapshots.delete(snap.id);
  });

  test('a pool whose runtime cannot commit: not_available, no record', async () => {
    await using box = await manager.create({ image: IMAGE, owner: 'alice', pool: 'nocommit' });
    await assert.rejects(
      box.snapshot(),
      (e) => isSbxError(e, 'not_available') && (e as { details?: { reason?: string } }).details?.reason === 'commit_unsupported',
    );
    assert.deepEqual(await manager.snapshots.list({ owner: 'alice' }), []);
  });
});
