/**
 * Leak checks for tests that create containers directly (labelled TEST_LABEL=<runId>, see env.ts).
 * A check looks first and cleans up second: it fails when anything of the run is left, and then
 * removes what it found, so one leak fails one check instead of every later one.
 */
import assert from 'node:assert/strict';
import type { Runtime } from '../runtime/types.js';
import { TEST_LABEL } from './env.js';

/**
 * Fails when a container of this run (and `labels`) is left, naming each; removes them after
 * looking. Remove the containers a suite keeps on purpose (a shared box) before calling it.
 *
 * @example
 * after(async () => {
 *   await rt.remove(box, { force: true });
 *   await assertNoContainersLeft(rt, runId);
 * });
 */
export async function assertNoContainersLeft(runtime: Runtime, runId: string, labels: Record<string, string> = {}): Promise<void> {
  const left = await runtime.list({ labels: { [TEST_LABEL]: runId, ...labels } });
  await removeContainers(runtime, left);
  assert.deepEqual(
    left.map((c) => `${c.name} (${c.status}) ${JSON.stringify(c.labels)}`),
    [],
    `containers labelled ${TEST_LABEL}=${runId} were left behind (now removed)`,
  );
}

/**
 * The same check under its earlier name; it used to remove first and so could never fail.
 *
 * @deprecated use assertNoContainersLeft, after removing the containers a suite keeps on purpose.
 */
export const removeAndAssertNoLeaks = (runtime: Runtime, runId: string): Promise<void> => assertNoContainersLeft(runtime, runId);

async function removeContainers(runtime: Runtime, containers: Array<{ id: string }>): Promise<void> {
  await Promise.all(containers.map((c) => runtime.remove(c.id, { force: true }).catch(() => undefined)));
}
