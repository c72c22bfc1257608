/**
 * The in-box agent on a real engine: kills that leave nothing (env -i, setsid, double fork, a
 * FROM scratch image with one static binary and no shell), a real terminal, zombies, SIGTERM
 * with the agent as PID 1, heartbeats, recovery by a new runtime (and of an address that changed
 * behind its back), and the engine fallback. What a box cannot do to the host or its agent:
 * agent-host.test.ts.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { waitFor } from '../../testing/wait.js';
import type { ContainerSpec } from '../types.js';
import { AGENT_BIN, agentBinaryFor } from './agent-inject.js';
import { DockerRuntime } from './runtime.js';

const runId = testRunId('agent');
const rt = new DockerRuntime(testEnv.engineAddr);
const spec = (extra: Partial<ContainerSpec> = {}): ContainerSpec => ({
  image: testEnv.baseImage,
  // sbx's own box settings (src/sandbox/security.ts 'standard'), so the agent is tested as boxes run it.
  security: { noNewPrivileges: true, capDrop: ['ALL'], capAdd: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID', 'NET_BIND_SERVICE'] },
  ...extra,
  labels: { [TEST_LABEL]: runId, ...(extra.labels ?? {}) },
});
async function started(extra: Partial<ContainerSpec> = {}): Promise<string> {
  const id = await rt.create(spec(extra));
  await rt.start(id);
  return id;
}
/** The box's processes as the engine sees them (docker top), less the agent and the box's command. */
async function leftovers(id: string, needle: string): Promise<string[]> {
  return (await rt.processes(id)).map((p) => p.command).filter((c) => c.includes(needle));
}

