import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decideCleanup, nextDue, normalizePolicy } from './policy.js';
import type { BoxActivity } from './policy.js';
import { labelsToRecord, recordToLabels } from './labels.js';
import type { BoxRecord } from './labels.js';

const MIN = 60_000;
const base: BoxActivity = {
  policy: 'session',
  now: 100 * MIN,
  createdAt: 0,
  lastActive: 100 * MIN,
  inFlight: 0,
  execsCompleted: 0,
  running: true,
  idleTimeoutMs: 10 * MIN,
  maxLifetimeMs: 0,
};
const at = (over: Partial<BoxActivity>) => decideCleanup({ ...base, ...over });

describe('lifecycle policy table', () => {
  test('session: kept while active, removed once idle past its timeout', () => {
    assert.deepEqual(at({ lastActive: 95 * MIN }), { action: 'keep' });
    assert.deepEqual(at({ lastActive: 90 * MIN }), { action: 'remove', reason: 'idle' });
  });

  test('an idle timeout of 0 means never idle', () => {
    assert.deepEqual(at({ lastActive: 0, idleTimeoutMs: 0 }), { action: 'keep' });
  });

  test('work in flight is never idle', () => {
    assert.deepEqual(at({ lastActive: 0, inFlight: 1 }), { action: 'keep' });
    assert.deepEqual(at({ policy: 'longrunning', lastActive: 0, inFlight: 2 }), { action: 'keep' });
  });

  test('max lifetime is a hard cap, even with work in flight', () => {
    assert.deepEqual(at({ maxLifetimeMs: 50 * MIN, inFlight: 1 }), { action: 'remove', reason: 'lifetime' });
    assert.deepEqual(at({ policy: 'longrunning', maxLifetimeMs: 50 * MIN }), { action: 'remove', reason: 'lifetime' });
  });

  test('longrunning: stopped when idle, kept when already stopped', () => {
    assert.deepEqual(at({ policy: 'longrunning', lastActive: 0 }), { action: 'stop', reason: 'idle' });
    assert.deepEqual(at({ policy: 'longrunning', lastActive: 0, running: false }), { action: 'keep' });
  });

  test('longrunning on a runtime that cannot start a stopped box again (Kubernetes): removed when idle', () => {
    assert.deepEqual(at({ policy: 'longrunning', lastActive: 0, restartable: false }), { action: 'remove', reason: 'idle' });
    assert.deepEqual(at({ policy: 'longrunning', lastActive: 0, running: false, restartable: false }), { action: 'remove', reason: 'idle' });
    assert.deepEqual(at({ policy: 'longrunning', lastActive: 95 * MIN, restartable: false }), { action: 'keep' });
  });

  test('the idle ladder: paused after idlePauseMs, then the idle timeout step as before', () => {
    const ladder = { idlePauseMs: 2 * MIN };
    assert.deepEqual(at({ ...ladder, lastActive: 99 * MIN }), { action: 'keep' }, 'not yet idle for the pause');
    assert.deepEqual(at({ ...ladder, lastActive: 97 * MIN }), { action: 'pause', reason: 'idle' });
    assert.deepEqual(at({ ...ladder, lastActive: 97 * MIN, paused: true }), { action: 'keep' }, 'paused already');
    assert.deepEqual(at({ ...ladder, lastActive: 97 * MIN, running: false }), { action: 'keep' }, 'a stopped box is not paused');
    assert.deepEqual(at({ ...ladder, lastActive: 97 * MIN, pausable: false }), { action: 'keep' }, 'a runtime without a freezer skips the step');
    assert.deepEqual(at({ ...ladder, lastActive: 97 * MIN, inFlight: 1 }), { action: 'keep' }, 'work in flight is never idle');
    assert.deepEqual(at({ ...ladder, lastActive: 90 * MIN, paused: true }), { action: 'remove', reason: 'idle' }, 'a paused session box still times out');
    assert.deepEqual(at({ ...ladder, policy: 'longrunning', lastActive: 90 * MIN, paused: true }), { action: 'stop', reason: 'idle' });
    assert.deepEqual(
      at({ ...ladder, policy: 'persistent', lastActive: 0 }),
      { action: 'pause', reason: 'idle' },
      'a pause loses nothing: persistent boxes too',
    );
    assert.deepEqual(at({ ...ladder, policy: 'persistent', lastActive: 0, paused: true, maxLifetimeMs: 1 }), { action: 'keep' });
    assert.deepEqual(at({ lastActive: 97 * MIN }), { action: 'keep' }, 'no pause step unless asked: idleTimeoutMs alone as before');
  });

  test('the idle ladder archives after idleArchiveMs (paused, stopped or running), skipped where the pool cannot, before the idle timeout', () => {
    const ladder = { idlePauseMs: 2 * MIN, idleArchiveMs: 5 * MIN };
    assert.deepEqual(at({ ...ladder, lastActive: 97 * MIN }), { action: 'pause', reason: 'idle' });
    assert.deepEqual(at({ ...ladder, lastActive: 95 * MIN, paused: true }), { action: 'archive', reason: 'idle' });
    assert.deepEqual(at({ ...ladder, lastActive: 95 * MIN, running: false }), { action: 'archive', reason: 'idle' });
    assert.deepEqual(at({ ...ladder, lastActive: 95 * MIN, archived: true, running: false }), { action: 'keep' }, 'archived already');
    assert.deepEqual(
      at({ ...ladder, lastActive: 95 * MIN, archivable: false }),
      { action: 'pause', reason: 'idle' },
      'no archive where the pool cannot: the pause still',
    );
    assert.deepEqual(at({ ...ladder, lastActive: 90 * MIN, archived: true, running: false }), { action: 'remove', reason: 'idle' }, 'then the idle timeout');
    assert.deepEqual(at({ ...ladder, policy: 'persistent', lastActive: 0, paused: true }), { action: 'archive', reason: 'idle' });
  });

  test('maxLifetimeAction pause: paused at the end of the lifetime, even with work in flight; removed where it cannot pause', () => {
    const end = { maxLifetimeMs: 50 * MIN, maxLifetimeAction: 'pause' as const };
    assert.deepEqual(at({ ...end }), { action: 'pause', reason: 'lifetime' });
    assert.deepEqual(at({ ...end, inFlight: 1 }), { action: 'pause', reason: 'lifetime' });
    assert.deepEqual(at({ ...end, paused: true }), { action: 'pause', reason: 'lifetime' }, 'its lifetime still has to be ended');
    assert.deepEqual(at({ ...end, pausable: false }), { action: 'remove', reason: 'lifetime' });
    assert.deepEqual(at({ ...end, maxLifetimeMs: 200 * MIN }), { action: 'keep' });
  });

  test('oneshot: removed after its first exec, idle rules before that', () => {
    assert.deepEqual(at({ policy: 'oneshot', execsCompleted: 1 }), { action: 'remove', reason: 'oneshot' });
    assert.deepEqual(at({ policy: 'oneshot', execsCompleted: 1, inFlight: 1 }), { action: 'keep' });
    assert.deepEqual(at({ policy: 'oneshot' }), { action: 'keep' });
    assert.deepEqual(at({ policy: 'oneshot', lastActive: 0 }), { action: 'remove', reason: 'idle' });
  });

  test('persistent: never touched', () => {
    assert.deepEqual(at({ policy: 'persistent', lastActive: 0, maxLifetimeMs: 1 }), { action: 'keep' });
  });

  test('an empty or unknown policy label means session, never immortal', () => {
    assert.equal(normalizePolicy(''), 'session');
    assert.equal(normalizePolicy(undefined), 'session');
    assert.equal(normalizePolicy('forever'), 'session');
    assert.equal(normalizePolicy('persistent'), 'persistent');
  });
});

