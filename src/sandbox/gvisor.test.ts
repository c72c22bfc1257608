/**
 * The sandbox behaviours on a gVisor pool (`ociRuntime: runsc`, testEnv.gvisorRuntime) through the
 * Manager: exec through the in-box agent and through the engine (buffered, stdin, streaming, a
 * terminal, timeout and cancel killing what the exec started), workspaces written from the box,
 * the host and another box, warm spares, and the memory, CPU and pids limits. Every box is asked
 * for its kernel first: a box that silently ran on runc would pass the rest. Attach, proxy and VNC
 * on gVisor: gvisor-attach.test.ts and src/server/gvisor-vnc-served.test.ts; what a gVisor box
 * cannot do to the host: gvisor-security.test.ts.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { capabilitiesOf } from '../runtime/types.js';
import { testEnv } from '../testing/env.js';
import { testManager } from '../testing/manager.js';
import { HANG_MS, waitFor, within } from '../testing/wait.js';
import type { SbxError } from '../errors.js';
import type { Box } from './box.js';
import type { PoolConfig } from './config.js';

const IMAGE = testEnv.baseImage;
const MiB = 1024 * 1024;
const gvisor = { addr: testEnv.engineAddr, ociRuntime: testEnv.gvisorRuntime };
const pools: PoolConfig[] = [
  { name: 'gvisor', ...gvisor },
  { name: 'gvisor-engine', ...gvisor, agent: false },
  { name: 'gvisor-warm', ...gvisor, warm: [{ image: IMAGE, size: 1 }] },
];
const { manager, dispose } = testManager('gvisor', pools);
const engine = new DockerRuntime(testEnv.engineAddr, { agent: false });

before(() => manager.start());
after(async () => {
  await engine.close();
  await dispose();
});

/** Fails unless the box runs on gVisor's kernel (runsc reports a 4.4/4.19 `-gvisor` release, never the host's). */
async function assertOnGvisor(box: Box): Promise<void> {
  const r = await box.exec(['uname', '-r']);
  assert.match(r.stdout, /gvisor/, `box ${box.id} of pool ${box.pool} is not on gVisor: uname -r says ${r.stdout}`);
}

/** The in-box processes whose command line starts with `needle` (busybox ps reads the box's /proc; the engine's `top` is not asked). */
async function inBox(box: Box, needle: string): Promise<string[]> {
  const ps = await box.exec(['ps', '-o', 'args'], { user: '0' });
  return ps.stdout.split('\n').filter((l) => l.startsWith(needle));
}

