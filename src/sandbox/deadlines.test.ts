/**
 * Deadlines are exact: the Manager acts on a box's max lifetime, idle timeout and idle ladder at
 * the deadline, not at the next cleanup pass. Real engine, real clock, and a cleanup interval of
 * an hour, so no pass runs during a test (`cleanupStats.ticks` stays 0): whatever happens is the
 * deadline timers'. The tests wait for what they prove (the box gone, the box paused), never a
 * fixed time, and assert only that nothing happens before its deadline; the lag after it is
 * reported as a diagnostic.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { testEnv } from '../testing/env.js';
import { MemoryRuntime } from '../testing/memory-runtime.js';
import { waitFor } from '../testing/wait.js';
import type { LocalBox } from './box.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';

const IMAGE = testEnv.baseImage;
const HOUR = 3_600_000;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-deadlines-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const name = `deadlines-${process.pid}`;
let manager: Manager;

before(async () => {
  manager = new Manager({
    name,
    dataDir,
    // No pass during the tests: only the deadline timers can act.
    cleanupIntervalMs: HOUR,
    pools: [{ name: 'local', addr: testEnv.engineAddr, idleTimeoutMs: 0 }],
    logger: pino({ level: 'silent' }),
  });
  await manager.start();
});
after(async () => {
  await manager.close();
  const left = await engine.list({ labels: managerSelector(name) });
  await Promise.all(left.map((c) => engine.remove(c.id, { force: true })));
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.equal(manager.cleanupStats.ticks, 0, 'no cleanup pass ran: the timers did it all');
});

/** Polls often enough to measure the lag to a few milliseconds; a hang is the only failure. */
const POLL = { intervalMs: 5 };

/**
 * Waits until the box is gone: the time its removal was seen begun (from then on it reads as
 * gone), after waiting for the engine to drop its container too.
 */
async function removal(box: LocalBox, what: string): Promise<number> {
  const at = await waitFor(async () => (!(await manager.list()).some((b) => b.id === box.id) ? Date.now() : false), { ...POLL, what });
  await assert.rejects(manager.get(box.id), (e) => isSbxError(e, 'not_found'));
  await waitFor(
    () =>
      engine.inspect(box.containerId).then(
        () => false,
        (e: unknown) => isSbxError(e, 'not_found'),
      ),
    { what: `${what}: its container` },
  );
  return at;
}

/** Waits until the engine says the box is paused; the time it was seen paused. */
async function paused(box: LocalBox, what: string): Promise<number> {
  return waitFor(async () => ((await engine.inspect(box.containerId)).status === 'paused' ? Date.now() : false), { ...POLL, what });
}

function lag(t: TestContext, what: string, deadline: number, seen: number): void {
  assert.ok(seen >= deadline, `${what}: acted ${deadline - seen} ms before its deadline`);
  t.diagnostic(`${what}: ${seen - deadline} ms after the deadline`);
}

