/**
 * The harness of real second and third machines (netns-engine.ts): two network namespaces, each
 * with its own dockerd, brought up concurrently; boxes there get the agent and exec through it
 * from this (the host's) process; the namespace reaches the host over its link, not the host's
 * loopback, and a link taken down is a partition. Needs root, like the rest of the harness.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readlinkSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo, Server } from 'node:net';
import { after, before, describe, test } from 'node:test';
import Docker from 'dockerode';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { startTestBox } from './boxes.js';
import { assertNoContainersLeft } from './cleanup.js';
import { testRunId } from './env.js';
import { netnsLayout, startNetnsEngine, stopNetnsEngine } from './netns-engine.js';
import type { NetnsEngine } from './netns-engine.js';
import { waitFor } from './wait.js';

const runId = testRunId('netns-engine');
/**
 * How long a connection attempt may go unanswered before the probes call the address unreachable:
 * over a veth a connection takes well under a millisecond; a dropped SYN never answers.
 */
const UNREACHABLE_AFTER_MS = 3_000;
const engines: NetnsEngine[] = [];
const runtimes = new Map<number, DockerRuntime>();
const servers: Server[] = [];

/** A TCP server that greets and hangs up; returns its port. */
async function greeter(host: string, greeting: string): Promise<number> {
  const server = createServer((s) => s.end(`${greeting}\n`));
  servers.push(server);
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, host, resolve));
  return (server.address() as AddressInfo).port;
}

/** Node's connect, run inside the namespace: `ok <greeting>` or `fail <code>`. */
const PROBE = `
const [host, port, ms] = process.argv.slice(1);
const s = require('net').connect(Number(port), host);
s.setTimeout(Number(ms), () => { console.log('fail ETIMEDOUT'); process.exit(0); });
let got = '';
s.on('data', (d) => (got += d)).on('end', () => { console.log('ok ' + got.trim()); process.exit(0); });
s.on('error', (e) => { console.log('fail ' + e.code); process.exit(0); });`;

async function probeFromNamespace(engine: NetnsEngine, host: string, port: number): Promise<string> {
  const child = engine.spawn(process.execPath, ['-e', PROBE, host, String(port), String(UNREACHABLE_AFTER_MS)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += String(d)));
  child.stderr!.on('data', (d: Buffer) => (err += String(d)));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  assert.equal(code, 0, `the probe in ${engine.netns} failed: ${err}`);
  return out.trim();
}

function netnsOf(pid: number): string {
  return readlinkSync(`/proc/${pid}/ns/net`);
}

const hostBridge = async () => (await new Docker({ socketPath: '/var/run/docker.sock' }).getNetwork('bridge').inspect()) as { Id: string; IPAM: unknown };

let hostBridgeBefore: unknown;

before(async () => {
  hostBridgeBefore = await hostBridge();
  // Left by an earlier run or a developer: this file measures a cold start of both.
  await Promise.all([stopNetnsEngine(1), stopNetnsEngine(2)]);
  const t = performance.now();
  engines.push(...(await Promise.all([startNetnsEngine(1), startNetnsEngine(2)])));
  console.log(`# engines 1 and 2 up concurrently in ${Math.round(performance.now() - t)} ms`);
  for (const e of engines) {
    console.log(
      `# ${e.netns}: engine up in ${e.start.engineMs} ms; images ${e.start.loaded.join(' ') || 'cached'} in ${e.start.loadMs} ms (${e.start.did.join('; ')})`,
    );
    runtimes.set(e.index, new DockerRuntime(e.engineAddr));
  }
});

after(async () => {
  for (const s of servers) s.close();
  try {
    for (const [i, rt] of runtimes) {
      if (existsSync(netnsLayout(i).socket)) await assertNoContainersLeft(rt, runId);
      await rt.close();
    }
  } finally {
    await Promise.all([stopNetnsEngine(1), stopNetnsEngine(2)]);
  }
});

