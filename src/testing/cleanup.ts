import assert from 'node:assert/strict';
import type { Runtime } from '../runtime/types.js';
import { TEST_LABEL } from './env.js';

/** Removes every container of this test run, then asserts that none is left. */
export async function removeAndAssertNoLeaks(runtime: Runtime, runId: string): Promise<void> {
  const left = await runtime.list({ labels: { [TEST_LABEL]: runId } });
  await Promise.all(left.map((c) => runtime.remove(c.id, { force: true }).catch(() => undefined)));
  const after = await runtime.list({ labels: { [TEST_LABEL]: runId } });
  assert.deepEqual(
    after.map((c) => c.id),
    [],
    `containers labelled ${TEST_LABEL}=${runId} remain`,
  );
}

/** Asserts that no container of this run remains, without removing anything first. */
export async function assertNoContainersLeft(runtime: Runtime, runId: string, labels: Record<string, string> = {}): Promise<void> {
  const left = await runtime.list({ labels: { [TEST_LABEL]: runId, ...labels } });
  assert.deepEqual(
    left.map((c) => `${c.name} ${JSON.stringify(c.labels)}`),
    [],
    'leaked containers',
  );
}
