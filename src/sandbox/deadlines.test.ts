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
import { untilEngineSays } from '../testing/freezer.js';
import { MemoryRuntime } from '../testing/memory-runtime.js';
import { waitFor } from '../testing/wait.js';
import type { LocalBox } from './box.js';
import { managerSelector } from './labels.js';
import { DEADLINE_RETRY_MS } from './cleanup.js';
import { Manager } from './manager.js';
import { CLEANUP_PARALLELISM } from './recovery.js';

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
    // The box leaves the list (and the engine) before the removal returns and the counter moves.
    await waitFor(() => manager.cleanupStats.removedLifetime === 1, { what: 'the lifetime removal to be counted' });
  });

  test('idle timeout: an exec in flight defers it until the exec ends, and each use pushes it back', async (t) => {
    const box = await manager.create({ image: IMAGE, idleTimeoutMs: 1_000 });
    try {
      // Held in flight until the test lets it go, so the box is never idle between the uses below,
      // however long an exec takes to start or end on a loaded machine (busy from this call on).
      const held = box.exec(['sh', '-c', 'until [ -e /tmp/go ]; do sleep 0.05; done']);
      // In flight for twice the idle timeout: the box is not idle meanwhile.
      const long = await box.exec(['sleep', '2']);
      assert.equal(long.exitCode, 0, 'the exec ran to its end: the box was not removed under it');
      const longEnd = Date.parse((await box.info()).lastActive);
      // A use after the long one, which lets the held exec end after it.
      assert.equal((await box.exec(['touch', '/tmp/go'])).exitCode, 0);
      assert.equal((await held).exitCode, 0);
      // A read, not a use: the deadline is the last use's end plus the timeout.
      const lastUse = Date.parse((await box.info()).lastActive);
      assert.ok(lastUse >= longEnd);
      lag(t, 'idle timeout → removed', lastUse + 1_000, await removal(box, 'the box to be removed once idle for its timeout'));
      // Counted once the removal has returned, which may come after the box left the list.
      await waitFor(() => manager.cleanupStats.removedIdle === 1, { what: 'the idle removal to be counted' });
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
    // The renewal must land before the old deadline, however long the create took on a loaded
    // engine (createdAt is its start): one that came after it proves nothing, so the test tries
    // again with a lifetime twice as long instead of assuming the create and the renewal fit in 1 s.
    let renewed: LocalBox | undefined;
    let oldLifetimeMs = 1_000;
    try {
      for (;;) {
        renewed = await manager.create({ image: IMAGE, maxLifetimeMs: oldLifetimeMs });
        await renewed.renewLifetime(HOUR);
        // Timers never fire early (1 ms for Date.now() and the timer clock rounding apart).
        if (Date.now() < Date.parse(renewed.createdAt) + oldLifetimeMs - 1) break;
        t.diagnostic(`the renewal landed after the old ${oldLifetimeMs} ms lifetime: again with a longer one`);
        await renewed.remove().catch(() => undefined);
        assert.ok(oldLifetimeMs < 60_000, 'a create and a renewal within a minute');
        oldLifetimeMs *= 2;
      }
      const oldDeadline = Date.parse(renewed.createdAt) + oldLifetimeMs;
      // A witness whose deadline comes after the old one: once it is gone, the old deadline has passed.
      const witness = await manager.create({ image: IMAGE, maxLifetimeMs: oldLifetimeMs + 500 });
      const witnessGone = await removal(witness, 'the witness box to reach its deadline');
      assert.ok(witnessGone > oldDeadline);
      lag(t, 'witness max lifetime → removed', Date.parse(witness.createdAt) + oldLifetimeMs + 500, witnessGone);
      assert.equal((await manager.get(renewed.id)).id, renewed.id, 'still there past its old deadline');
      assert.equal((await engine.inspect(renewed.containerId)).status, 'running');
    } finally {
      await renewed?.remove().catch(() => undefined);
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
      await untilEngineSays(engine, box.containerId, 'running');
      const again = await paused(box, 'the idle ladder to pause the box again after the use');
      assert.ok(again >= Date.parse((await box.info()).lastActive) + 1_000);
    } finally {
      await box.remove().catch(() => undefined);
    }
  });
});

