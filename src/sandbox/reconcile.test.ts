import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ContainerSummary } from '../runtime/types.js';
import { ManagedBox } from './box.js';
import type { BoxHost } from './box.js';
import { newBoxRecord } from './box-spec.js';
import { resolvePool } from './config.js';
import { recordToLabels } from './labels.js';
import { planReconcile } from './reconcile.js';

const pool = resolvePool({ name: 'local' });
let now = 10_000;
const host = { now: () => now } as BoxHost;

function record(id: string, manager = 'm', poolName = 'local') {
  return newBoxRecord({ manager, id, owner: 'o', pool: { ...pool, name: poolName }, opts: { image: 'sbx-base' }, now, tokenNonce: 'n' });
}

function container(id: string, status: ContainerSummary['status'], rec = record(id)): ContainerSummary {
  return {
    id: `c-${id}`,
    name: `sbx-m-${id}`,
    image: 'sbx-base',
    status,
    running: status === 'running',
    labels: recordToLabels(rec),
    createdAt: new Date(now).toISOString(),
  };
}

function plan(list: ContainerSummary[], known: ManagedBox[], busy: string[] = [], listedAt = now) {
  return planReconcile({ manager: 'm', pool, list, listedAt, known, busy: (id) => busy.includes(id), now });
}

describe('reconcile plan (no engine)', () => {
  test('unknown started containers are adopted; created-but-never-started ones are swept', () => {
    const p = plan([container('a', 'running'), container('b', 'exited'), container('c', 'created')], []);
    assert.deepEqual(
      p.adopt.map((x) => x.record.id),
      ['a', 'b'],
    );
    assert.deepEqual(
      p.sweep.map((c) => c.id),
      ['c-c'],
    );
  });

  test("this Manager's creates in flight, other Managers' and other pools' containers are left alone", () => {
    const p = plan([container('c', 'created'), container('x', 'running', record('x', 'other')), container('y', 'running', record('y', 'm', 'gpu'))], [], ['c']);
    assert.deepEqual([p.adopt.length, p.sweep.length], [0, 0]);
  });

  test('known boxes get their status; a missing one vanished unless it is newer than the list or busy', () => {
    const a = new ManagedBox(record('a'), 'c-a', host);
    const gone = new ManagedBox(record('gone'), 'c-gone', host);
    const busy = new ManagedBox(record('busy'), 'c-busy', host);
    now += 50;
    const fresh = new ManagedBox(record('fresh'), 'c-fresh', host);
    const p = plan([container('a', 'exited')], [a, gone, busy, fresh], ['busy'], now - 10);
    assert.deepEqual(
      p.statuses.map((s) => [s.box.id, s.status]),
      [['a', 'stopped']],
    );
    assert.deepEqual(
      p.vanished.map((b) => b.id),
      ['gone'],
    );
  });

  test('a duplicate of a known id on another container is not adopted twice', () => {
    const a = new ManagedBox(record('a'), 'c-a', host);
    const dup = { ...container('a', 'running'), id: 'c-other' };
    const p = plan([container('a', 'running'), dup], [a]);
    assert.equal(p.adopt.length, 0);
  });
});