describe('deadlines are acted on at the deadline, not at the next pass', () => {
  test('a box is removed at the end of its max lifetime', async (t) => {
    const box = await manager.create({ image: IMAGE, maxLifetimeMs: 1_500 });
    const deadline = Date.parse(box.createdAt) + 1_500;
    lag(t, 'max lifetime → removed', deadline, await removal(box, 'the box to be removed at the end of its max lifetime'));
    assert.equal(manager.cleanupStats.removedLifetime, 1);
  });

  test('idle timeout: an exec in flight defers it until the exec ends, and each use pushes it back', async (t) => {
    const box = await manager.create({ image: IMAGE, idleTimeoutMs: 1_000 });
    try {
      // In flight for twice the idle timeout: the box is not idle meanwhile.
      const long = await box.exec(['sleep', '2']);
      assert.equal(long.exitCode, 0, 'the exec ran to its end: the box was not removed under it');
      const longEnd = Date.parse((await box.info()).lastActive);
      assert.equal((await box.exec(['true'])).exitCode, 0);
      // A read, not a use: the deadline is the last use's end plus the timeout.
      const lastUse = Date.parse((await box.info()).lastActive);
      assert.ok(lastUse >= longEnd);
      lag(t, 'idle timeout → removed', lastUse + 1_000, await removal(box, 'the box to be removed once idle for its timeout'));
      assert.equal(manager.cleanupStats.removedIdle, 1);
    } finally {
      await box.remove().catch(() => undefined);
    }
  });

  test('a lifetime renewed to a sooner deadline ends at the new one', async (t) => {
    const box = await manager.create({ image: IMAGE, maxLifetimeMs: HOUR });
    try {
      const renewedAt = Date.now();
      await box.renewLifetime(1_000);
      const deadline = Date.parse(box.createdAt) + box.maxLifetimeMs;
      assert.ok(deadline >= renewedAt + 1_000);
      lag(t, 'renewed sooner → removed', deadline, await removal(box, 'the box to be removed at its renewed deadline'));
    } finally {
      await box.remove().catch(() => undefined);
    }
  });

  test('a lifetime renewed to a later deadline does not end at the old one', async (t) => {
    const renewed = await manager.create({ image: IMAGE, maxLifetimeMs: 1_000 });
    try {
      await renewed.renewLifetime(HOUR);
      const oldDeadline = Date.parse(renewed.createdAt) + 1_000;
      // A witness whose deadline comes after the old one: once it is gone, the old deadline has passed.
      const witness = await manager.create({ image: IMAGE, maxLifetimeMs: 1_500 });
      const witnessGone = await removal(witness, 'the witness box to reach its deadline');
      assert.ok(witnessGone > oldDeadline);
      lag(t, 'witness max lifetime → removed', Date.parse(witness.createdAt) + 1_500, witnessGone);
      assert.equal((await manager.get(renewed.id)).id, renewed.id, 'still there past its old deadline');
      assert.equal((await engine.inspect(renewed.containerId)).status, 'running');
    } finally {
      await renewed.remove().catch(() => undefined);
    }
  });

  test("maxLifetimeAction 'pause' pauses the box at its deadline and ends its lifetime", async (t) => {
    const box = await manager.create({ image: IMAGE, maxLifetimeMs: 1_500, maxLifetimeAction: 'pause' });
    try {
      const deadline = Date.parse(box.createdAt) + 1_500;
      lag(t, "max lifetime, action 'pause' → paused", deadline, await paused(box, 'the box to be paused at the end of its lifetime'));
      await waitFor(() => manager.cleanupStats.pausedLifetime === 1, { what: 'the pause to be counted' });
      assert.equal(box.maxLifetimeMs, 0, 'its lifetime is over: nothing is due any more');
    } finally {
      await box.remove().catch(() => undefined);
    }
  });

  test('the idle ladder pauses a box idle for idlePauseMs', async (t) => {
    const box = await manager.create({ image: IMAGE, idlePauseMs: 1_000, idleTimeoutMs: HOUR });
    try {
      const deadline = Date.parse((await box.info()).lastActive) + 1_000;
      lag(t, 'idlePauseMs → paused', deadline, await paused(box, 'the idle ladder to pause the box'));
      await waitFor(() => manager.cleanupStats.pausedIdle === 1, { what: 'the pause to be counted' });
      // A use wakes it; its next deadline is armed again from that use.
      assert.equal((await box.exec(['true'])).exitCode, 0);
      assert.equal((await engine.inspect(box.containerId)).status, 'running');
      const again = await paused(box, 'the idle ladder to pause the box again after the use');
      assert.ok(again >= Date.parse((await box.info()).lastActive) + 1_000);
    } finally {
      await box.remove().catch(() => undefined);
    }
  });
});

describe('deadline timers (in-memory runtime, real clock)', () => {
  test('an action that fails is left to the next pass, not retried by its timer in a loop', async () => {
    const rt = new MemoryRuntime({ address: `mem-deadlines-${process.pid}` });
    const m = new Manager({
      name: `deadlines-mem-${process.pid}`,
      dataDir,
      cleanupIntervalMs: HOUR,
      pools: [{ name: 'local', runtime: rt, idleTimeoutMs: 0 }],
      logger: pino({ level: 'silent' }),
    });
    try {
      await m.start();
      const failing = await m.create({ image: IMAGE, maxLifetimeMs: 50 });
      const remove = rt.remove.bind(rt);
      let attempts = 0;
      rt.remove = async (id, opts) => {
        if (id !== failing.containerId) return remove(id, opts);
        attempts++;
        throw new Error('the engine refuses');
      };
      // A witness due after the failing box: once it is gone, the failing box's deadline and its
      // one attempt are behind us.
      const witness = await m.create({ image: IMAGE, maxLifetimeMs: 300 });
      await waitFor(async () => !(await m.list()).some((b) => b.id === witness.id), { what: 'the witness to be removed at its deadline' });
      assert.equal(attempts, 1, 'one attempt at the deadline, no loop');
      assert.equal(m.cleanupStats.errors, 1);
      assert.equal((await m.get(failing.id)).id, failing.id, 'a failed removal leaves the box registered');
      await m.cleanup();
      assert.ok(attempts >= 2, 'the pass retries it');
      rt.remove = remove;
      await m.cleanup();
      await assert.rejects(m.get(failing.id), (e) => isSbxError(e, 'not_found'));
      // The pass's removal, or the one its timer began meanwhile (the pass arms every box again).
      await waitFor(() => m.cleanupStats.removedLifetime === 2, { what: 'the removal to be counted' });
    } finally {
      await m.close();
    }
  });
});
