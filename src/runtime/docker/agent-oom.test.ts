/**
 * OOM kills on a real engine: the agent's line in the box's log, with the proof of the box's
 * token (agent/oom.go), backs the engine's OOMKilled flag, which Docker 20.10 leaves false when
 * containerd's exit event beats its OOM event (seen in CI under load). That race cannot be forced,
 * so a box whose command ends with 137 and no OOM event stands in for the engine that lost it:
 * its log holds the agent's line, rightly proved (the test holds the token) or forged.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, test } from 'node:test';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { waitFor } from '../../testing/wait.js';
import { AGENT_OOM_LINE, hasOomLine, oomProof } from '../agent-client.js';
import { AGENT_TOKEN_ENV } from '../agent-protocol.js';
import type { ContainerInfo, ContainerSpec } from '../types.js';
import { defaultAgentDir, imageConfigOf, injectAgent } from './agent-inject.js';
import { DockerRuntime } from './runtime.js';

const runId = testRunId('agent-oom');
const rt = new DockerRuntime(testEnv.engineAddr);
// Creates the boxes the test injects the agent into itself (to know the token): it injects nothing.
const plain = new DockerRuntime(testEnv.engineAddr, { agent: false });
const MiB = 1024 * 1024;

after(async () => {
  await assertNoContainersLeft(rt, runId);
  await Promise.all([rt.close(), plain.close()]);
});

const spec = (extra: Partial<ContainerSpec>): ContainerSpec => ({ image: testEnv.baseImage, ...extra, labels: { [TEST_LABEL]: runId } });

/** The engine's own view of the container (its env holds the box's token). */
function engineView(id: string): { State: { OOMKilled: boolean; ExitCode: number }; Config: { Env: string[] } } {
  return JSON.parse(execFileSync('docker', ['inspect', id], { encoding: 'utf8' }))[0];
}

/** The box with the agent injected as the runtime does it; `env` gives the command variables made from the box's token. */
function withAgent(cmd: string[], env: (token: string) => Record<string, string>): ContainerSpec {
  const image = imageConfigOf(JSON.parse(execFileSync('docker', ['image', 'inspect', testEnv.baseImage], { encoding: 'utf8' }))[0]);
  const injected = injectAgent(spec({ cmd }), image, defaultAgentDir());
  assert.ok(!('skip' in injected), 'skip' in injected ? injected.skip : '');
  return { ...injected.spec, env: { ...injected.spec.env, ...env(injected.token) } };
}

async function untilStopped(runtime: DockerRuntime, id: string, startedAt?: string | null): Promise<ContainerInfo> {
  return waitFor(
    async () => {
      const info = await runtime.inspect(id);
      return !info.running && info.startedAt !== startedAt && info;
    },
    { what: `container ${id} to stop` },
  );
}

async function stderrOf(id: string): Promise<string> {
  let text = '';
  for await (const c of await rt.logs(id)) if (c.stream === 'stderr') text += c.data;
  return text;
}

test("the line's proof is the agent's (agent/oom_test.go has the same vector); only the whole line counts", () => {
  const token = 'ab'.repeat(32);
  const line = `${AGENT_OOM_LINE} [oom:6005236cfb0534534e172610a7e3d6c3]`;
  assert.equal(oomProof(token), '6005236cfb0534534e172610a7e3d6c3');
  assert.equal(hasOomLine(`out\n${line}\r\nmore\n`, token), true);
  for (const text of [`x${line}\n`, `${line} x\n`, line.replace('6005', '6006'), AGENT_OOM_LINE]) assert.equal(hasOomLine(text, token), false, text);
});

test("the OOM killer takes the box's command or its child: the agent writes its line with the box's proof, and inspect says oomKilled", async () => {
  // tail keeps a line without a newline in memory: it outgrows the 16 MiB limit. As the command
  // itself (SIGKILL), and as a shell's child (the shell exits 137).
  for (const cmd of [
    ['tail', '/dev/zero'],
    ['sh', '-c', 'tail /dev/zero; exit $?'],
  ]) {
    const id = await rt.create(spec({ memory: 16 * MiB, cmd }));
    try {
      await rt.start(id);
      const info = await untilStopped(rt, id);
      const token = engineView(id)
        .Config.Env.find((e) => e.startsWith(`${AGENT_TOKEN_ENV}=`))!
        .slice(AGENT_TOKEN_ENV.length + 1);
      const log = await stderrOf(id);
      assert.ok(log.includes(`${AGENT_OOM_LINE} [oom:${oomProof(token)}]\n`), `${cmd.join(' ')}: the agent's line is in the log: ${JSON.stringify(log)}`);
      assert.deepEqual([info.exitCode, info.oomKilled], [137, true], cmd.join(' '));
    } finally {
      await rt.remove(id, { force: true });
    }
  }
});

test("a 137 the engine does not call an OOM kill: the agent's line with the box's proof makes it one, for that run only", async () => {
  // The line as the agent writes it (the command knows the token only because the test gave it),
  // then a SIGKILL the OOM killer did not send: the engine saw no OOM. The first run's line is
  // written at once (it may be logged before the engine's StartedAt) and the run ends 2 s later:
  // the second run, which ends the same way without the line, starts more than the runtime's
  // 1 s of slack after it.
  const id = await plain.create(
    withAgent(['sh', '-c', 'if [ -e /tmp/ran ]; then kill -9 $$; fi; touch /tmp/ran; echo "$OOM_LINE" >&2; sleep 2; kill -9 $$'], (token) => ({
      OOM_LINE: `${AGENT_OOM_LINE} [oom:${oomProof(token)}]`,
    })),
  );
  try {
    await plain.start(id);
    const first = await untilStopped(plain, id);
    assert.deepEqual([first.exitCode, engineView(id).State.OOMKilled], [137, false], 'the engine saw no OOM event');
    assert.equal(first.oomKilled, true, "the agent's line backs the flag");
    assert.equal((await plain.inspect(id)).oomKilled, true, 'asked again (from the cache)');

    await plain.start(id);
    const second = await untilStopped(plain, id, first.startedAt);
    assert.match(await stderrOf(id), /\[oom:[0-9a-f]{32}\]/, "the first run's line is still in the log");
    assert.deepEqual([second.exitCode, second.oomKilled], [137, false], "the first run's line is not this run's");
  } finally {
    await plain.remove(id, { force: true });
  }
});

test("a forged line (another token's proof, the line inside another) does not make a box's 137 an OOM kill", async () => {
  const forged = [`${AGENT_OOM_LINE} [oom:${oomProof('f'.repeat(64))}]`, `${AGENT_OOM_LINE} [oom:]`, `${AGENT_OOM_LINE}`];
  const script = forged.map((l) => `echo '${l.replace(/'/g, `'\\''`)}' >&2`).join('; ');
  const id = await rt.create(spec({ cmd: ['sh', '-c', `${script}; kill -9 $$`] }));
  try {
    await rt.start(id);
    const info = await untilStopped(rt, id);
    assert.ok((await stderrOf(id)).includes(forged[0]!), 'the forged line is in the log');
    assert.deepEqual([info.exitCode, info.oomKilled], [137, false]);
  } finally {
    await rt.remove(id, { force: true });
  }
});
