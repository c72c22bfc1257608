/**
 * Archive and restore on the real engine: an archived box holds no container, keeps its files and
 * record, comes back on any use; a restarted Manager finds it; a Manager SIGKILLed after any engine
 * call of an archive or a restore leaves the old box or the new one, never neither.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { ManualClock } from '../testing/clock.js';
import { testEnv } from '../testing/env.js';
import { archiveImage } from './archiver.js';
import type { LocalBox, ManagedBox } from './box.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';

const IMAGE = testEnv.baseImage;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-archive-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const managers: Manager[] = [];
let seq = 0;

function newManager(name = `arch${++seq}-${process.pid}`): Manager {
  const m = new Manager({ name, pools: [{ name: 'local', addr: testEnv.engineAddr }], dataDir, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }) });
  managers.push(m);
  return m;
}

after(async () => {
  await Promise.all(managers.map((m) => m.close()));
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** A box with 1 MiB of random bytes in its filesystem; the hash line of them. */
async function boxWithFile(m: Manager): Promise<{ box: LocalBox; hash: string }> {
  const box = (await m.create({ image: IMAGE, labels: { kept: 'yes' }, env: { KEPT_ENV: 'env-kept' }, ports: [{ containerPort: 8080 }] })) as LocalBox;
  const r = await box.exec(['sh', '-c', 'head -c 1048576 /dev/urandom > "$HOME/blob" && sha256sum "$HOME/blob"']);
  assert.equal(r.exitCode, 0, r.stderr);
  return { box, hash: r.stdout };
}

const hashCmd = ['sh', '-c', 'sha256sum "$HOME/blob"'];