describe('deadline timers (in-memory runtime, real clock)', () => {
  function memoryManager(tag: string, pools: Array<{ name: string; runtime: MemoryRuntime }>): Manager {
    return new Manager({
      name: `deadlines-${tag}-${process.pid}`,
      dataDir,
      cleanupIntervalMs: HOUR,
      pools: pools.map((p) => ({ ...p, idleTimeoutMs: 0 })),
      logger: pino({ level: 'silent' }),
    });
  }

  test('a removal that fails is retried by its timer after a back-off, not in a loop, without a pass', async (t) => {
    const rt = new MemoryRuntime({ address: `mem-deadlines-${process.pid}` });
    const m = memoryManager('retry', [{ name: 'local', runtime: rt }]);
    try {
      await m.start();
      const failing = await m.create({ image: IMAGE, maxLifetimeMs: 50 });
      const remove = rt.remove.bind(rt);
      const attempts: number[] = [];
      rt.remove = async (id, opts) => {
        if (id !== failing.containerId) return remove(id, opts);
        attempts.push(Date.now());
        if (attempts.length <= 2) throw new Error('the engine refuses');
        return remove(id, opts);
      };
      await waitFor(async () => !(await m.list()).some((b) => b.id === failing.id), { what: 'the box to be removed by its timer after two failures' });
      await assert.rejects(m.get(failing.id), (e) => isSbxError(e, 'not_found'));
      assert.equal(attempts.length, 3, 'two failures, then the removal that worked');
      const [first, second, third] = attempts as [number, number, number];
      // Timers never fire early; 1 ms for Date.now() and the timer clock rounding apart.
      assert.ok(second - first >= DEADLINE_RETRY_MS - 1, `retried ${second - first} ms after the first failure`);
      assert.ok(third - second >= 2 * DEADLINE_RETRY_MS - 1, `retried ${third - second} ms after the second failure: the back-off doubles`);
      t.diagnostic(`retries ${second - first} ms and ${third - second} ms after each failure`);
      assert.equal(m.cleanupStats.errors, 2);
      await waitFor(() => m.cleanupStats.removedLifetime === 1, { what: 'the removal to be counted' });
      assert.equal(m.cleanupStats.ticks, 0, 'no pass ran: the timer retried it');
    } finally {
      await m.close();
    }
  });

  test('a box the pass acted on is armed again as its own action settles, not after the whole pass', async () => {
    const rt = new MemoryRuntime({ address: `mem-pass-${process.pid}` });
    // A clock the test moves on: the pass finds both boxes due for the idle ladder's pause, long
    // before their timers (armed on the real clock) would fire.
    let offsetMs = 0;
    const m = new Manager({
      name: `deadlines-pass-${process.pid}`,
      dataDir,
      cleanupIntervalMs: HOUR,
      clock: () => Date.now() + offsetMs,
      pools: [{ name: 'local', runtime: rt, idleTimeoutMs: 0 }],
      logger: pino({ level: 'silent' }),
    });
    const pause = rt.pause.bind(rt);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let heldId: string | undefined;
    let held = false;
    rt.pause = async (id) => {
      if (id === heldId) {
        held = true;
        await gate;
      }
      return pause(id);
    };
    try {
      await m.start();
      const ladder = { image: IMAGE, idlePauseMs: 10 * 60_000, idleTimeoutMs: 10 * 60_000 + 200 };
      const quick = await m.create(ladder);
      const slow = await m.create(ladder);
      heldId = slow.containerId;
      offsetMs = 10 * 60_000 + 1;
      const pass = m.cleanup();
      await waitFor(() => held && m.cleanupStats.pausedIdle === 1, { what: 'the pass to pause one box and hold the other' });
      // The quick box's next deadline (its idle timeout, 200 ms after its pause's) is its timer's
      // while the pass still waits for the slow box.
      await waitFor(async () => !(await m.list()).some((b) => b.id === quick.id), { what: 'the paused box to be removed by its timer during the pass' });
      assert.equal(m.cleanupStats.pausedIdle, 1, 'the slow box is still held');
      await waitFor(() => m.cleanupStats.removedIdle === 1, { what: 'the idle removal to be counted' });
      open();
      await pass;
      assert.equal(m.cleanupStats.pausedIdle, 2);
      assert.equal(m.cleanupStats.ticks, 1);
    } finally {
      open();
      await m.close();
    }
  });

  test('deadline actions due at different moments share one limit per pool', async () => {
    const rt = new MemoryRuntime({ address: `mem-limit-${process.pid}` });
    const other = new MemoryRuntime({ address: `mem-limit-other-${process.pid}` });
    const m = memoryManager('limit', [
      { name: 'local', runtime: rt },
      { name: 'other', runtime: other },
    ]);
    const remove = rt.remove.bind(rt);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const ours = new Set<string>();
    let inFlight = 0;
    let maxInFlight = 0;
    rt.remove = async (id, opts) => {
      if (!ours.has(id)) return remove(id, opts);
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      try {
        await gate;
        return await remove(id, opts);
      } finally {
        inFlight--;
      }
    };
    try {
      await m.start();
      // Deadlines 100 ms apart: their timers fire at different moments, each its own batch.
      const count = 12;
      const boxes: LocalBox[] = [];
      for (let i = 0; i < count; i++) {
        const box = await m.create({ image: IMAGE, maxLifetimeMs: 100 + i * 100 });
        ours.add(box.containerId);
        boxes.push(box);
      }
      const last = boxes[count - 1]!;
      // A witness on another pool (its own limit), due after all of them: once it is gone, every
      // timer before it has fired and its batch asked for its slots.
      const witness = await m.create({ pool: 'other', image: IMAGE, maxLifetimeMs: last.maxLifetimeMs });
      assert.ok(Date.parse(witness.createdAt) >= Date.parse(last.createdAt));
      await waitFor(async () => !(await m.list()).some((b) => b.id === witness.id), { what: 'the witness to be removed at its deadline' });
      await waitFor(() => inFlight >= CLEANUP_PARALLELISM, { what: 'the first removals to reach the engine' });
      assert.equal(maxInFlight, CLEANUP_PARALLELISM, 'the later batches wait for a slot');
      open();
      await waitFor(async () => (await m.list({ pool: 'local' })).length === 0, { what: 'every box to be removed' });
      await waitFor(() => m.cleanupStats.removedLifetime === count + 1, { what: 'the removals to be counted' });
      assert.equal(maxInFlight, CLEANUP_PARALLELISM);
      assert.equal(m.cleanupStats.ticks, 0);
    } finally {
      open();
      await m.close();
    }
  });
});
