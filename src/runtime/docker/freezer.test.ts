/**
 * setPaused against a model of the engine's lagging paused flag (the real engine's race is in
 * freezer-race.test.ts): whatever the flag says, the call ends with containerd's state as asked
 * and the flag agreeing.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { setPaused, type FreezerEngine } from './freezer.js';

/**
 * Docker's bookkeeping as moby's daemon keeps it: a call is refused by the flag, else by
 * containerd's state, else done, setting both; containerd's event for it is queued and, when the
 * engine gets to it, sets the flag if the flag differs. Each read lets the engine take one event.
 */
class LaggingEngine implements FreezerEngine {
  frozen = false;
  flag = false;
  events: boolean[] = [];
  calls: string[] = [];

  async set(paused: boolean): Promise<void> {
    this.calls.push(paused ? 'pause' : 'unpause');
    if (this.flag === paused) throw new Error(paused ? 'Container c1 is already paused' : 'Container c1 is not paused');
    if (this.frozen === paused)
      throw new Error(
        `Cannot ${paused ? 'pause' : 'unpause'} container c1: ${paused ? 'cannot pause a paused container' : 'cannot resume a running process'}: unknown`,
      );
    this.frozen = paused;
    this.flag = paused;
    this.events.push(paused);
  }

  async read(): Promise<{ paused: boolean; running: boolean }> {
    this.deliver(1);
    return { paused: this.flag, running: true };
  }

  /** The engine takes `n` of containerd's events. */
  deliver(n: number): void {
    for (const e of this.events.splice(0, n)) this.flag = e;
  }
}

describe('setPaused on an engine whose paused flag lags', () => {
  test('the flag says paused about a running container (pause, unpause, the late pause event): a pause still freezes it', async () => {
    const e = new LaggingEngine();
    await e.set(true);
    await e.set(false);
    e.deliver(1); // the pause's event, after the unpause
    assert.deepEqual([e.frozen, e.flag], [false, true], 'the stale state');
    await assert.rejects(e.set(true), /already paused/, 'the engine refuses a pause by its flag: taken at its word, the box would run on');
    await setPaused(e, true, 'container c1');
    assert.deepEqual([e.frozen, e.flag], [true, true]);
  });

  test('the flag says running about a frozen container (pause, unpause, pause, two late events): an unpause still thaws it', async () => {
    const e = new LaggingEngine();
    await e.set(true);
    await e.set(false);
    await e.set(true);
    e.deliver(2); // the first pause's event (no change) and the unpause's (the flag now says running)
    assert.deepEqual([e.frozen, e.flag], [true, false], 'the stale state');
    await assert.rejects(e.set(false), /is not paused/, 'the engine refuses an unpause by its flag: taken at its word, every exec would hang');
    await setPaused(e, false, 'container c1');
    assert.deepEqual([e.frozen, e.flag], [false, false]);
  });

  test('containerd already as asked while the flag lags: done in one call, returning once the flag agrees', async () => {
    const e = new LaggingEngine();
    await e.set(true);
    await e.set(false);
    e.deliver(1);
    e.calls.length = 0;
    await setPaused(e, false, 'container c1');
    assert.deepEqual(e.calls, ['unpause'], 'containerd answered: no probe needed');
    assert.deepEqual([e.frozen, e.flag], [false, false], 'and the flag has caught up, so the engine lets an exec in');
  });

  test('a truthful flag costs one call; a box already so is probed, then set again', async () => {
    const e = new LaggingEngine();
    await setPaused(e, true, 'container c1');
    assert.deepEqual(e.calls, ['pause']);
    e.deliver(9);
    e.calls.length = 0;
    // Paused already (by another client, say): the flag's refusal is checked with an unpause.
    await setPaused(e, true, 'container c1');
    assert.deepEqual(e.calls, ['pause', 'unpause', 'pause']);
    assert.deepEqual([e.frozen, e.flag], [true, true]);
  });

  test("a container that does not run is not paused: an unpause resolves, a pause gets the engine's refusal", async () => {
    const calls: string[] = [];
    const stopped: FreezerEngine = {
      set: async (p) => {
        calls.push(p ? 'pause' : 'unpause');
        throw new Error(p ? 'Container c1 is not running' : 'Container c1 is not paused');
      },
      read: async () => ({ paused: false, running: false }),
    };
    await setPaused(stopped, false, 'container c1');
    assert.deepEqual(calls, ['unpause'], 'no probe: nothing to thaw');
    await assert.rejects(setPaused(stopped, true, 'container c1'), /is not running/);
  });

  test("the engine's other refusals pass through unchanged", async () => {
    const gone: FreezerEngine = {
      set: async () => {
        throw new Error('Container c1 is not running');
      },
      read: async () => ({ paused: false, running: false }),
    };
    await assert.rejects(setPaused(gone, true, 'container c1'), /is not running/);
  });

  test('a state that keeps changing under it ends in a conflict, not a loop', async () => {
    const flipping: FreezerEngine = {
      set: async (p) => {
        throw new Error(p ? 'Container c1 is already paused' : 'Container c1 is not paused');
      },
      read: async () => ({ paused: false, running: true }),
    };
    await assert.rejects(setPaused(flipping, true, 'container c1'), (err) => isSbxError(err, 'conflict'));
  });
});
