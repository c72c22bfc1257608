/**
 * A box with the in-box agent cannot write on the host outside its workspace and cannot use its
 * own agent (docs/agent.md, "Only the host may use the agent"): no writable host mount but the
 * workspace, the agent's TCP listener refuses box processes (root and the box user, with no
 * token or a wrong one), the token is in no process's environment a box process can read, a box
 * command cannot take the agent's port first, the agent's port is closed to the owner's port
 * proxy, and the token stays out of what sbx reports of a box. On a real engine.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { waitFor } from '../../testing/wait.js';
import type { ContainerSpec } from '../types.js';
import { AGENT_BIN } from './agent-inject.js';
import { DockerRuntime } from './runtime.js';

const AGENT_PORT = 43011;
const TOKEN_ENV = 'SBX_AGENT_TOKEN';

const runId = testRunId('agent-host');
const rt = new DockerRuntime(testEnv.engineAddr);
const workspace = mkdtempSync(join(tmpdir(), 'sbx-agent-ws-'));
// The box user (1000) works in it, as in a workspace the Manager made.
chmodSync(workspace, 0o777);
const spec = (extra: Partial<ContainerSpec> = {}): ContainerSpec => ({
  image: testEnv.baseImage,
  // sbx's 'standard' box (src/sandbox/security.ts), with a workspace as the Manager mounts it.
  security: { noNewPrivileges: true, capDrop: ['ALL'], capAdd: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID', 'NET_BIND_SERVICE'] },
  ...extra,
  labels: { [TEST_LABEL]: runId, ...(extra.labels ?? {}) },
});

interface Mount {
  Type: string;
  Source: string;
  Destination: string;
  RW: boolean;
}
function dockerInspect(id: string): { Mounts: Mount[]; Config: { Env: string[] | null } } {
  return (JSON.parse(execFileSync('docker', ['inspect', id], { encoding: 'utf8' })) as Array<{ Mounts: Mount[]; Config: { Env: string[] | null } }>)[0]!;
}

/** Waits for `check` to hold, polling; fails with `what` only at a time a hang reaches. */
async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  await waitFor(check, { what, intervalMs: 20 });
}

let box: string;
before(async () => {
  box = await rt.create(spec({ binds: [{ hostPath: workspace, containerPath: '/workspace' }] }));
  await rt.start(box);
  assert.equal((await rt.inspect(box)).execPath, 'agent');
});
after(async () => {
  await rt.remove(box, { force: true });
  await assertNoContainersLeft(rt, runId);
  await rt.close();
  rmSync(workspace, { recursive: true, force: true });
});

describe('the host outside the workspace', () => {
  test('no writable host mount but the workspace; root in the box writes through none of the others', async () => {
    const mounts = dockerInspect(box).Mounts;
    assert.deepEqual(
      mounts.filter((m) => m.RW).map((m) => m.Destination),
      ['/workspace'],
      `writable mounts: ${JSON.stringify(mounts)}`,
    );
    const agentBin = mounts.find((m) => m.Destination === AGENT_BIN);
    assert.ok(agentBin && agentBin.Type === 'bind' && !agentBin.RW, 'the agent binary is a read-only bind mount');
    // Root in the box tries every mount: a file in each directory, the mounted file itself.
    const before = new Map(mounts.map((m) => [m.Source, statSync(m.Source)]));
    for (const m of mounts) {
      const r = await rt.exec(box, ['sh', '-c', 'if [ -d "$1" ]; then touch "$1/sbx-probe"; else echo x >> "$1"; fi', 'sh', m.Destination], { user: '0' });
      assert.equal(r.exitCode === 0, m.Destination === '/workspace', `${m.Destination}: exit ${r.exitCode} ${r.stderr}`);
    }
    for (const m of mounts) {
      const now = statSync(m.Source);
      if (m.Destination === '/workspace') assert.ok(readdirSync(m.Source).includes('sbx-probe'), 'the workspace takes the write');
      else if (now.isDirectory()) assert.ok(!readdirSync(m.Source).includes('sbx-probe'), `${m.Source} got a file`);
      else assert.equal(now.size, before.get(m.Source)!.size, `${m.Source} changed`);
    }
  });
});