describe('nextDue: when the table next acts on a box (the deadline timers arm with it)', () => {
  const due = (over: Partial<BoxActivity>) => nextDue({ ...base, ...over });

  test('the idle timeout: lastActive plus the timeout; now when it is past', () => {
    assert.equal(due({ lastActive: 95 * MIN }), 105 * MIN);
    assert.equal(due({ lastActive: 0 }), 100 * MIN, 'due already');
    assert.equal(due({ idleTimeoutMs: 0 }), undefined, 'no timeout: never');
  });

  test('work in flight defers every idle step; the max lifetime is due all the same', () => {
    assert.equal(due({ inFlight: 1, lastActive: 0 }), undefined);
    assert.equal(due({ inFlight: 1, maxLifetimeMs: 120 * MIN }), 120 * MIN);
  });

  test('the max lifetime, and the sooner of it and the idle timeout', () => {
    assert.equal(due({ idleTimeoutMs: 0, maxLifetimeMs: 130 * MIN }), 130 * MIN);
    assert.equal(due({ maxLifetimeMs: 103 * MIN }), 103 * MIN);
    assert.equal(due({ maxLifetimeMs: 130 * MIN }), 110 * MIN, 'idle first');
    assert.equal(due({ maxLifetimeMs: 130 * MIN, maxLifetimeAction: 'pause', idleTimeoutMs: 0 }), 130 * MIN);
  });

  test('the idle ladder: pause, then archive, then the idle timeout, each only where it applies', () => {
    const ladder = { idlePauseMs: 2 * MIN, idleArchiveMs: 5 * MIN };
    assert.equal(due(ladder), 102 * MIN);
    assert.equal(due({ ...ladder, paused: true }), 105 * MIN, 'paused already: the archive next');
    assert.equal(due({ ...ladder, paused: true, archivable: false }), 110 * MIN, 'no archive: the idle timeout');
    assert.equal(due({ ...ladder, archived: true, running: false }), 110 * MIN);
    assert.equal(due({ ...ladder, pausable: false }), 105 * MIN);
  });

  test('a longrunning box stopped for idleness is not due again; persistent boxes only on their ladder', () => {
    assert.equal(due({ policy: 'longrunning', running: false, lastActive: 0 }), undefined);
    assert.equal(due({ policy: 'longrunning' }), 110 * MIN);
    assert.equal(due({ policy: 'persistent', maxLifetimeMs: 1 }), undefined);
    assert.equal(due({ policy: 'persistent', idlePauseMs: MIN }), 101 * MIN);
  });

  test('oneshot: due now once its exec has ended', () => {
    assert.equal(due({ policy: 'oneshot', execsCompleted: 1 }), 100 * MIN);
    assert.equal(due({ policy: 'oneshot', execsCompleted: 1, inFlight: 1 }), undefined);
  });

  test('agrees with decideCleanup: keep a millisecond before, act at it, for every combination', () => {
    const policies = ['oneshot', 'session', 'longrunning', 'persistent'] as const;
    const choices = [0, MIN, 3 * MIN, 7 * MIN];
    let checked = 0;
    for (const policy of policies)
      for (const lastActive of [90 * MIN, 99 * MIN, 100 * MIN])
        for (const idleTimeoutMs of [0, 4 * MIN, 11 * MIN])
          for (const idlePauseMs of choices)
            for (const idleArchiveMs of choices)
              for (const maxLifetimeMs of [0, 101 * MIN, 104 * MIN])
                for (const [running, paused, archived] of [
                  [true, false, false],
                  [true, true, false],
                  [false, false, false],
                  [false, false, true],
                ] as const)
                  for (const inFlight of [0, 1]) {
                    const b: BoxActivity = {
                      ...base,
                      policy,
                      lastActive,
                      idleTimeoutMs,
                      idlePauseMs,
                      idleArchiveMs,
                      maxLifetimeMs,
                      running,
                      paused,
                      archived,
                      inFlight,
                    };
                    const t = nextDue(b);
                    const label = JSON.stringify(b);
                    if (t === undefined) {
                      for (const later of [b.now, b.now + 30 * MIN, b.now + 10_000 * MIN])
                        assert.equal(decideCleanup({ ...b, now: later }).action, 'keep', label);
                    } else {
                      assert.notEqual(decideCleanup({ ...b, now: t }).action, 'keep', label);
                      if (t > b.now) assert.equal(decideCleanup({ ...b, now: t - 1 }).action, 'keep', label);
                    }
                    checked++;
                  }
    assert.ok(checked > 10_000);
  });
});