describe(`network namespace engines (${runId})`, { timeout: 300_000 }, () => {
  test('each dockerd runs in its own namespace and leaves the host engine alone', async () => {
    const host = netnsOf(process.pid);
    for (const e of engines) {
      assert.equal(e.netns, `sbx-t${e.index}`);
      assert.equal(e.address, `10.231.${e.index}.2`);
      assert.equal(e.hostAddress, `10.231.${e.index}.1`);
      assert.equal(e.engineAddr, `unix:///run/sbx-t${e.index}/docker.sock`);
      assert.equal(netnsOf(e.pid), `net:[${statSync(`/run/netns/${e.netns}`).ino}]`, `dockerd ${e.pid} is not in ${e.netns}`);
      assert.notEqual(netnsOf(e.pid), host);
      assert.ok(e.start.did.includes(`started dockerd ${e.pid}`), e.start.did.join('; '));
      const info = await new Docker({ socketPath: netnsLayout(e.index).socket }).info();
      assert.equal(info.DockerRootDir, `/var/lib/sbx-test-nodes/${e.index}/docker`);
    }
    assert.deepEqual(await hostBridge(), hostBridgeBefore, "the host engine's docker0 changed");
  });

  for (const index of [1, 2]) {
    test(`engine ${index}: a box execs through its agent and reaches the host's link, not its loopback`, async () => {
      const e = engines.find((x) => x.index === index)!;
      const rt = runtimes.get(index)!;
      const linkPort = await greeter(e.hostAddress, `link-${index}`);
      const loopPort = await greeter('127.0.0.1', `loopback-${index}`);
      const box = await startTestBox(rt, runId);
      try {
        const info = await rt.inspect(box);
        assert.equal(info.execPath, 'agent', 'the box in the namespace engine serves its execs through the agent');
        const echo = await rt.exec(box, ['sh', '-c', 'echo hi from $(hostname)']);
        assert.equal(echo.exitCode, 0, echo.stderr);
        assert.match(echo.stdout, /^hi from /);
        const nc = (host: string, port: number) => rt.exec(box, ['sh', '-c', `nc -w 3 ${host} ${port} </dev/null`]);
        const viaLink = await nc(e.hostAddress, linkPort);
        assert.equal(viaLink.stdout.trim(), `link-${index}`, `the box reaches ${e.hostAddress}:${linkPort}: ${viaLink.stderr}`);
        for (const host of ['127.0.0.1', e.hostAddress]) {
          const r = await nc(host, loopPort);
          assert.notEqual(r.exitCode, 0, `the box reached the host's loopback service through ${host}: ${r.stdout}`);
          assert.doesNotMatch(r.stdout, /loopback/);
        }
      } finally {
        await rt.remove(box, { force: true });
      }
    });
  }

  test('the link: reachable while up, a partition while down, back when up again', async () => {
    const e = engines[0]!;
    const port = await greeter(e.hostAddress, 'partition');
    assert.equal(await probeFromNamespace(e, e.hostAddress, port), 'ok partition');
    // The host's loopback is not the namespace's: nothing of the host listens there.
    const loopPort = await greeter('127.0.0.1', 'loopback');
    assert.match(await probeFromNamespace(e, '127.0.0.1', loopPort), /^fail ECONNREFUSED$/);
    await e.linkDown();
    try {
      assert.match(await probeFromNamespace(e, e.hostAddress, port), /^fail (ETIMEDOUT|EHOSTUNREACH|ENETUNREACH)$/);
    } finally {
      await e.linkUp();
    }
    await waitFor(async () => (await probeFromNamespace(e, e.hostAddress, port)) === 'ok partition', { what: 'the link to come back' });
    // The host's route to the boxes came back with it: a box still execs through its agent.
    const rt = runtimes.get(e.index)!;
    const box = await startTestBox(rt, runId);
    try {
      assert.equal((await rt.inspect(box)).execPath, 'agent');
      assert.equal((await rt.exec(box, ['true'])).exitCode, 0);
    } finally {
      await rt.remove(box, { force: true });
    }
  });

  test('a second start while it runs is a no-op with a warm image cache', async () => {
    const first = engines[0]!;
    const again = await startNetnsEngine(1);
    assert.equal(again.pid, first.pid);
    assert.deepEqual(again.start.did, [], 'nothing to do');
    assert.deepEqual(again.start.loaded, [], 'every image was there with the same id');
    console.log(`# second start of ${again.netns}: ${again.start.loadMs} ms to check the images`);
  });

  test('leftovers of a killed run: a stale pid file, then a dockerd in an orphaned namespace', async () => {
    const e = engines[0]!;
    process.kill(e.pid, 'SIGKILL');
    await waitFor(() => !existsSync(`/proc/${e.pid}`), { what: `dockerd ${e.pid} to be gone` });
    const back = await startNetnsEngine(1);
    assert.notEqual(back.pid, e.pid);
    assert.ok(back.start.did.includes('removed stale /run/sbx-t1/docker.pid'), back.start.did.join('; '));
    assert.deepEqual(back.start.loaded, [], 'the data root kept the images');
    // The namespace deleted under a running dockerd (a half-finished stop): its veth goes with it, the dockerd stays.
    execFileSync('ip', ['netns', 'delete', e.netns], { env: { PATH: `${process.env['PATH']}:/usr/sbin:/sbin` } });
    const again = await startNetnsEngine(1);
    assert.ok(again.start.did.includes(`stopped dockerd ${back.pid} of an orphaned namespace (exited)`), again.start.did.join('; '));
    assert.ok(again.start.did.includes('created netns sbx-t1'), again.start.did.join('; '));
    assert.equal(netnsOf(again.pid), `net:[${statSync('/run/netns/sbx-t1').ino}]`);
    assert.equal(await probeFromNamespace(again, again.hostAddress, await greeter(again.hostAddress, 'again')), 'ok again');
    console.log(`# ${e.netns} after kill -9: ${back.start.engineMs} ms (${back.start.did.join('; ')}); orphaned: ${again.start.engineMs} ms`);
  });

  test('stop ends dockerd and removes the veth and the namespace, keeping the image cache', async () => {
    const e = engines.find((x) => x.index === 2)!;
    const rt = runtimes.get(2)!;
    await assertNoContainersLeft(rt, runId);
    await rt.close();
    runtimes.delete(2);
    const t = performance.now();
    await e.stop();
    console.log(`# ${e.netns} stopped in ${Math.round(performance.now() - t)} ms`);
    assert.equal(existsSync('/run/netns/sbx-t2'), false, 'the namespace is gone');
    assert.equal(existsSync('/sys/class/net/sbxt2-h'), false, 'the veth is gone');
    assert.equal(existsSync(`/proc/${e.pid}`), false, 'dockerd is gone');
    assert.equal(existsSync('/var/lib/sbx-test-nodes/2/docker/image'), true, 'the image cache stays');
    assert.deepEqual(await stopNetnsEngine(2), [], 'a second stop has nothing to do');
  });
});