for (const [pool, execPath, parent] of [
  ['gvisor', 'agent', 1],
  ['gvisor-engine', 'engine', 0],
] as const) {
  describe(`exec on gVisor through the ${execPath}`, () => {
    let box: Box;
    before(async () => {
      box = await manager.create({ image: IMAGE, pool, owner: 'alice' });
      await assertOnGvisor(box);
    });
    after(() => box?.remove());

    test(`buffered: output, exit code, stdin, the box user, started by ${execPath === 'agent' ? 'the agent (PID 1)' : 'the engine (parent 0)'}`, async () => {
      assert.equal((await box.info()).execPath, execPath);
      const r = await box.exec(['sh', '-c', 'id -u; pwd; echo $SBX_SANDBOX_ID; cut -d" " -f4 /proc/$$/stat; echo oops >&2; exit 3']);
      assert.deepEqual([r.exitCode, r.stdout, r.stderr], [3, `1000\n/workspace\n${box.id}\n${parent}\n`, 'oops\n']);
      assert.equal((await box.exec(['wc', '-c'], { stdin: 'x'.repeat(100_000) })).stdout.trim(), '100000');
      assert.equal((await box.exec(['id', '-u'], { user: '0' })).stdout, '0\n');
    });

    test('streaming: stdin in, output out as it is written, EOF by stdin.end()', async () => {
      const s = await box.stream(['sh', '-c', 'while read l; do echo "got $l"; done; echo bye >&2']);
      let out = '';
      s.stdout.on('data', (c: Buffer) => (out += c.toString()));
      let err = '';
      s.stderr.on('data', (c: Buffer) => (err += c.toString()));
      s.stdin.write('one\n');
      // The second line goes in only once the first came back: output is not held to the end.
      await waitFor(() => out === 'got one\n', { what: 'the first line back' });
      s.stdin.end('two\n');
      assert.equal(await s.wait(), 0);
      assert.deepEqual([out, err], ['got one\ngot two\n', 'bye\n']);
    });

    test('a terminal: a tty, its size, a resize seen by stty', async (t) => {
      const s = await box.stream(['sh'], { tty: true, size: { cols: 91, rows: 27 } });
      let out = '';
      s.stdout.on('data', (c: Buffer) => (out += c.toString()));
      s.stdin.write('[ -t 0 ] && echo is-a-tty; stty size; tty\n');
      await waitFor(() => /27 91/.test(out), { what: `stty size 27 91 in ${JSON.stringify(out)}` });
      assert.match(out, /is-a-tty/);
      // Through the engine, runsc hands the exec a host terminal: isatty and its size work, but
      // ttyname (`tty`) finds no /dev/pts name for it and says 'not a tty'. The agent's is gVisor's own pty.
      await s.resize({ cols: 100, rows: 40 });
      s.stdin.write('stty size; exit 5\n');
      assert.equal(await s.wait(), 5);
      assert.match(out, /40 100/);
      t.diagnostic(`tty says: ${/\/dev\/pts\/\d+|not a tty/.exec(out)?.[0]}`);
    });

    test('timeout and cancel kill the exec and what it started (setsid, a double fork)', async () => {
      const escapes = 'setsid sleep 501 & (sleep 502 &) ; sleep 503';
      const timed = await box.exec(['sh', '-c', escapes], { timeoutMs: 1000 });
      assert.deepEqual([timed.exitCode, timed.timedOut], [137, true]);
      await waitFor(async () => (await inBox(box, 'sleep 50')).length === 0, { what: 'the timed-out exec and its escapes to die' });

      const s = await box.stream(['sh', '-c', escapes.replace(/50/g, '60')]);
      await waitFor(async () => (await inBox(box, 'sleep 60')).length === 3, { what: 'the three sleeps to run' });
      await s.cancel();
      await waitFor(async () => (await inBox(box, 'sleep 60')).length === 0, { what: 'the cancelled exec and its escapes to die' });
    });
  });
}

describe('a gVisor box stopped under an exec', () => {
  test('killed from outside (not by the Manager): the exec ends with 137 at once, as on runc, not by the Manager’s box_stopped', async () => {
    await using box = await manager.create({ image: IMAGE, pool: 'gvisor' });
    const ran = box.exec(['sleep', '1000']).then(
      (r) => `exit ${r.exitCode}`,
      (e: SbxError) => `error ${e.code} ${String(e.details?.['reason'])}`,
    );
    await waitFor(async () => (await inBox(box, 'sleep 1000')).length === 1, { what: 'the exec to run' });
    await engine.stop(box.containerId, { timeoutMs: 0 });
    assert.equal(await within(ran, 'the exec to end'), 'exit 137');
  });
});

describe('workspaces on gVisor', () => {
  test('written by the host, the box and a second box at once; each sees the others', async () => {
    const ws = await manager.workspaces.create({ name: 'gv-shared', owner: 'bob', node: 'gvisor' });
    const files = await manager.workspaces.fs(ws.id);
    await files.writeFile('from-host.txt', 'host\n');
    await using a = await manager.create({ image: IMAGE, owner: 'bob', workspaceId: ws.id });
    await using b = await manager.create({ image: IMAGE, owner: 'bob', workspaceId: ws.id });
    await assertOnGvisor(a);
    assert.equal((await a.exec(['cat', '/workspace/from-host.txt'])).stdout, 'host\n');
    const w = await a.exec([
      'sh',
      '-c',
      'echo from-a > /workspace/a.txt && mkdir -p /workspace/d && echo deep > /workspace/d/f && echo more >> /workspace/from-host.txt',
    ]);
    assert.equal(w.exitCode, 0, w.stderr);
    assert.equal(await files.readFile('a.txt', 'utf8'), 'from-a\n', 'the host reads what box a wrote');
    assert.equal(await files.readFile('d/f', 'utf8'), 'deep\n');
    assert.equal(await files.readFile('from-host.txt', 'utf8'), 'host\nmore\n');
    // gVisor caches file state in its sentry: another sandbox's writes (and the host's, made after
    // the box read the file) must show through all the same.
    assert.equal((await b.exec(['sh', '-c', 'cat /workspace/a.txt /workspace/from-host.txt'])).stdout, 'from-a\nhost\nmore\n');
    await b.exec(['sh', '-c', 'echo from-b > /workspace/b.txt; echo changed-by-b > /workspace/a.txt']);
    await files.writeFile('from-host.txt', 'rewritten by the host\n');
    assert.equal(
      (await a.exec(['sh', '-c', 'cat /workspace/b.txt /workspace/a.txt /workspace/from-host.txt'])).stdout,
      'from-b\nchanged-by-b\nrewritten by the host\n',
    );
    assert.equal(await files.readFile('a.txt', 'utf8'), 'changed-by-b\n');
  });
});