describe('box labels', () => {
  const record: BoxRecord = {
    manager: 'm1',
    id: 'sb-1',
    owner: 'alice',
    pool: 'local',
    policy: 'longrunning',
    workspaceId: 'ws-1',
    mountMode: 'ro',
    mountPath: '/data',
    idleTimeoutMs: 1234,
    idlePauseMs: 600,
    idleArchiveMs: 900,
    stopTimeoutMs: 500,
    maxLifetimeMs: 99_000,
    maxLifetimeAction: 'pause',
    createdAt: Date.parse('2026-01-02T03:04:05.678Z'),
    vnc: true,
    image: 'img:1',
    tokenNonce: 'n0nce',
    labels: { team: 'a', 'sbx.looks-internal': 'x' },
  };
  const fallback = { idleTimeoutMs: 1, stopTimeoutMs: 2, maxLifetimeMs: 3, createdAt: 4, image: 'other' };

  test('every field survives the round trip through labels', () => {
    assert.deepEqual(labelsToRecord(recordToLabels(record), fallback), record);
  });

  test('garbled or missing values fall back to the pool, unknown policy to session', () => {
    const labels = recordToLabels(record);
    labels['sbx.idle-timeout-ms'] = 'abc';
    labels['sbx.policy'] = '';
    delete labels['sbx.created-at'];
    const r = labelsToRecord(labels, fallback)!;
    assert.equal(r.idleTimeoutMs, 1);
    assert.equal(r.policy, 'session');
    assert.equal(r.createdAt, 4);
  });

  test('containers not made by sbx are not records', () => {
    assert.equal(labelsToRecord({ 'sbx.id': 'x' }, fallback), null);
  });
});
