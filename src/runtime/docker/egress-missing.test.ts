/**
 * An engine without the egress helper's image (here a second engine in its own network namespace,
 * netns-engine.ts, which has sbx's box images only): boxes with egress `all` run as before, with
 * one warning; any other policy is refused `not_available` (reason egress, saying how to build
 * the image) before a container is made.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { sh, startTestBox } from '../../testing/boxes.js';
import { TEST_LABEL, testRunId } from '../../testing/env.js';
import { startNetnsEngine, stopNetnsEngine } from '../../testing/netns-engine.js';
import type { EgressSpec } from '../types.js';
import { DockerRuntime } from './runtime.js';

/** An engine index no other test file uses. */
const ENGINE = 8;
const runId = testRunId('egress-missing');
let rt: DockerRuntime;
const warnings: string[] = [];
const onWarning = (w: Error & { code?: string }) => {
  if (w.code === 'SBX_EGRESS_UNAVAILABLE') warnings.push(w.message);
};

before(async () => {
  const engine = await startNetnsEngine(ENGINE);
  // Its bridges are in its namespace, not this one's: no host firewall from here.
  rt = new DockerRuntime(engine.engineAddr, { hostFirewall: false });
  process.on('warning', onWarning);
});

after(async () => {
  process.off('warning', onWarning);
  await assertNoContainersLeft(rt, runId);
  await rt.close();
  await stopNetnsEngine(ENGINE);
});

test("without the helper's image: 'all' runs as before (one warning), other rules are refused before a container is made", async () => {
  assert.equal(rt.capabilities.egress, true);
  const none: EgressSpec = { mode: 'none', allow: [], deny: [], endpoints: [] };
  for (let i = 0; i < 2; i++) {
    await assert.rejects(
      startTestBox(rt, runId, { egress: none }),
      (e) => isSbxError(e, 'not_available') && (e.details as { reason?: string }).reason === 'egress' && /scripts\/images\.sh/.test(e.message),
    );
    assert.deepEqual(await rt.list({ labels: { [TEST_LABEL]: runId } }), [], 'no container made');
  }
  const id = await startTestBox(rt, runId, { cmd: ['sleep', '86400'], egress: { ...none, mode: 'all' } });
  try {
    assert.equal((await sh(rt, id, 'echo up')).stdout.trim(), 'up');
    assert.deepEqual(await rt.getEgress(id), { ...none, mode: 'all' }, 'its label');
    await rt.setEgress(id, { ...none, mode: 'all' });
    await assert.rejects(rt.setEgress(id, none), (e) => isSbxError(e, 'not_available'));
  } finally {
    await rt.remove(id, { force: true });
  }
  // The warning is emitted on the next tick.
  await new Promise((r) => setImmediate(r));
  assert.equal(warnings.length, 1, `one warning: ${warnings.join(' | ')}`);
  assert.match(warnings[0]!, /sbx-egress:latest/);
});
