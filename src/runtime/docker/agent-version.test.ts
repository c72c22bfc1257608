/**
 * The version handshake end to end: a box whose agent speaks no protocol version this host
 * offers (an agent from a newer or older sbx) is refused clearly and served by the engine's exec,
 * with the same results, and `inspect` says so. The "old agent" is a socket in the box's real
 * agent directory that answers the hello as agent/proto.go does for an unknown version.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { rename } from 'node:fs/promises';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { AGENT_DIR, AGENT_SOCKET } from './agent-inject.js';
import { F, HOST_PROTOCOL_VERSIONS, frame } from '../agent-protocol.js';
import { DockerRuntime } from './runtime.js';

const runId = testRunId('agent-version');
const stateDir = mkdtempSync(join(tmpdir(), 'sbx-agent-version-'));
const rt = new DockerRuntime(testEnv.engineAddr, { stateDir });

after(async () => {
  await assertNoContainersLeft(rt, runId);
  await rt.close();
  rmSync(stateDir, { recursive: true, force: true });
});

/** Listens at `path` and answers every hello with the agent's version refusal. */
async function oldAgentAt(path: string): Promise<{ connections: () => number; hellos: () => unknown[]; close: () => Promise<void> }> {
  const hellos: unknown[] = [];
  let connections = 0;
  const server = net.createServer((socket) => {
    connections++;
    socket.once('data', (chunk: Buffer) => {
      // The first frame is the host's hello: type, 4-byte length, JSON.
      if (chunk[0] === F.hello) hellos.push(JSON.parse(chunk.subarray(5, 5 + chunk.readUInt32BE(1)).toString('utf8')));
      socket.end(frame(F.error, { code: 'version', message: 'this agent speaks protocol 99; the host offered [1]' }));
    });
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(path, resolve));
  return { connections: () => connections, hellos: () => hellos, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

test('an agent that refuses the host’s protocol versions: execs go through the engine, results unchanged, inspect says engine', async () => {
  const id = await rt.create({ image: testEnv.baseImage, labels: { [TEST_LABEL]: runId } });
  let old: Awaited<ReturnType<typeof oldAgentAt>> | undefined;
  const fresh = new DockerRuntime(testEnv.engineAddr, { stateDir });
  try {
    await rt.start(id);
    assert.equal((await rt.inspect(id)).execPath, 'agent', 'the box starts with its agent');
    assert.equal((await rt.exec(id, ['sh', '-c', 'echo via-agent; id -u'])).stdout, 'via-agent\n1000\n');

    // Swap the real agent's socket for one that refuses this host, as an incompatible agent would.
    const socket = join(socketDirOf(id), AGENT_SOCKET);
    await rename(socket, `${socket}.real`);
    old = await oldAgentAt(socket);

    // A runtime that has not spoken to this box yet (a restarted Manager) meets the refusal.
    const r = await fresh.exec(id, ['sh', '-c', 'echo via-engine; id -u; echo err >&2; exit 3']);
    assert.deepEqual([r.stdout, r.stderr, r.exitCode], ['via-engine\n1000\n', 'err\n', 3], 'the engine path serves it, as the box user');
    assert.equal(old.connections(), 1, 'one hello, refused');
    assert.deepEqual(old.hellos(), [{ versions: HOST_PROTOCOL_VERSIONS, client: 'sbx' }], 'the host offered its versions');

    const s = await fresh.execStream(id, ['cat']);
    s.stdin.end('streamed\n');
    let out = '';
    for await (const chunk of s.stdout) out += String(chunk);
    assert.deepEqual([out, await s.wait()], ['streamed\n', 0]);
    assert.equal(old.connections(), 1, 'the refusal is remembered: no new connection per exec');
    assert.equal((await fresh.inspect(id)).execPath, 'engine', 'inspect says the engine path serves the box');
  } finally {
    await old?.close();
    await fresh.close();
    await rt.remove(id, { force: true });
  }
});

/** The host directory mounted at the box's agent directory. */
function socketDirOf(id: string): string {
  const mounts = JSON.parse(execFileSync('docker', ['inspect', '-f', '{{json .Mounts}}', id], { encoding: 'utf8' })) as Array<{
    Source: string;
    Destination: string;
  }>;
  const mount = mounts.find((m) => m.Destination === AGENT_DIR);
  assert.ok(mount, 'the box mounts its agent directory');
  return mount.Source;
}