/** A FROM scratch image holding only agent/testprogs/forker, built once per source hash. */
function scratchImage(): string {
  const src = resolve('agent/testprogs/forker/main.go');
  const hash = createHash('sha256').update(readFileSync(src)).digest('hex').slice(0, 12);
  const ref = `sbx-test-scratch:${hash}`;
  try {
    execFileSync('docker', ['image', 'inspect', ref], { stdio: 'ignore' });
    return ref;
  } catch {
    /* build it */
  }
  const ctx = mkdtempSync(join(tmpdir(), 'sbx-scratch-'));
  try {
    execFileSync('go', ['build', '-trimpath', '-ldflags=-s -w', '-o', join(ctx, 'forker'), './testprogs/forker'], {
      cwd: resolve('agent'),
      env: { ...process.env, CGO_ENABLED: '0', GOOS: 'linux' },
      stdio: 'inherit',
    });
    writeFileSync(join(ctx, 'Dockerfile'), 'FROM scratch\nCOPY forker /forker\n');
    execFileSync('docker', ['build', '-q', '--label', 'sbx.image=sbx-test-scratch', '-t', ref, ctx], {
      stdio: 'ignore',
      env: { ...process.env, DOCKER_BUILDKIT: '0' },
    });
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  return ref;
}

let box: string;
before(async () => {
  await rt.ping();
  box = await started();
});
after(async () => {
  await rt.remove(box, { force: true });
  await assertNoContainersLeft(rt, runId);
  await rt.close();
});

describe('the agent as PID 1', () => {
  test('serves the box: info says agent, PID 1 is the agent, the command its child as the box user', async () => {
    assert.equal((await rt.inspect(box)).execPath, 'agent');
    // PID 1 as the box sees it: `processes` lists by host pid, whose order a wrapped pid counter
    // (pid_max 32768 on a busy machine) can turn around.
    const pid1 = (await rt.exec(box, ['sh', '-c', 'tr "\\0" " " </proc/1/cmdline'])).stdout;
    assert.ok(pid1.startsWith(`${AGENT_BIN} init`), pid1);
    const ps = await rt.processes(box);
    assert.ok(ps.some((p) => p.command.includes('sleep 86400')));
    assert.equal((await rt.exec(box, ['id', '-u'])).stdout, '1000\n');
    assert.equal((await rt.exec(box, ['sh', '-c', 'echo $HOME'])).stdout, '/home/sandbox\n');
    assert.equal((await rt.exec(box, ['sh', '-c', 'id -u; echo $HOME'], { user: '0' })).stdout, '0\n/root\n');
    // The exec's own session and process group: it is their leader.
    const ids = (await rt.exec(box, ['sh', '-c', 'cut -d" " -f1,5,6 /proc/self/stat'])).stdout.trim().split(' ');
    assert.equal(ids[1], ids[0], 'process group');
    assert.equal(ids[2], ids[0], 'session');
  });

  test('SIGTERM on a box whose command ignores nothing stops it within the stop timeout, exit 128+15', async () => {
    // `sleep` as PID 1 would ignore SIGTERM and wait out the timeout; as the agent's child it dies.
    const id = await started({ cmd: ['sleep', '1000'] });
    await rt.stop(id, { timeoutMs: 5000 });
    // 143 (SIGTERM), not 137: the engine's SIGKILL at the end of the stop timeout never came.
    assert.equal((await rt.inspect(id)).exitCode, 143);
    await rt.remove(id, { force: true });
  });

  test('a box without a command waits, and stops at once', async () => {
    const id = await started({ image: scratchImage() });
    assert.equal((await rt.inspect(id)).running, true);
    await rt.stop(id, { timeoutMs: 5000 });
    // 0, not 137: the agent ended on SIGTERM, before the stop timeout's SIGKILL.
    assert.equal((await rt.inspect(id)).exitCode, 0);
    await rt.remove(id, { force: true });
  });

  test('orphans of the box command and of execs leave no zombies', async () => {
    const id = await started({ cmd: ['sh', '-c', '(sleep 0.2 &); (sleep 0.3 &); exec sleep 1000'] });
    await rt.exec(id, ['sh', '-c', '(sleep 0.2 &); (sleep 0.3 &); true']);
    // Until the four orphans have ended and been reaped: a zombie that stays is a hang here.
    const zombie = (c: string) => /defunct|<zombie>/.test(c) || c.startsWith('[');
    await waitFor(async () => (await rt.processes(id)).every((p) => !zombie(p.command) && !p.command.startsWith('sleep 0.')), {
      what: 'the orphans to end and be reaped (a zombie that stays fails here)',
    });
    await rt.remove(id, { force: true });
  });

  test('a box whose processes fill its pids limit keeps its agent: forks fail, the box and its execs live on', async () => {
    // The pids limit counts the agent's threads too. Before the agent kept a reserve of threads
    // (agent/threads.go), a new one it could not make was fatal to it, PID 1, and so to the box:
    // 2 to 4 boxes in 10 died here of a fork bomb beside a flood of execs ("runtime: failed to
    // create new OS thread ... fatal error: newosproc").
    for (let round = 0; round < 6; round++) {
      const id = await started({ pidsLimit: 20 });
      try {
        const bomb = rt.exec(id, ['sh', '-c', 'for i in $(seq 1 40); do sleep 300 & done; wait'], { timeoutMs: 10_000 });
        await waitFor(async () => (await leftovers(id, 'sleep 300')).length > 0, { what: `round ${round}: the bomb to start` });
        const flood = Array.from({ length: 16 }, async () => {
          // Refused now and then while the bomb holds the pids (EAGAIN): that is the limit working.
          for (let i = 0; i < 15; i++) await rt.exec(id, ['cat', '/etc/hostname'], { timeoutMs: 4000 }).catch(() => undefined);
        });
        const [r] = await Promise.all([bomb, ...flood]);
        assert.match(r.stderr, /fork|resource/i, `round ${round}: the bomb met the limit`);
        assert.equal((await rt.inspect(id)).running, true, `round ${round}: the box died under its own fork bomb`);
        // The bomb's shell gave up at its first failed fork; its sleeps hold the pids until killed
        // (from the host: a kill from inside needs a pid of its own).
        for (const p of await rt.processes(id)) if (p.command.includes('sleep 300')) process.kill(Number(p.pid), 'SIGKILL');
        await waitFor(async () => (await leftovers(id, 'sleep 300')).length === 0, { what: `round ${round}: the bomb's sleeps to be gone` });
        assert.equal((await rt.exec(id, ['echo', 'alive'])).stdout, 'alive\n');
      } finally {
        await rt.remove(id, { force: true });
      }
    }
  });
});

describe('kills leave no process of the exec', () => {
  const ESCAPES = "env -i sh -c 'sleep 401' & setsid sleep 402 & (sleep 403 &) ; (setsid sh -c 'sleep 404 & sleep 405' &) ; sleep 406";
  const allSixRunning = () => waitFor(async () => (await leftovers(box, 'sleep 40')).length === 6, { what: 'all six sleeps to run' });

  test('timeout: env -i, setsid, double fork and a daemonized double fork all die', async () => {
    const r = await rt.exec(box, ['sh', '-c', ESCAPES], { timeoutMs: 500 });
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, 137);
    assert.deepEqual(await leftovers(box, 'sleep 40'), []);
  });

  test('cancel: the same escapes die', async () => {
    const s = await rt.execStream(box, ['sh', '-c', ESCAPES]);
    await allSixRunning();
    await s.cancel();
    assert.equal(await s.wait(), 137);
    assert.deepEqual(await leftovers(box, 'sleep 40'), []);
  });

  test('abort: a buffered exec is cancelled and its escapes die', async () => {
    const ac = new AbortController();
    const running = rt.exec(box, ['sh', '-c', ESCAPES], { signal: ac.signal });
    await allSixRunning();
    ac.abort();
    await assert.rejects(running, (e: Error & { code?: string }) => e.code === 'cancelled');
    assert.deepEqual(await leftovers(box, 'sleep 40'), []);
  });

  test('a FROM scratch image with one static binary and no shell: timeout and cancel kill every escape', async () => {
    const id = await started({ image: scratchImage() });
    assert.equal((await rt.inspect(id)).execPath, 'agent');
    const r = await rt.exec(id, ['/forker', 'tree'], { timeoutMs: 3000 });
    assert.equal(r.timedOut, true);
    assert.equal(r.stdout, 'ready\n');
    assert.deepEqual(await leftovers(id, 'forker'), []);

    const s = await rt.execStream(id, ['/forker', 'tree']);
    assert.equal((await new Promise<Buffer>((res) => s.stdout.once('data', res))).toString(), 'ready\n');
    const alive = async () => (await leftovers(id, 'forker')).filter((c) => !c.includes('defunct'));
    await waitFor(async () => (await alive()).length >= 4, { what: 'the forker tree to start' });
    assert.equal((await alive()).length, 4, `the tree, a child, a setsid child, a detached grandchild: ${JSON.stringify(await alive())}`);
    await s.cancel();
    assert.equal(await s.wait(), 137);
    assert.deepEqual(await leftovers(id, 'forker'), []);
    await rt.remove(id, { force: true });
  });

  test('a host that dies (SIGKILL) mid-exec takes the exec with it', async () => {
    // The host side in a child process, killed while its exec runs: the agent sees the
    // connection close and kills the exec's tree.
    const dir = mkdtempSync(join(tmpdir(), 'sbx-agent-host-'));
    const file = join(dir, 'host.mts');
    writeFileSync(
      file,
      `import { DockerRuntime } from ${JSON.stringify(resolve('src/runtime/docker/runtime.ts'))};
const rt = new DockerRuntime(${JSON.stringify(testEnv.engineAddr)});
await rt.execStream(${JSON.stringify(box)}, ['sh', '-c', 'setsid sleep 407 & sleep 408']);
console.log('started');
setInterval(() => undefined, 1000);
`,
    );
    const child = spawn(process.execPath, ['--import', 'tsx', file], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      await new Promise<void>((res, rej) => {
        child.stdout.on('data', (c: Buffer) => c.toString().includes('started') && res());
        child.once('exit', (code) => rej(new Error(`host child exited ${code}`)));
      });
      await waitFor(async () => (await leftovers(box, 'sleep 40')).length === 2, { what: 'both sleeps of the exec to run' });
      child.kill('SIGKILL');
      await waitFor(async () => (await leftovers(box, 'sleep 40')).length === 0, { what: 'the exec to die with its host' });
    } finally {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('boxes the agent serves or not', () => {
  test('network none: no agent (the host could not dial it), the engine serves the box as its user', async () => {
    const id = await started({ network: 'none' });
    assert.equal((await rt.inspect(id)).execPath, 'engine');
    assert.equal((await rt.exec(id, ['cat', '/proc/net/dev'])).stdout.match(/^\s*[a-z0-9]+:/gm)?.length, 1, 'loopback only');
    assert.equal((await rt.exec(id, ['id', '-u'])).stdout, '1000\n');
    assert.doesNotMatch((await rt.processes(id))[0]?.command ?? '', /sbx-agent/);
    await rt.remove(id, { force: true });
  });

  test('a command that cannot start fails start, as without the agent; one that ends at once does not', async () => {
    const bad = await rt.create(spec({ cmd: ['/no/such/binary'] }));
    await assert.rejects(rt.start(bad), (e: Error & { code?: string }) => e.code === 'invalid_argument' && /no\/such\/binary/.test(e.message));
    await rt.remove(bad, { force: true });
    const quick = await rt.create(spec({ cmd: ['true'] }));
    await rt.start(quick);
    await rt.remove(quick, { force: true });
  });

  test('no capabilities to switch users or kill (the strict profile): no agent, the engine serves it, nothing added', async () => {
    const id = await started({ security: { noNewPrivileges: true, capDrop: ['ALL'], readOnlyRootfs: true } });
    assert.equal((await rt.inspect(id)).execPath, 'engine');
    assert.match((await rt.exec(id, ['grep', 'CapBnd', '/proc/self/status'])).stdout, /CapBnd:\s+0+\n/);
    await rt.remove(id, { force: true });
  });
});

describe('terminal', () => {
  test('an interactive shell under a real pty sees the resize in stty size', async () => {
    const s = await rt.execStream(box, ['sh'], { tty: true, size: { cols: 100, rows: 30 } });
    let text = '';
    s.stdout.on('data', (c: Buffer) => (text += c.toString()));
    s.stdin.write('stty size; tty\n');
    await waitFor(() => /\/dev\/pts\/\d+/.test(text), { what: `the first stty size and tty: ${JSON.stringify(text)}` });
    assert.match(text, /30 100/);
    await s.resize({ cols: 132, rows: 43 });
    // The resize reaches the pty beside stdin, not in order with it: ask until the new size shows.
    await waitFor(
      () => {
        if (/43 132/.test(text)) return true;
        s.stdin.write('stty size\n');
        return false;
      },
      { what: `the new size in stty size: ${JSON.stringify(text)}`, intervalMs: 100 },
    );
    s.stdin.write('exit 7\n');
    assert.equal(await s.wait(), 7);
  });
});

describe('pid and signals', () => {
  test("a stream knows its process's pid in the box; signal() reaches that process alone", async () => {
    // The shell traps TERM and reports it; its child sleep is not signalled and keeps running until the shell kills it.
    const script = 'sleep 60 & child=$!; trap "echo got-term; kill $child; exit 3" TERM; echo $$; wait';
    const s = await rt.execStream(box, ['sh', '-c', script]);
    s.stdin.end();
    let out = '';
    s.stdout.on('data', (c: Buffer) => (out += c.toString()));
    assert.ok(typeof s.pid === 'number' && s.pid > 1, `pid ${String(s.pid)}`);
    // The pid is printed once the trap is set: signalled before that, sh would die of the TERM.
    await waitFor(() => out.includes('\n'), { what: 'the shell to set its trap' });
    await s.signal!('SIGTERM');
    assert.equal(await s.wait(), 3);
    const lines = out.trim().split('\n');
    assert.equal(Number(lines[0]), s.pid);
    assert.equal(lines[1], 'got-term');
  });

  test('SIGKILL by signal() ends the process with 128+9', async () => {
    const s = await rt.execStream(box, ['sleep', '60']);
    await s.signal!('SIGKILL');
    assert.equal(await s.wait(), 137);
  });
});

describe('recovery and fallback', () => {
  test('a new runtime (a restarted Manager) reaches the agent of a box created before', async () => {
    const again = new DockerRuntime(testEnv.engineAddr);
    try {
      assert.equal((await again.inspect(box)).execPath, 'agent');
      const r = await again.exec(box, ['sh', '-c', 'id -u; cut -d" " -f4 /proc/self/stat']);
      // Its parent is PID 1: the agent started it, not the engine (whose execs have parent 0).
      assert.equal(r.stdout, '1000\n1\n');
    } finally {
      await again.close();
    }
  });

  test("the agent's answer at a start stands for that run: inspect does not ask it again (a runtime that did not see the start does)", async () => {
    const id = await started();
    const other = new DockerRuntime(testEnv.engineAddr);
    try {
      // Frozen behind both runtimes' backs: the kernel still takes a connection, the agent answers nothing.
      await rt.pause(id);
      assert.equal((await rt.inspect(id)).execPath, 'agent', 'the runtime that started the box saw its agent answer at that start');
      assert.equal((await other.inspect(id)).execPath, 'engine', 'a runtime that did not see the start asks the agent, which does not answer');
    } finally {
      await rt.unpause(id).catch(() => undefined);
      await rt.remove(id, { force: true });
      await other.close();
    }
  });

  test('the agent turned off: the engine path, as the box user; boxes created without it say engine', async () => {
    const off = new DockerRuntime(testEnv.engineAddr, { agent: false });
    try {
      assert.equal((await off.inspect(box)).execPath, 'engine');
      const r = await off.exec(box, ['sh', '-c', 'id -u; cut -d" " -f4 /proc/self/stat']);
      assert.equal(r.stdout, '1000\n0\n', 'engine exec, box user');
      const plain = await off.create(spec());
      await off.start(plain);
      assert.equal((await off.inspect(plain)).execPath, 'engine');
      assert.equal((await rt.inspect(plain)).execPath, 'engine', 'a box without an agent is served by the engine on any runtime');
      assert.equal((await rt.exec(plain, ['id', '-u'])).stdout, '1000\n');
      await off.remove(plain, { force: true });
    } finally {
      await off.close();
    }
  });

  test('no agent binary for the image (a foreign architecture): the box is created without it and served by the engine', async () => {
    assert.equal(agentBinaryFor(resolve('.build/agent'), 's390x'), undefined);
    assert.ok(agentBinaryFor(resolve('.build/agent'), 'amd64'));
    const empty = mkdtempSync(join(tmpdir(), 'sbx-no-agent-'));
    const noBin = new DockerRuntime(testEnv.engineAddr, { agentDir: empty });
    try {
      const id = await noBin.create(spec());
      await noBin.start(id);
      assert.equal((await noBin.inspect(id)).execPath, 'engine');
      assert.equal((await noBin.exec(id, ['echo', 'engine'])).stdout, 'engine\n');
      await noBin.remove(id, { force: true });
    } finally {
      await noBin.close();
      rmSync(empty, { recursive: true, force: true });
    }
  });

  test('a box that restarts gets its agent back, at the address of its new start', async () => {
    const id = await started();
    await rt.stop(id, { timeoutMs: 2000 });
    await rt.start(id);
    assert.equal((await rt.exec(id, ['echo', 'back'])).stdout, 'back\n');
    assert.equal((await rt.inspect(id)).execPath, 'agent');
    await rt.remove(id, { force: true });
  });

  test("a box whose address changed behind the runtime's back, another box's agent now at the old one: the exec reaches the right box", async () => {
    // A bridge network of the test's own, where addresses can be chosen.
    const net = `sbx-test-${runId}`;
    const subnet = `10.231.${Math.floor(Math.random() * 250)}`;
    execFileSync('docker', ['network', 'create', '--label', `${TEST_LABEL}=${runId}`, '--subnet', `${subnet}.0/24`, net], { stdio: 'ignore' });
    const move = (id: string, ip: string) => {
      execFileSync('docker', ['network', 'disconnect', net, id], { stdio: 'ignore' });
      execFileSync('docker', ['network', 'connect', '--ip', ip, net, id], { stdio: 'ignore' });
    };
    const ids: string[] = [];
    try {
      ids.push(await started({ network: net }));
      const [a] = ids as [string];
      assert.equal((await rt.exec(a, ['hostname'])).stdout, `${a.slice(0, 12)}\n`);
      const old = JSON.parse(execFileSync('docker', ['inspect', '-f', `{{json .NetworkSettings.Networks}}`, a], { encoding: 'utf8' })) as Record<
        string,
        { IPAddress: string }
      >;
      move(a, `${subnet}.200`);
      ids.push(await started({ network: net }));
      const b = ids[1]!;
      move(b, old[net]!.IPAddress);
      assert.equal((await rt.exec(b, ['hostname'])).stdout, `${b.slice(0, 12)}\n`);
      // The runtime still knows a's old address, where b's agent answers now and refuses a's token.
      const r = await rt.exec(a, ['sh', '-c', 'hostname; cut -d" " -f4 /proc/self/stat']);
      assert.equal(r.stdout, `${a.slice(0, 12)}\n1\n`, "a's exec ran in a, through its agent (parent pid 1)");
      assert.equal((await rt.inspect(a)).execPath, 'agent');
    } finally {
      for (const id of ids) await rt.remove(id, { force: true });
      execFileSync('docker', ['network', 'rm', net], { stdio: 'ignore' });
    }
  });
});

describe('heartbeats', () => {
  let server: http.Server;
  const beats: Array<{ at: number; path: string; auth: string | undefined; body: { active: boolean; processCount: number } }> = [];
  let gateway = '';

  before(async () => {
    const route = (await rt.exec(box, ['cat', '/proc/net/route'])).stdout;
    const line = route.split('\n').find((l) => l.split(/\s+/)[1] === '00000000')!;
    const hex = line.split(/\s+/)[2]!;
    gateway = [3, 2, 1, 0].map((i) => parseInt(hex.slice(i * 2, i * 2 + 2), 16)).join('.');
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        beats.push({
          at: Date.now(),
          path: req.url ?? '',
          auth: req.headers.authorization,
          body: JSON.parse(body) as { active: boolean; processCount: number },
        });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((res) => server.listen(0, gateway, res));
    // The host's ports are closed to boxes but those declared, as the Manager declares SBX_API_URL's.
    await rt.allowHostEndpoints([{ address: gateway, port: (server.address() as AddressInfo).port }]);
  });
  after(() => new Promise<void>((res) => server.close(() => res())));

  test('sent every interval while user processes exist, silent when idle', async () => {
    const port = (server.address() as AddressInfo).port;
    const id = await started({
      env: { SBX_API_URL: `http://${gateway}:${port}`, SBX_TOKEN: 'box-token-1', SBX_SANDBOX_ID: 'hb-box', SBX_HEARTBEAT_INTERVAL_MS: '200' },
    });
    await sleep(1200);
    assert.equal(beats.length, 0, 'an idle box (only its command and its sleep) sends nothing');
    // Beats, not a count per second: a loaded machine delays the agent's timer.
    const s = await rt.execStream(id, ['sleep', '60']);
    await waitFor(() => beats.length >= 3, { what: 'heartbeats while an exec runs' });
    await s.cancel();
    assert.equal(await s.wait(), 137);
    const during = beats.length;
    for (const b of beats) {
      assert.equal(b.path, '/v1/boxes/hb-box/heartbeat');
      assert.equal(b.auth, 'Bearer box-token-1');
      assert.equal(b.body.active, true);
      assert.ok(b.body.processCount >= 1, JSON.stringify(b.body));
    }
    await sleep(800);
    assert.ok(beats.length <= during + 1, 'silent again once idle');
    await rt.remove(id, { force: true });
  });

  test('setBoxEnv hands a running box its identity: later execs see it, the heartbeat speaks for it', async () => {
    const port = (server.address() as AddressInfo).port;
    // A box started with no identity, as a warm spare is.
    const id = await started({ env: { SBX_HEARTBEAT_INTERVAL_MS: '200' } });
    assert.equal((await rt.exec(id, ['sh', '-c', 'echo "[$SBX_SANDBOX_ID]"'])).stdout, '[]\n');
    const from = beats.length;
    const identity = { SBX_API_URL: `http://${gateway}:${port}`, SBX_TOKEN: 'claimed-token', SBX_SANDBOX_ID: 'claimed-box' };
    assert.equal(await rt.setBoxEnv(id, identity), true, 'the agent took the variables');
    const r = await rt.exec(id, ['sh', '-c', 'echo "[$SBX_SANDBOX_ID] [$SBX_TOKEN]"']);
    assert.equal(r.stdout, '[claimed-box] [claimed-token]\n', 'an exec that passes no env gets them from the agent');
    const s = await rt.execStream(id, ['sleep', '60']);
    await waitFor(() => beats.length - from >= 2, { what: 'heartbeats of the claimed box while an exec runs' });
    await s.cancel();
    const mine = beats.slice(from);
    for (const b of mine) assert.deepEqual([b.path, b.auth], ['/v1/boxes/claimed-box/heartbeat', 'Bearer claimed-token']);
    assert.equal((await rt.exec(id, ['sh', '-c', 'echo $SBX_TOKEN'], { env: { SBX_TOKEN: 'own' } })).stdout, 'own\n', 'an exec’s own env still wins');
    await assert.rejects(rt.setBoxEnv(id, { 'A=B': 'x' }), 'a name with = is refused by the agent');
    await rt.remove(id, { force: true });
    const engineOnly = new DockerRuntime(testEnv.engineAddr, { agent: false });
    const plain = await engineOnly.create(spec());
    await engineOnly.start(plain);
    assert.equal(await engineOnly.setBoxEnv(plain, identity), false, 'no agent: false, the caller passes the env itself');
    await engineOnly.remove(plain, { force: true });
    await engineOnly.close();
  });
});