describe('warm spares on gVisor', () => {
  test('a claimed spare is a gVisor box that works at once, with the caller’s identity', async () => {
    await waitFor(async () => (await manager.warm()).find((w) => w.pool === 'gvisor-warm')?.ready === 1, { what: 'the gVisor spare to be ready' });
    await using box = await manager.create({ image: IMAGE, pool: 'gvisor-warm', owner: 'carol', env: { FOO: 'bar' } });
    const warm = (await manager.warm()).find((w) => w.pool === 'gvisor-warm')!;
    assert.equal(warm.hits, 1, 'the create was served by the spare');
    await assertOnGvisor(box);
    const r = await box.exec(['sh', '-c', 'id -u; echo $SBX_SANDBOX_ID $FOO']);
    assert.equal(r.stdout, `1000\n${box.id} bar\n`);
    assert.equal((await box.info()).execPath, 'agent');
    await waitFor(async () => (await manager.warm()).find((w) => w.pool === 'gvisor-warm')?.ready === 1, { what: 'the spare to be replaced' });
  });
});

/** The engine machine's cgroup v1 (cgroupfs) directory of a box's container for `controller`. */
function hostCgroup(containerId: string, controller: string): string {
  const pid = execFileSync('docker', ['inspect', '-f', '{{.State.Pid}}', containerId], { encoding: 'utf8' }).trim();
  const line = readFileSync(`/proc/${pid}/cgroup`, 'utf8')
    .split('\n')
    .find((l) => l.split(':')[1]?.split(',').includes(controller));
  assert.ok(line, `no ${controller} cgroup for pid ${pid}`);
  return join('/sys/fs/cgroup', controller, line.split(':')[2]!);
}

