import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { openTestRuntime, startTestBox } from './boxes.js';
import { assertNoContainersLeft } from './cleanup.js';
import { TEST_LABEL, testRunId } from './env.js';

const rt = openTestRuntime();
after(() => rt.close());

test('a container left behind fails the check, which names it and then removes it', async () => {
  const runId = testRunId('leak-check');
  const left = await startTestBox(rt, runId, { name: `sbx-leak-check-${runId}` });
  await assert.rejects(assertNoContainersLeft(rt, runId), (err: Error) => {
    assert.ok(err instanceof assert.AssertionError, String(err));
    assert.match(err.message, new RegExp(`sbx-leak-check-${runId}`));
    return true;
  });
  assert.deepEqual(await rt.list({ labels: { [TEST_LABEL]: runId } }), [], 'the check removed what it found');
  await assert.rejects(rt.inspect(left), /not found|no such/i);
  await assertNoContainersLeft(rt, runId); // so the next check of this run passes
});

test('only this run’s containers (and the extra labels) count', async () => {
  const mine = testRunId('leak-mine');
  const other = testRunId('leak-other');
  const theirs = await startTestBox(rt, other, { labels: { 'sbx.leak-kind': 'b' } });
  try {
    await assertNoContainersLeft(rt, mine);
    await assertNoContainersLeft(rt, other, { 'sbx.leak-kind': 'a' });
    assert.equal((await rt.inspect(theirs)).running, true, 'another run’s container is neither reported nor removed');
  } finally {
    await rt.remove(theirs, { force: true });
  }
  await assertNoContainersLeft(rt, other);
});
