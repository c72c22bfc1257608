/**
 * The version handshake end to end: a box whose agent speaks no protocol version this host
 * offers (an agent from a newer or older sbx) is refused clearly and served by the engine's exec,
 * with the same results, and `inspect` says so. The "old agent" is a listener on the agent's port
 * in a box marked as an agent box, which answers the hello as agent/proto.go does for an unknown
 * version and keeps each hello it got.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { HANG_MS } from '../../testing/wait.js';
import { AGENT_PORT, AGENT_TOKEN_ENV, F, HOST_PROTOCOL_VERSIONS, frame } from '../agent-protocol.js';
import { helloProof } from '../agent-client.js';
import { AGENT_LABEL, AGENT_USER_LABEL } from './agent-inject.js';
import { DockerRuntime } from './runtime.js';

const runId = testRunId('agent-version');
const rt = new DockerRuntime(testEnv.engineAddr, { agent: false });

after(async () => {
  await assertNoContainersLeft(rt, runId);
  await rt.close();
});

/** A shell command serving the agent's port, answering every hello with the agent's version refusal. */
function oldAgent(): string {
  const refusal = frame(F.error, { code: 'version', message: 'this agent speaks protocol 99; the host offered [1]' });
  const printf = [...refusal].map((b) => `\\${b.toString(8).padStart(3, '0')}`).join('');
  // Each connection: the reply, then what the host sent (its hello) kept in /tmp/hello.N.
  return `n=0; while true; do n=$((n+1)); nc -l -p ${AGENT_PORT} -e sh -c "printf '${printf}'; head -c 4096 > /tmp/hello.$n"; done`;
}

test('an agent that refuses the host’s protocol versions: execs go through the engine, results unchanged, inspect says engine', async () => {
  const token = 'a'.repeat(64);
  // A box as the runtime marks one with the agent (created here without it, so the old agent can be a shell loop).
  const id = await rt.create({
    image: testEnv.baseImage,
    cmd: ['sh', '-c', oldAgent()],
    env: { [AGENT_TOKEN_ENV]: token },
    labels: { [TEST_LABEL]: runId, [AGENT_LABEL]: '1', [AGENT_USER_LABEL]: '1000' },
    user: '0',
  });
  // A runtime that has not spoken to this box yet (a restarted Manager) meets the refusal.
  const fresh = new DockerRuntime(testEnv.engineAddr);
  const hellos = async () => (await rt.exec(id, ['sh', '-c', 'cat /tmp/hello.* 2>/dev/null; true'])).stdout;
  try {
    await rt.start(id);
    const r = await fresh.exec(id, ['sh', '-c', 'echo via-engine; id -u; echo err >&2; exit 3']);
    assert.deepEqual([r.stdout, r.stderr, r.exitCode], ['via-engine\n1000\n', 'err\n', 3], 'the engine path serves it, as the box user');
    // The old agent keeps the hello once the host hung up on it.
    let got = await hellos();
    for (const deadline = Date.now() + HANG_MS; !got && Date.now() < deadline; got = await hellos());
    const first = Buffer.from(got, 'latin1');
    assert.equal(first[0], F.hello, 'one hello, refused');
    // The token itself never goes on the wire: a proof of it for the address the host dialled.
    const address = execFileSync('docker', ['inspect', '-f', '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}', id], { encoding: 'utf8' }).trim();
    assert.deepEqual(JSON.parse(first.subarray(5, 5 + first.readUInt32BE(1)).toString('utf8')), {
      versions: HOST_PROTOCOL_VERSIONS,
      client: 'sbx',
      proof: helloProof(token, `${address}:${AGENT_PORT}`),
    });
    assert.ok(!got.includes(token), 'no token in what the host sent');
    // Connections so far: one, or a few more when the loaded machine kept the old agent's answer
    // past the host's wait (each retry a connection); from here on the refusal must be remembered.
    const helloFiles = async () => (await rt.exec(id, ['sh', '-c', 'ls /tmp/hello.* | wc -l'])).stdout.trim();
    const before = await helloFiles();

    const s = await fresh.execStream(id, ['cat']);
    s.stdin.end('streamed\n');
    let out = '';
    for await (const chunk of s.stdout) out += String(chunk);
    assert.deepEqual([out, await s.wait()], ['streamed\n', 0]);
    assert.equal(await fresh.exec(id, ['true']).then((r) => r.exitCode), 0);
    assert.equal(await helloFiles(), before, 'the refusal is remembered: no new connection per exec');
    assert.equal((await fresh.inspect(id)).execPath, 'engine', 'inspect says the engine path serves the box');
  } finally {
    await fresh.close();
    await rt.remove(id, { force: true });
  }
});

test('a box whose command could not start is refused by start even when it ended after the first probes (its address then answers nothing)', async () => {
  // A box as the runtime marks one with the agent, whose "agent" lives a moment, then says what the
  // agent says when it cannot start the command and exits 127: the probes first meet a live box
  // (refused at once), then a dead address (each probe waits its whole timeout).
  const id = await rt.create({
    image: testEnv.baseImage,
    cmd: ['sh', '-c', `sleep 0.5; echo 'sbx-agent: cannot start "/no/such/binary": no such file or directory' >&2; exit 127`],
    env: { [AGENT_TOKEN_ENV]: 'b'.repeat(64) },
    labels: { [TEST_LABEL]: runId, [AGENT_LABEL]: '1', [AGENT_USER_LABEL]: '1000' },
    user: '0',
  });
  const fresh = new DockerRuntime(testEnv.engineAddr);
  try {
    // Read once, as a Manager's recovery does: the runtime then knows it for an agent box.
    assert.equal((await fresh.inspect(id)).status, 'created');
    await assert.rejects(
      fresh.start(id),
      (err: unknown) => isSbxError(err, 'invalid_argument') && err.details?.['field'] === 'cmd' && /exit 127/.test(err.message),
    );
  } finally {
    await fresh.close();
    await rt.remove(id, { force: true });
  }
});