describe('limits on gVisor', () => {
  test('memory: a box whose command outgrows its limit stops, 137, reported as an OOM kill', async () => {
    const oom = async () => {
      const box = await manager.create({
        image: IMAGE,
        pool: 'gvisor',
        memory: 32 * MiB,
        cmd: ['sh', '-c', 'a=$(head -c 200000000 /dev/zero | tr "\\0" a); echo survived'],
      });
      try {
        await waitFor(async () => (await box.info()).status !== 'running', { what: 'the box to be killed' });
        return await box.info();
      } finally {
        await box.remove();
      }
    };
    let info = await oom();
    assert.deepEqual([info.status, info.exitCode], ['stopped', 137]);
    // Engine 20.10 sets OOMKilled from containerd's OOM event, which can lose the race with the exit
    // under load (seen in CI; on gVisor no agent line backs the flag, as on runc): one more try, not a pass.
    if (!info.oomKilled) info = await oom();
    assert.deepEqual([info.status, info.exitCode, info.oomKilled], ['stopped', 137, true]);
  });

  for (const pool of ['gvisor', 'gvisor-engine']) {
    test(`memory (${pool}): an exec that outgrows the limit ends (gVisor: the kernel kills the whole sandbox), a stream beside it too, and the box says OOM`, async () => {
      const oom = async () => {
        await using box = await manager.create({ image: IMAGE, pool, memory: 32 * MiB });
        await assertOnGvisor(box);
        const beside = await box.stream(['sleep', '1000']);
        // On runc the OOM killer takes the exec's process and the box lives on; on gVisor the host
        // kernel sees one process, the sentry, and kills it. Neither the agent's connection (gVisor's
        // network stack died with the sandbox) nor runsc's engine exec ever ends by itself: the
        // Manager ends the execs when the engine says the box stopped (ManagedBox.containerStopped).
        const ran = box.exec(['sh', '-c', 'a=$(head -c 200000000 /dev/zero | tr "\\0" a); echo survived']).then(
          (r) => `exit ${r.exitCode}`,
          (e: SbxError) => `error ${e.code} ${String(e.details?.['reason'])}`,
        );
        const outcome = await within(ran, 'the exec whose box was OOM-killed to end', HANG_MS);
        // The engine's exec may end by itself (a non-zero exit); the agent's only by the Manager.
        assert.match(outcome, pool === 'gvisor' ? /^error conflict box_stopped$/ : /^(error conflict box_stopped|exit [1-9]\d*)$/);
        const streamEnd = await within(
          beside.wait().then(String, (e: Error) => e.message),
          'the stream beside it to end',
        );
        assert.ok(streamEnd, 'the stream ended');
        await waitFor(async () => (await box.info()).status !== 'running', { what: 'the box to be seen stopped' });
        return { info: await box.info(), outcome };
      };
      let { info, outcome } = await oom();
      assert.equal(info.exitCode, 137, outcome);
      // Engine 20.10 sets OOMKilled from containerd's OOM event, which can lose the race with the
      // exit under load (seen in CI, as in the case above): one more try, not a pass.
      if (!info.oomKilled) ({ info, outcome } = await oom());
      assert.deepEqual([info.exitCode, info.oomKilled], [137, true], outcome);
    });
  }

  test('cpu: the sandbox is held to its quota on the host (cpus 0.5: 50 ms a 100 ms period, and it is throttled)', async () => {
    await using box = await manager.create({ image: IMAGE, pool: 'gvisor', cpus: 0.5 });
    await assertOnGvisor(box);
    const cg = hostCgroup(box.containerId, 'cpu');
    const quota = Number(readFileSync(join(cg, 'cpu.cfs_quota_us'), 'utf8')) / Number(readFileSync(join(cg, 'cpu.cfs_period_us'), 'utf8'));
    assert.equal(quota, 0.5);
    // The box's own view of its limit (gVisor's cgroupfs) says the same.
    const seen = (await box.exec(['sh', '-c', 'cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us'])).stdout
      .trim()
      .split('\n')
      .map(Number);
    assert.equal(seen[0]! / seen[1]!, 0.5);
    const throttled = () => Number(/nr_throttled (\d+)/.exec(readFileSync(join(cg, 'cpu.stat'), 'utf8'))?.[1]);
    const before = throttled();
    const burn = await box.stream(['sh', '-c', 'while :; do :; done']);
    try {
      await waitFor(() => throttled() > before + 3, { what: 'the burning sandbox to be throttled by its quota' });
    } finally {
      await burn.cancel();
    }
  });

  // gVisor cannot limit the box's processes one by one (src/runtime/docker/gvisor.ts): the host's
  // pids cgroup counts the sandbox's own tasks and about two per box process, and going over it ends
  // the sandbox. So the capability says so, a limit the sandbox could not start under is refused,
  // and a fork bomb ends its own box instead of spending the host's pids.
  test('pids: the limit bounds the whole sandbox (capabilitiesFor: pidsLimit false); a fork bomb past it ends the box', async () => {
    assert.equal(capabilitiesOf(engine, testEnv.gvisorRuntime).pidsLimit, false);
    assert.notEqual(capabilitiesOf(engine, undefined).pidsLimit, false, 'runc boxes keep their per-box pids limit');
    await assert.rejects(
      manager.create({ image: IMAGE, pool: 'gvisor', pidsLimit: 32 }),
      (e: SbxError) => e.code === 'invalid_argument' && /pids/i.test(e.message),
    );
    await using box = await manager.create({ image: IMAGE, pool: 'gvisor', pidsLimit: 64 });
    await assertOnGvisor(box);
    const bomb = box.exec(['sh', '-c', 'for i in $(seq 200); do sleep 600 & done; wait'], { timeoutMs: HANG_MS }).catch((e: unknown) => e);
    await waitFor(async () => (await box.info()).status === 'stopped', { what: 'the sandbox to end at its pids bound' });
    await bomb;
  });
});
