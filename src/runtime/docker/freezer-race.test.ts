/**
 * The engine's paused flag lags containerd on a busy engine (freezer.ts): pause and unpause
 * through DockerRuntime must still end frozen and thawed by the kernel's word, round after round,
 * while execs in other containers keep the engine's event stream busy. Taking the engine's
 * refusals at their word ("already paused", "is not paused") fails this within a few dozen rounds
 * on this machine: a box left running after a pause, or frozen after an unpause; and the engine's
 * exec right after an unpause is refused now and then while its flag still says paused.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { kernelFrozen } from '../../testing/freezer.js';
import { within } from '../../testing/wait.js';
import { DockerRuntime } from './runtime.js';

const ROUNDS = 300;
/** Execs in flight in the other containers: each is several containerd events for the engine to take. */
const LOAD = 16;
// Each call is bounded (within: a hang, not a slow machine): ci20 hung this file for its whole 600 s
// and could not say on which call.

// The engine's own exec (no agent): its events go through the engine, as the race needs.
const rt = new DockerRuntime(testEnv.engineAddr, { agent: false });
const runId = testRunId('freezer-race');
const made: string[] = [];

async function running(): Promise<string> {
  const id = await rt.create({ image: testEnv.baseImage, cmd: ['sleep', 'infinity'], labels: { [TEST_LABEL]: runId } });
  made.push(id);
  await rt.start(id);
  return id;
}

after(async () => {
  await Promise.all(made.map((id) => rt.remove(id, { force: true }).catch(() => undefined)));
  await rt.close();
});

test("pause and unpause end frozen and thawed by the kernel's word while the engine's events lag", async (t) => {
  const [target, ...others] = await Promise.all([running(), running(), running(), running()]);
  let loading = true;
  let execs = 0;
  const load = Array.from({ length: LOAD }, async (_, i) => {
    while (loading) {
      await within(rt.exec(others[i % others.length]!, ['true']), `load exec ${execs} in ${others[i % others.length]}`);
      execs++;
    }
  });
  let staleFlags = 0;
  let lostExits = 0;
  try {
    for (let round = 0; round < ROUNDS; round++) {
      await within(rt.pause(target!), `round ${round}: the pause`);
      assert.equal(kernelFrozen(target!), true, `round ${round}: the pause left the box running`);
      await within(rt.unpause(target!), `round ${round}: the unpause`);
      assert.equal(kernelFrozen(target!), false, `round ${round}: the unpause left the box frozen`);
      // The engine's exec right after: refused while the flag says paused, unless sbx sees to it.
      // Its exit may be lost by the engine (a pause right after an exec leaks that exec in
      // containerd's shim; lost-exit.serial.test.ts): sbx then answers exit_lost, which is no refusal.
      const exit = await within(rt.exec(target!, ['true']), `round ${round}: the exec after the unpause`).then(
        (r) => r.exitCode,
        (err: unknown) => {
          if (isSbxError(err, 'internal') && err.details?.['reason'] === 'exit_lost') return 'lost';
          throw err;
        },
      );
      if (exit === 'lost') lostExits++;
      else assert.equal(exit, 0, `round ${round}: an exec after the unpause`);
      // How often the engine's flag was wrong just after: the race this test is for happened.
      if ((await within(rt.inspect(target!), `round ${round}: the inspect`)).status === 'paused') staleFlags++;
    }
  } finally {
    loading = false;
    await Promise.all(load);
  }
  t.diagnostic(
    `${ROUNDS} rounds beside ${execs} engine execs; the engine's flag said paused about the thawed box ${staleFlags} times; the engine lost ${lostExits} exits`,
  );
});
