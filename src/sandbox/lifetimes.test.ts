/**
 * box.renewLifetime: the new deadline, its bounds, and that it survives a restart. Fast with an
 * in-memory Runtime and a manual clock; the last test runs the real cleanup loop on the engine.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { after, describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { ManualClock } from '../testing/clock.js';
import { testEnv } from '../testing/env.js';
import { MemoryRuntime } from '../testing/memory-runtime.js';
import { waitFor } from '../testing/wait.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';

const dataDir = mkdtempSync(join(tmpdir(), 'sbx-lifetimes-'));
after(() => rmSync(dataDir, { recursive: true, force: true }));
const IMAGE = testEnv.baseImage;
const MIN = 60_000;
let seq = 0;

function setup(clock = new ManualClock(), rt = new MemoryRuntime({ clock: clock.now, address: `mem-life-${++seq}` }), name = `life-${seq}`) {
  const manager = new Manager({
    name,
    dataDir,
    clock: clock.now,
    cleanupIntervalMs: 0,
    tokenSecret: 'a-test-secret-of-16+',
    pools: [{ name: 'local', runtime: rt, idleTimeoutMs: 0 }],
    logger: pino({ level: 'silent' }),
  });
  return { clock, rt, manager, name };
}

describe('box.renewLifetime (in-memory runtime, manual clock)', () => {
  test('the deadline moves to lifetimeMs from now: later than the old one', async () => {
    const { clock, manager } = setup();
    await manager.start();
    const box = await manager.create({ image: IMAGE, maxLifetimeMs: 5 * MIN });
    clock.advance(4 * MIN);
    await box.renewLifetime(10 * MIN);
    assert.equal((await box.info()).maxLifetimeMs, 14 * MIN);
    clock.advance(MIN); // the old deadline
    await manager.cleanup();
    assert.equal((await manager.list()).length, 1, 'not removed at the old deadline');
    clock.advance(9 * MIN - 1);
    await manager.cleanup();
    assert.equal((await manager.list()).length, 1);
    clock.advance(1);
    await manager.cleanup();
    assert.equal((await manager.list()).length, 0, 'removed at the new deadline');
    assert.equal(manager.cleanupStats.removedLifetime, 1);
    await manager.close();
  });

  test('and sooner than the old one', async () => {
    const { clock, manager } = setup();
    await manager.start();
    const box = await manager.create({ image: IMAGE, maxLifetimeMs: 60 * MIN });
    clock.advance(MIN);
    await box.renewLifetime(MIN);
    clock.advance(MIN);
    await manager.cleanup();
    assert.equal((await manager.list()).length, 0);
    await manager.close();
  });

  test('a box with no max lifetime gets one', async () => {
    const { clock, manager } = setup();
    await manager.start();
    const box = await manager.create({ image: IMAGE, maxLifetimeMs: 0 });
    clock.advance(MIN);
    await box.renewLifetime(2 * MIN);
    assert.equal((await box.info()).maxLifetimeMs, 3 * MIN);
    await box.remove();
    await manager.close();
  });

  test('bounds: whole milliseconds, 1 ms to a year; a persistent box is a conflict', async () => {
    const { manager } = setup();
    await manager.start();
    const box = await manager.create({ image: IMAGE });
    for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 366 * 86_400_000, '60000' as unknown as number]) {
      await assert.rejects(box.renewLifetime(bad), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'lifetimeMs', String(bad));
    }
    const kept = await manager.create({ image: IMAGE, policy: 'persistent' });
    await assert.rejects(kept.renewLifetime(MIN), (e) => isSbxError(e, 'conflict'));
    await box.remove();
    await kept.remove();
    await manager.close();
  });

  test('a restarted Manager keeps the renewed deadline (data dir), and a removed box leaves no entry', async () => {
    const first = setup();
    await first.manager.start();
    const box = await first.manager.create({ image: IMAGE, maxLifetimeMs: 5 * MIN });
    await box.renewLifetime(30 * MIN);
    await first.manager.close();

    const second = setup(first.clock, first.rt, first.name);
    await second.manager.start();
    const again = await second.manager.get(box.id);
    assert.equal((await again.info()).maxLifetimeMs, 30 * MIN);
    first.clock.advance(10 * MIN);
    await second.manager.cleanup();
    assert.equal((await second.manager.list()).length, 1, 'the label says 5 min; the data dir says 30');
    await again.remove();
    const file = JSON.parse(readFileSync(join(dataDir, 'lifetimes', `${first.name}.json`), 'utf8')) as Record<string, number>;
    assert.deepEqual(file, {});
    await second.manager.close();
  });
});

describe('box.renewLifetime (real engine, real cleanup loop)', () => {
  test('the cleanup loop removes the box at the new deadline, not the old', async () => {
    const name = `life-engine-${process.pid}`;
    // A manual clock: the deadlines are the ones set, however long the engine takes to create.
    const clock = new ManualClock(Date.now());
    const manager = new Manager({
      name,
      dataDir,
      clock: clock.now,
      cleanupIntervalMs: 100,
      pools: [{ name: 'local', addr: testEnv.engineAddr }],
      logger: pino({ level: 'silent' }),
    });
    const engine = new DockerRuntime(testEnv.engineAddr);
    const containers = async () => (await engine.list({ labels: managerSelector(name) })).length;
    /** A whole pass at the current time: the second starts after any pass in flight ended. */
    const wholePass = async () => {
      await manager.cleanup();
      await manager.cleanup();
    };
    try {
      await manager.start();
      const box = await manager.create({ image: IMAGE, maxLifetimeMs: MIN, idleTimeoutMs: 0 });
      clock.advance(MIN / 2);
      await box.renewLifetime(1.5 * MIN);
      clock.advance(MIN / 2); // the old deadline
      await wholePass();
      assert.equal(await containers(), 1, 'still there at the old deadline');
      clock.advance(MIN - 1);
      await wholePass();
      assert.equal(await containers(), 1, 'still there a millisecond before the new deadline');
      clock.advance(1);
      await waitFor(() => manager.cleanupStats.removedLifetime === 1, { what: 'the cleanup loop to remove the box at its new deadline' });
      assert.equal(await containers(), 0);
    } finally {
      await manager.close();
      const left = await engine.list({ labels: managerSelector(name) });
      await Promise.all(left.map((c) => engine.remove(c.id, { force: true })));
      await engine.close();
    }
  });
});