describe('the agent serves the host only', () => {
  test('a box process, root or the box user, with no token or a wrong one, is refused and runs nothing', async () => {
    for (const user of ['0', '1000']) {
      for (const env of [{}, { [TOKEN_ENV]: 'f'.repeat(64) }] as Array<Record<string, string>>) {
        const r = await rt.exec(box, [AGENT_BIN, 'hello', `tcp:127.0.0.1:${AGENT_PORT}`, 'touch', `/tmp/pwned-${user}`], { user, env });
        assert.equal(r.exitCode, 3, `user ${user}: ${r.stdout}`);
        assert.match(r.stdout, /"forbidden"/);
      }
    }
    assert.doesNotMatch((await rt.exec(box, ['ls', '/tmp'])).stdout, /pwned/);
  });

  test("the token is in no environment a box process can read: PID 1's is closed, the command's, the execs' (agent and engine) lack it", async () => {
    const token = dockerInspect(box)
      .Config.Env?.find((e) => e.startsWith(`${TOKEN_ENV}=`))
      ?.slice(TOKEN_ENV.length + 1);
    assert.match(token ?? '', /^[0-9a-f]{64}$/, 'the box has a 256-bit token');
    for (const user of ['0', '1000']) {
      const environ = await rt.exec(box, ['cat', '/proc/1/environ'], { user });
      assert.notEqual(environ.exitCode, 0, `user ${user} read PID 1's environment`);
      assert.doesNotMatch(environ.stdout, new RegExp(token!));
      // Every other process's environment (the box command's, this exec's own).
      const all = await rt.exec(box, ['sh', '-c', 'cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"; env'], { user });
      assert.doesNotMatch(all.stdout, new RegExp(`${TOKEN_ENV}|${token!}`), `user ${user}`);
    }
    const engine = new DockerRuntime(testEnv.engineAddr, { agent: false });
    try {
      const r = await engine.exec(box, ['sh', '-c', 'env; cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"'], { user: '0' });
      assert.doesNotMatch(r.stdout, new RegExp(`${TOKEN_ENV}|${token!}`), "an exec through the engine's exec");
    } finally {
      await engine.close();
    }
  });

  test('a box command that tries to take the agent port first does not get it; the host reaches the agent', async () => {
    // On every address (nc) and on the loopback alone (httpd); each records its exit code.
    const any = `nc -l -p ${AGENT_PORT} </dev/null >/dev/null 2>/tmp/any.err; echo $? >/tmp/any.rc`;
    const lo = `busybox httpd -f -p 127.0.0.1:${AGENT_PORT} 2>/tmp/lo.err; echo $? >/tmp/lo.rc`;
    const id = await rt.create(spec({ cmd: ['sh', '-c', `(${any}) & (${lo}) & exec sleep 1000`] }));
    try {
      await rt.start(id);
      const rc = async (name: string) => (await rt.exec(id, ['cat', `/tmp/${name}.rc`])).stdout.trim();
      await until('both listeners gave up', async () => (await rc('any')) !== '' && (await rc('lo')) !== '');
      assert.notEqual(await rc('any'), '0');
      assert.notEqual(await rc('lo'), '0');
      assert.match((await rt.exec(id, ['cat', '/tmp/any.err', '/tmp/lo.err'])).stdout, /in use[^]*in use/i);
      // Served by the agent (its child: parent pid 1), not by a listener of the box.
      assert.equal((await rt.exec(id, ['sh', '-c', 'cut -d" " -f4 /proc/self/stat'])).stdout, '1\n');
    } finally {
      await rt.remove(id, { force: true });
    }
  });
});

describe("the agent's port is not the owner's", () => {
  test('a box cannot publish it, have it dialled, or set the token', async () => {
    const isArg = (field: string) => (e: Error & { code?: string; details?: { field?: string } }) =>
      e.code === 'invalid_argument' && e.details?.field === field && e.message.includes(String(AGENT_PORT));
    await assert.rejects(rt.create(spec({ ports: [{ containerPort: AGENT_PORT }] })), isArg('ports'));
    await assert.rejects(rt.dialPort(box, AGENT_PORT), isArg('port'));
    await assert.rejects(rt.create(spec({ env: { [TOKEN_ENV]: 'x'.repeat(64) } })), (e: Error & { code?: string }) => e.code === 'invalid_argument');
    const any = await rt.create(spec({ dialAnyPort: true }));
    try {
      await rt.start(any);
      await assert.rejects(rt.dialPort(any, AGENT_PORT), isArg('port'));
    } finally {
      await rt.remove(any, { force: true });
    }
  });

  test('the token is not in what the runtime reports of the box', async () => {
    const token = dockerInspect(box)
      .Config.Env?.find((e) => e.startsWith(`${TOKEN_ENV}=`))
      ?.slice(TOKEN_ENV.length + 1);
    assert.ok(token);
    const reported = JSON.stringify([await rt.inspect(box), await rt.list({ labels: { [TEST_LABEL]: runId } })]);
    assert.ok(!reported.includes(token) && !reported.includes(TOKEN_ENV), reported);
  });
});
