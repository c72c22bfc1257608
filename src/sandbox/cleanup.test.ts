/**
 * The cleanup loop and reconciliation, fast: an in-memory Runtime and a manual clock. The same
 * behaviours have real-engine tests in manager.test.ts and engine-restart.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { after, describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { ManualClock } from '../testing/clock.js';
import { holdRemoves } from '../testing/held-remove.js';
import { MemoryRuntime, holdOpen } from '../testing/memory-runtime.js';
import { recordToLabels } from './labels.js';
import { newBoxRecord } from './box-spec.js';
import { resolvePool } from './config.js';
import { Manager } from './manager.js';

const dataDir = mkdtempSync(join(tmpdir(), 'sbx-cleanup-'));
after(() => rmSync(dataDir, { recursive: true, force: true }));
const IMAGE = 'sbx-base:latest';
const MIN = 60_000;
let seq = 0;

function setup(rtOpts: ConstructorParameters<typeof MemoryRuntime>[0] = {}) {
  const clock = new ManualClock();
  const rt = new MemoryRuntime({ clock: clock.now, address: `mem-${++seq}`, ...rtOpts });
  const manager = new Manager({
    name: 'unit',
    dataDir,
    clock: clock.now,
    cleanupIntervalMs: 0,
    tokenSecret: 'a-test-secret-of-16+',
    pools: [{ name: 'local', runtime: rt, idleTimeoutMs: 10 * MIN }],
    logger: pino({ level: 'silent' }),
  });
  return { clock, rt, manager };
}

describe('cleanup loop (in-memory runtime, manual clock)', () => {
  test('a session box is removed after its idle timeout, not a millisecond before', async () => {
    const { clock, rt, manager } = setup();
    await manager.start();
    const box = await manager.create({ image: IMAGE });
    clock.advance(10 * MIN - 1);
    await manager.cleanup();
    assert.equal((await manager.list()).length, 1);
    clock.advance(1);
    await manager.cleanup();
    assert.equal((await manager.list()).length, 0);
    assert.equal(manager.cleanupStats.removedIdle, 1);
    assert.deepEqual(await rt.list(), []);
    await assert.rejects(manager.get(box.id), (e) => isSbxError(e, 'not_found'));
    await manager.close();
  });

  test('max lifetime is a hard cap, even with an exec in flight', async () => {
    const { clock, rt, manager } = setup({ onExec: holdOpen });
    await manager.start();
    const box = await manager.create({ image: IMAGE, maxLifetimeMs: 30 * MIN, idleTimeoutMs: 0 });
    const running = box.exec(['sleep', 'forever']);
    await new Promise((r) => setImmediate(r));
    assert.equal(rt.inFlightExecs(), 1);
    clock.advance(29 * MIN);
    await manager.cleanup();
    assert.equal((await manager.list()).length, 1, 'kept before the cap');
    clock.advance(1 * MIN);
    await manager.cleanup();
    assert.equal(manager.cleanupStats.removedLifetime, 1);
    assert.equal((await running).exitCode, 137, 'the exec died with its box');
    await manager.close();
  });

  test('an exec in flight is activity: the box is not idle however long it runs', async () => {
    const { clock, rt, manager } = setup({ onExec: holdOpen });
    await manager.start();
    const box = await manager.create({ image: IMAGE });
    const running = box.exec(['long']);
    await new Promise((r) => setImmediate(r));
    clock.advance(60 * MIN);
    await manager.cleanup();
    assert.equal((await manager.list()).length, 1);
    rt.execs()[0]!.exit(0);
    await running;
    clock.advance(10 * MIN);
    await manager.cleanup();
    assert.equal((await manager.list()).length, 0, 'idle counts from the end of the exec');
    await manager.close();
  });

  test('a container removed behind sbx is forgotten on the next pass (vanished)', async () => {
    const { clock, rt, manager } = setup();
    // Not started: no event stream, so only the pass can notice.
    const box = await manager.create({ image: IMAGE });
    const kept = await manager.create({ image: IMAGE });
    rt.vanish(box.containerId);
    await manager.cleanup();
    assert.equal((await manager.list()).length, 2, 'a list taken in the same millisecond as the register proves nothing');
    clock.advance(1);
    await manager.cleanup();
    assert.deepEqual(
      (await manager.list()).map((b) => b.id),
      [kept.id],
    );
    assert.equal(manager.cleanupStats.vanished, 1);
    await manager.close();
  });

  test('a pool unreachable at start is reported, then adopted by a later pass', async () => {
    const { rt, manager, clock } = setup();
    const record = newBoxRecord({
      manager: 'unit',
      id: 'old-1',
      owner: 'o',
      pool: resolvePool({ name: 'local' }),
      opts: { image: IMAGE },
      now: clock.now(),
      tokenNonce: 'n',
    });
    rt.injectContainer({ labels: recordToLabels(record), status: 'running', running: true });
    rt.setReachable(false);
    await manager.start();
    assert.equal((await manager.pools())[0]?.connected, false);
    assert.equal((await manager.list()).length, 0);
    await assert.rejects(manager.create({ image: IMAGE }), (e) => isSbxError(e, 'runtime_unavailable'));
    rt.setReachable(true);
    await manager.cleanup();
    assert.equal((await manager.pools())[0]?.connected, true);
    const box = await manager.get('old-1');
    assert.equal(box.owner, 'o');
    assert.equal(manager.cleanupStats.adopted, 0, 'a first recovery is not an adoption');
    await manager.close();
  });

  test('a container created but never started by a dead Manager is swept; one this Manager is creating is not', async () => {
    const { rt, manager, clock } = setup({ latencyMs: 5 });
    await manager.start();
    const record = newBoxRecord({
      manager: 'unit',
      id: 'half',
      owner: 'o',
      pool: resolvePool({ name: 'local' }),
      opts: { image: IMAGE },
      now: clock.now(),
      tokenNonce: 'n',
    });
    rt.injectContainer({ labels: recordToLabels(record), status: 'created', running: false });
    const creating = manager.create({ image: IMAGE, id: 'mine' });
    await manager.cleanup();
    assert.equal(manager.cleanupStats.swept, 1);
    const box = await creating;
    assert.equal((await manager.get('mine')).id, box.id);
    assert.deepEqual(
      (await rt.list()).map((c) => c.labels['sbx.id']),
      ['mine'],
    );
    await manager.close();
  });

  test('after an engine restart the box status follows the engine, and the Manager starts the restartable boxes again', async () => {
    const { clock, rt, manager } = setup();
    await manager.start();
    const session = await manager.create({ image: IMAGE });
    const oneshot = await manager.create({ image: IMAGE, policy: 'oneshot' });
    clock.advance(1000); // a later start reads as one
    const firstStart = (await rt.inspect(session.containerId)).startedAt;
    rt.simulateEngineRestart();
    // The engine restarts no box; the pool watch sees its stream break, finds the engine back and
    // starts the session box again (never the oneshot one). Waited for, not timed.
    const restarted = async () => {
      const c = await rt.inspect(session.containerId);
      return c.running && c.startedAt !== firstStart;
    };
    for (let i = 0; i < 400 && !(await restarted()); i++) await new Promise((r) => setTimeout(r, 25));
    await manager.cleanup();
    assert.equal(session.status, 'running');
    assert.equal(oneshot.status, 'stopped');
    assert.equal((await session.info()).status, 'running');
    await manager.close();
  });

  test('a box the cleanup loop is removing reads as gone: get, info, heartbeat and list', async () => {
    const { clock, rt, manager } = setup();
    await manager.start();
    const box = await manager.create({ image: IMAGE, id: 'going' });
    const kept = await manager.create({ image: IMAGE, id: 'kept', idleTimeoutMs: 0 });
    const held = holdRemoves(rt);
    clock.advance(10 * MIN);
    const pass = manager.cleanup();
    await held.engineDropped;
    assert.deepEqual(
      (await rt.list()).map((c) => c.labels['sbx.id']),
      ['kept'],
    );
    const gone = (e: unknown) => isSbxError(e, 'not_found');
    await assert.rejects(manager.get(box.id), gone);
    await assert.rejects(manager.info(box.id), gone);
    await assert.rejects(manager.heartbeat(box.id, { active: true }), gone);
    assert.deepEqual(
      (await manager.list()).map((b) => b.id),
      [kept.id],
    );
    held.release();
    await pass;
    assert.equal(manager.cleanupStats.removedIdle, 1);
    await assert.rejects(manager.get(box.id), gone);
    await manager.close();
  });

  test('create and getOrCreate of an id whose box is being removed wait for the removal and make a new box', async () => {
    const { rt, manager } = setup();
    await manager.start();
    const a = await manager.create({ image: IMAGE, id: 'a' });
    const b = await manager.create({ image: IMAGE, id: 'b' });
    const held = holdRemoves(rt);
    const removals = Promise.all([a.remove(), b.remove()]);
    await held.engineDropped;
    const created = manager.create({ image: IMAGE, id: 'a' });
    const got = manager.getOrCreate({ image: IMAGE, id: 'b' });
    held.release();
    await removals;
    const [newA, newB] = await Promise.all([created, got]);
    assert.notEqual(newA.containerId, a.containerId);
    assert.notEqual(newB.containerId, b.containerId, 'getOrCreate did not hand back the box being removed');
    assert.deepEqual((await rt.list()).map((c) => c.id).sort(), [newA.containerId, newB.containerId].sort());
    await manager.close();
  });

  test('the loop runs one pass at a time however often it is asked', async () => {
    const { manager } = setup({ latencyMs: 5 });
    await manager.start();
    const before = manager.cleanupStats.ticks;
    await Promise.all([manager.cleanup(), manager.cleanup(), manager.cleanup()]);
    assert.equal(manager.cleanupStats.ticks - before, 1);
    await manager.close();
  });
});