describe('archive and restore', () => {
  test('an archived box has no container and keeps its record; a use restores it with its files, env, labels and ports', async () => {
    const m = newManager();
    await m.start();
    const { box, hash } = await boxWithFile(m);
    const old = box.containerId;
    try {
      await box.archive();
      assert.equal(box.status, 'archived');
      await assert.rejects(engine.inspect(old), (e) => isSbxError(e, 'not_found'), 'the container is gone');
      assert.ok(await engine.images.exists(archiveImage(m.config.name, box.id)), 'the archive image is there');
      const info = await box.info();
      assert.deepEqual([info.status, info.id, info.labels, info.ports], ['archived', box.id, { kept: 'yes' }, []]);
      assert.equal((await m.list({ labels: { kept: 'yes' } })).find((b) => b.id === box.id)?.status, 'archived', 'list shows it');
      await box.archive(); // twice: nothing to do
      await assert.rejects(box.pause(), (e) => isSbxError(e, 'conflict'));
      await assert.rejects(box.logs(), (e) => isSbxError(e, 'conflict'));
      // Its archive is no image to create from: it holds this box's files, whoever asks.
      for (const image of [archiveImage(m.config.name, box.id), `docker.io/${archiveImage(m.config.name, box.id)}`, 'sbx-archive:latest']) {
        await assert.rejects(m.create({ image, owner: 'mallory' }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'image');
      }
      // Nor by its id or an id prefix, which the engine would resolve: the image is its owner's only.
      const made = (await engine.images.list()).find((i) => i.tags.includes(archiveImage(m.config.name, box.id)));
      assert.ok(made, 'the archive image is listed');
      const hex = made.id.replace(/^sha256:/, '');
      for (const image of [hex, hex.slice(0, 12), `sha256:${hex}`]) {
        await assert.rejects(m.create({ image, owner: 'mallory' }), (e) => isSbxError(e, 'not_found'), image);
      }
      assert.equal(box.status, 'archived', 'reads do not restore it');

      // A use: restored first, transparently.
      const r = await box.exec([...hashCmd.slice(0, 2), `${hashCmd[2]}; echo "$KEPT_ENV"`]);
      assert.equal(r.stdout, `${hash}env-kept\n`, 'the same bytes and env');
      assert.equal(box.status, 'running');
      assert.notEqual(box.containerId, old, 'a new container');
      const back = await box.info();
      assert.deepEqual([back.id, back.labels, back.status], [box.id, { kept: 'yes' }, 'running']);
      assert.deepEqual(
        back.ports.map((p) => p.containerPort),
        [8080],
        'its ports are published again',
      );
      assert.equal(await engine.images.exists(archiveImage(m.config.name, box.id)), false, 'the archive is gone once restored');
      // Archived again, resume() restores it too; and the files API, which asks for its tool first.
      await box.archive();
      await box.resume();
      assert.equal((await box.exec(hashCmd)).stdout, hash);
      await box.archive();
      assert.equal((await box.files().stat('/etc/hostname')).isFile, true);
      assert.equal(box.status, 'running', 'the files API restored it');
    } finally {
      await box.remove();
    }
    assert.deepEqual(await engine.list({ labels: managerSelector(m.config.name) }), [], 'no container left');
  });

  test('an archived box keeps its workspace: mounted again on restore, and box.workspace() is a use that restores it', async () => {
    const m = newManager();
    await m.start();
    const ws = await m.workspaces.create({ name: `arch-ws-${process.pid}`, owner: 'alice', node: 'local' });
    const box = (await m.create({ image: IMAGE, owner: 'alice', workspaceId: ws.id })) as LocalBox;
    try {
      assert.equal((await box.exec(['sh', '-c', 'echo from-box > /workspace/kept.txt'])).exitCode, 0);
      await box.archive();
      const fs = await box.workspace();
      assert.equal(box.status, 'running', 'the workspace through the box is a use: restored');
      assert.equal(await fs.readFile('kept.txt', 'utf8'), 'from-box\n');
      assert.equal((await box.exec(['cat', '/workspace/kept.txt'])).stdout, 'from-box\n', 'mounted again');
    } finally {
      await box.remove();
      await m.workspaces.delete(ws.id);
    }
  });

  test('a large env is no obstacle: kept through archive and restore (the archive image holds it); a spec too large to keep makes the box not archivable, not uncreatable', async () => {
    const m = newManager();
    await m.start();
    const big = 'x'.repeat(100_000);
    const box = (await m.create({ image: IMAGE, env: { BIG: big } })) as LocalBox;
    try {
      await box.archive();
      assert.equal((await box.exec(['sh', '-c', 'printf %s "$BIG" | wc -c'])).stdout.trim(), String(big.length));
    } finally {
      await box.remove();
    }
    const long = (await m.create({ image: IMAGE, cmd: ['sh', '-c', `: ${'y'.repeat(70_000)}; while :; do sleep 1; done`] })) as LocalBox;
    try {
      await assert.rejects(long.archive(), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'no_spec');
      assert.equal((long as ManagedBox).archivable, false, 'asked once');
    } finally {
      await long.remove();
    }
  });

  test('a removal racing a restore leaves nothing: no container, no archive, the box gone', async () => {
    const m = newManager();
    await m.start();
    for (let round = 0; round < 3; round++) {
      const box = (await m.create({ image: IMAGE })) as LocalBox;
      await box.archive();
      // The exec's restore and the removal race; whichever wins, the other finds the box gone or removes it.
      const [used] = await Promise.allSettled([box.exec(['true']), m.remove(box.id)]);
      if (used.status === 'rejected') assert.ok(isSbxError(used.reason, 'not_found'), String(used.reason));
      await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));
      assert.deepEqual(await engine.list({ labels: managerSelector(m.config.name) }), [], 'no container left');
      assert.equal(await engine.images.exists(archiveImage(m.config.name, box.id)), false, 'no archive left');
    }
  });

  test('removing an archived box removes its archive; a restarted Manager finds an archived box archived', async () => {
    const name = `arch-restart-${process.pid}`;
    const first = newManager(name);
    await first.start();
    const { box, hash } = await boxWithFile(first);
    const gone = (await first.create({ image: IMAGE })) as LocalBox;
    await gone.archive();
    await gone.remove();
    assert.equal(await engine.images.exists(archiveImage(name, gone.id)), false, 'removed with its box');
    await assert.rejects(first.get(gone.id), (e) => isSbxError(e, 'not_found'));
    await box.archive();
    await first.close();

    const second = newManager(name);
    await second.start();
    const again = (await second.get(box.id)) as LocalBox;
    try {
      assert.equal(again.status, 'archived');
      assert.equal((await again.exec(hashCmd)).stdout, hash);
    } finally {
      await again.remove();
    }
  });

  test('the idle ladder: paused, then archived, then removed at the idle timeout; a use between restores it and restarts the clock', async () => {
    const clock = new ManualClock(Date.now());
    const m = new Manager({
      name: `arch-ladder-${process.pid}`,
      pools: [{ name: 'local', addr: testEnv.engineAddr }],
      dataDir,
      cleanupIntervalMs: 0,
      clock: clock.now,
      logger: pino({ level: 'silent' }),
    });
    managers.push(m);
    await m.start();
    await assert.rejects(
      m.create({ image: IMAGE, idlePauseMs: 5000, idleArchiveMs: 5000 }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'idlePauseMs',
    );
    await assert.rejects(
      m.create({ image: IMAGE, idleArchiveMs: 9000, idleTimeoutMs: 8000 }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'idleArchiveMs',
    );
    const box = (await m.create({ image: IMAGE, idlePauseMs: 1000, idleArchiveMs: 2000, idleTimeoutMs: 3000 })) as LocalBox;
    assert.equal((await box.info()).idleArchiveMs, 2000);
    await box.exec(['sh', '-c', 'echo kept > "$HOME/note"']);
    clock.advance(1000);
    await m.cleanup();
    assert.equal(box.status, 'paused');
    clock.advance(1000);
    await m.cleanup();
    assert.equal(box.status, 'archived');
    assert.equal(m.cleanupStats.archivedIdle, 1);
    assert.equal((await box.exec(['sh', '-c', 'cat "$HOME/note"'])).stdout, 'kept\n', 'restored by the use');
    clock.advance(2999);
    await m.cleanup();
    assert.equal(box.status, 'archived', 'archived again, counted from the use');
    clock.advance(1);
    await m.cleanup();
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));
    assert.equal(await engine.images.exists(archiveImage(m.config.name, box.id)), false, 'its archive went with it');
  });

  describe('a Manager SIGKILLed in the middle leaves the old box or the new one, never neither', () => {
    const child = fileURLToPath(new URL('../testing/crash-archive-child.ts', import.meta.url));
    for (const step of ['archive:stop', 'archive:commit', 'archive:remove', 'restore:create', 'restore:start']) {
      test(`killed after ${step}`, async () => {
        const name = `arch-crash-${step.replace(':', '-')}-${process.pid}`;
        const before = newManager(name);
        await before.start();
        const { box, hash } = await boxWithFile(before);
        if (step.startsWith('restore')) await box.archive();
        await before.close();

        const r = spawnSync(process.execPath, ['--import', 'tsx', child, name, dataDir, box.id, step], { encoding: 'utf8', timeout: 120_000 });
        assert.equal(r.signal, 'SIGKILL', `the child should have died after ${step}: ${r.stderr}`);

        const after = newManager(name);
        await after.start();
        const found = (await after.get(box.id)) as LocalBox;
        try {
          const containers = await engine.list({ labels: managerSelector(name) });
          const archived = await engine.images.exists(archiveImage(name, box.id));
          // One of the two, whole: an archive (no container), or a container (no archive left).
          if (found.status === 'archived') assert.deepEqual([containers.length, archived], [0, true], 'archived: its image, no container');
          else assert.deepEqual([containers.length, archived], [1, false], `${found.status}: one container, no archive`);
          await found.resume();
          assert.equal((await found.exec(hashCmd)).stdout, hash, 'the files are whole');
        } finally {
          await found.remove();
        }
        assert.deepEqual(await engine.list({ labels: managerSelector(name) }), []);
        assert.equal(await engine.images.exists(archiveImage(name, box.id)), false);
      });
    }
  });
});
