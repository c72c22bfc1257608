/**
 * A stuck engine gives errors, not calls that never return: Docker 20.10's libnetwork deadlock
 * (seen in CI and at 1,000 boxes) held containers' locks for good while `/_ping` answered, and
 * every inspect of them hung. Here a real second engine (scripts/engine2.sh) is stopped with
 * SIGSTOP, which hangs every call on its socket the same way, then let go.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { Engine2 } from '../../testing/engine2.js';
import { testEnv } from '../../testing/env.js';
import { waitFor, within } from '../../testing/wait.js';
import { DockerRuntime } from './runtime.js';

const NAME = 'sbx-stuck';
let engine2: Engine2 | undefined;
let addr = '';
let stopped = false;

function dockerdPid(): number {
  return Number(readFileSync(`/run/${NAME}/docker.pid`, 'utf8').trim());
}

function setStopped(on: boolean): void {
  process.kill(dockerdPid(), on ? 'SIGSTOP' : 'SIGCONT');
  stopped = on;
}

/**
 * Waits until an inspect through `rt` gets the engine's own answer (not_found): on a loaded
 * machine a just-woken engine may take longer than the test's short answerTimeoutMs, which is
 * then the error this file is about, not a failure.
 */
async function answers(rt: DockerRuntime, what: string): Promise<void> {
  await waitFor(
    () =>
      rt.inspect('sbx-stuck-none').then(
        () => assert.fail('no container sbx-stuck-none'),
        (e: unknown) => {
          if (isSbxError(e, 'not_found')) return true;
          if (isSbxError(e, 'runtime_unavailable')) return undefined;
          throw e;
        },
      ),
    { what },
  );
}

before(async () => {
  engine2 = new Engine2({ name: NAME, images: [testEnv.baseImage] });
  const up = await engine2.up();
  console.log(`# ${up.out} | engine2.sh up took ${up.ms} ms`);
  addr = up.addr;
});

after(async () => {
  if (stopped) setStopped(false);
  // Down, not left for the next run: a dockerd and its containerd cost memory other tests want.
  await engine2?.down();
});

test('a read the engine does not answer fails runtime_unavailable after answerTimeoutMs, saying so; each frees its connection; a write is not cut', async () => {
  // Two connections and five reads: were a read that gave up to keep its connection, the last three would wait for good.
  const rt = new DockerRuntime(addr, { agent: false, hostFirewall: false, maxConnections: 2, answerTimeoutMs: 1500 });
  try {
    await answers(rt, 'the engine to answer before it is stopped');
    setStopped(true);
    const reads = await within(
      Promise.allSettled([rt.inspect('sbx-stuck-a'), rt.inspect('sbx-stuck-b'), rt.list({}), rt.stats('sbx-stuck-c'), rt.version()]),
      'the reads of a stopped engine to fail',
    );
    for (const [i, r] of reads.entries()) {
      assert.equal(r.status, 'rejected', `read ${i} failed`);
      const e = (r as PromiseRejectedResult).reason;
      assert.ok(isSbxError(e, 'runtime_unavailable'), `read ${i}: ${e}`);
      assert.match(e.message, /did not answer within 1500 ms \(GET \/.+\); it may be stuck: restart dockerd/);
      assert.equal(e.details?.['answerTimeoutMs'], 1500);
    }
    // A write is left to take its time: its answer comes once the engine runs again.
    const removal = rt.remove('sbx-stuck-none', { force: true }).then(
      () => 'removed',
      (e: unknown) => (isSbxError(e, 'not_found') ? 'not_found' : `${e}`),
    );
    const early = await Promise.race([removal, rt.inspect('sbx-stuck-d').catch((e: unknown) => e)]);
    assert.ok(isSbxError(early, 'runtime_unavailable'), `a read given up on while the removal still waits: ${early}`);
    setStopped(false);
    assert.equal(await within(removal, 'the removal to be answered'), 'not_found', 'the removal waited for its answer');
    await answers(rt, 'the engine to answer again through the same pool');
  } finally {
    await rt.close();
  }
});

test('answerTimeoutMs must be a positive whole number of ms', () => {
  for (const answerTimeoutMs of [0, -1, 1.5, Number.NaN]) {
    assert.throws(
      () => new DockerRuntime('local', { answerTimeoutMs }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'answerTimeoutMs',
      String(answerTimeoutMs),
    );
  }
});
