// A buffered exec's connection to the agent is kept for the box's next exec (agent-client.ts):
// the real agent binary on the loopback, behind a TCP relay that counts the host's connections
// and can cut or silence them.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { agentExec, agentExecStream, helloProof } from './agent-client.js';
import type { AgentTarget } from './agent-client.js';
import { AGENT_TOKEN_ENV } from './agent-protocol.js';
import type { ExecStreamOptions } from './types.js';
import { agentBinaryFor, defaultAgentDir } from './docker/agent-inject.js';
import { waitFor } from '../testing/wait.js';

const token = randomBytes(32).toString('hex');
let agent: ChildProcess;
let agentPort: number;
/** The relay's connections from the host, in order; `silent` ones forward nothing more. */
const relayed: Array<{ client: net.Socket; upstream: net.Socket; silent: boolean }> = [];
let relay: net.Server;
let target: AgentTarget;

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as net.AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

before(async () => {
  const binary = agentBinaryFor(defaultAgentDir(), process.arch === 'arm64' ? 'arm64' : 'amd64');
  assert.ok(binary, 'the agent binary (scripts/agent.sh)');
  agentPort = await freePort();
  agent = spawn(binary, ['init', '--listen', `127.0.0.1:${agentPort}`], { env: { PATH: process.env.PATH, [AGENT_TOKEN_ENV]: token }, stdio: 'ignore' });
  await waitFor(
    () =>
      new Promise<boolean>((resolve) => {
        const s = net.connect(agentPort, '127.0.0.1');
        s.once('connect', () => (s.destroy(), resolve(true))).once('error', () => resolve(false));
      }),
    { what: 'the agent listening' },
  );
  relay = net.createServer((client) => {
    const upstream = net.connect(agentPort, '127.0.0.1');
    const entry = { client, upstream, silent: false };
    relayed.push(entry);
    client.on('data', (d) => entry.silent || upstream.write(d));
    upstream.on('data', (d) => entry.silent || client.write(d));
    client.on('close', () => upstream.destroy()).on('error', () => upstream.destroy());
    upstream.on('close', () => client.destroy()).on('error', () => client.destroy());
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  const relayPort = (relay.address() as net.AddressInfo).port;
  // The proof is for the address the agent sees (its own); the host dials the relay.
  target = {
    containerId: 'local-agent',
    where: `127.0.0.1:${relayPort}`,
    proof: helloProof(token, `127.0.0.1:${agentPort}`),
    keepKey: `relay ${relayPort}`,
    connect: () => net.createConnection({ host: '127.0.0.1', port: relayPort }),
  };
});

after(async () => {
  for (const r of relayed) r.client.destroy();
  await new Promise((r) => relay.close(r));
  agent.kill('SIGKILL');
});

async function echo(word: string, opts: { stdin?: string } = {}): Promise<void> {
  const r = await agentExec(target, ['sh', '-c', opts.stdin !== undefined ? 'cat' : `echo ${word}`], opts);
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, opts.stdin ?? `${word}\n`);
}

test('execs one after another share one connection; one with stdin uses it and closes it after', async () => {
  const before = relayed.length;
  await echo('one');
  await echo('two');
  await echo('three');
  assert.equal(relayed.length - before, 1, 'one connection for three execs');
  await echo('', { stdin: 'fed' });
  assert.equal(relayed.length - before, 1);
  // Acknowledgements of its stdin could still be on the way after EXIT: not kept.
  await waitFor(() => relayed.at(-1)!.client.destroyed, { what: 'the stdin exec’s connection closed' });
  await echo('four');
  await echo('five');
  assert.equal(relayed.length - before, 2, 'a new connection, kept again');
});

test('a kept connection that the agent side closed, or that went silent, gives way to a new one: the exec runs once', async () => {
  await echo('warm');
  const kept = relayed.at(-1)!;
  kept.upstream.destroy();
  await waitFor(() => kept.client.destroyed, { what: 'the relay closed the kept connection' });
  const n = relayed.length;
  await echo('after-close');
  assert.equal(relayed.length, n + 1);
  // Silence (an address gone without a FIN): the HELLO sent with the START goes unanswered; after
  // a while a new connection is made, and the command runs once.
  relayed.at(-1)!.silent = true;
  const dir = mkdtempSync(join(tmpdir(), 'sbx-keep-'));
  try {
    const r = await agentExec(target, ['sh', '-c', `echo ran >> ${dir}/runs`]);
    assert.equal(r.exitCode, 0);
    assert.equal(relayed.length, n + 2);
    assert.equal(readFileSync(join(dir, 'runs'), 'utf8'), 'ran\n', 'the command ran once');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A stream of `script` read to its end: its stdout and exit code; `feed` is written to its stdin after it started. */
async function streamed(script: string, opts: ExecStreamOptions & { feed?: string; end?: boolean } = {}): Promise<{ stdout: string; exitCode: number }> {
  const { feed, end, ...rest } = opts;
  const s = await agentExecStream(target, ['sh', '-c', script], rest);
  const chunks: Buffer[] = [];
  s.stdout.on('data', (c: Buffer) => chunks.push(c));
  s.stderr.resume();
  if (feed !== undefined) s.stdin.write(feed);
  if (end) s.stdin.end();
  const exitCode = await s.wait();
  return { stdout: Buffer.concat(chunks).toString('utf8'), exitCode };
}

test('a stream that sent no stdin keeps its connection like a buffered exec; stdin, a terminal or a kill close it', async () => {
  await echo('warm');
  const before = relayed.length;
  assert.deepEqual(await streamed('echo s1'), { stdout: 's1\n', exitCode: 0 });
  assert.deepEqual(await streamed('echo s2; exit 3'), { stdout: 's2\n', exitCode: 3 });
  await echo('between');
  assert.equal(relayed.length, before, 'streams and execs on the kept connection');

  // Stdin went on it: its acknowledgements could come after EXIT, so it is closed.
  assert.deepEqual(await streamed('cat', { feed: 'fed', end: true }), { stdout: 'fed', exitCode: 0 });
  await waitFor(() => relayed.at(-1)!.client.destroyed, { what: 'the stdin stream’s connection closed' });
  // Only an end of input, no bytes: closed too (the agent closes the process's stdin).
  assert.deepEqual(await streamed('cat', { end: true }), { stdout: '', exitCode: 0 });
  const afterEof = relayed.length;
  await waitFor(() => relayed.at(-1)!.client.destroyed, { what: 'the end-of-input stream’s connection closed' });

  // A terminal: not kept.
  const tty = await streamed('echo t', { tty: true });
  assert.equal(tty.exitCode, 0);
  assert.match(tty.stdout, /^t\r?\n$/);
  await waitFor(() => relayed.at(-1)!.client.destroyed, { what: 'the terminal stream’s connection closed' });
  assert.equal(relayed.length, afterEof + 1);

  // Killed: not kept.
  const n = relayed.length;
  await echo('kept-again');
  const s = await agentExecStream(target, ['sleep', '30']);
  s.stdout.resume();
  s.stderr.resume();
  await s.cancel();
  assert.notEqual(await s.wait(), 0);
  await waitFor(() => relayed.at(-1)!.client.destroyed, { what: 'the killed stream’s connection closed' });
  await echo('after-kill');
  assert.equal(relayed.length, n + 2, 'a new connection after the killed stream');
});

test('after a kept stream exited, its stdin, resizes and signals go nowhere: the next exec on the connection is unaffected', async () => {
  await echo('warm');
  const before = relayed.length;
  const s = await agentExecStream(target, ['sh', '-c', 'echo done']);
  s.stdout.resume();
  s.stderr.resume();
  assert.equal(await s.wait(), 0);
  s.stdin.write('late');
  s.stdin.end();
  await s.resize({ cols: 10, rows: 10 });
  await s.signal!('SIGTERM');
  // The next exec takes the same connection: a stray frame from the stream would show in its
  // output or end the connection.
  assert.deepEqual(await streamed('cat; echo next', { end: true }), { stdout: 'next\n', exitCode: 0 });
  assert.equal(relayed.length, before);
  await echo('after-cat');
  assert.equal(relayed.length, before + 1, 'one new connection, after the stdin-fed cat closed its own');
});

test('a stream on a kept connection that went silent runs once on a new connection', async () => {
  await echo('warm');
  const n = relayed.length;
  relayed.at(-1)!.silent = true;
  const dir = mkdtempSync(join(tmpdir(), 'sbx-keep-'));
  try {
    assert.deepEqual(await streamed(`echo ran >> ${dir}/runs; echo ok`), { stdout: 'ok\n', exitCode: 0 });
    assert.equal(relayed.length, n + 1);
    assert.equal(readFileSync(join(dir, 'runs'), 'utf8'), 'ran\n', 'the command ran once');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
