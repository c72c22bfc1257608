/**
 * The memory-releasing pause on gVisor (real engine, runsc): `pause({ memory: 'release' })`
 * checkpoints the box to disk and ends its container, so no process of it is left on the host; a
 * use restores it, and a process that holds a random nonce only in its memory reports the same
 * nonce and goes on counting from where it stopped; its files and workspace are there; the agent
 * serves the first exec; a restarted Manager finds the box paused, not stopped; a failed or
 * interrupted checkpoint (an engine error, a Manager SIGKILLed around the engine's call) leaves the
 * box running or paused, never lost; a pool's pauseMemory: release applies to idle pauses; a runc
 * pool refuses.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { Runtime } from '../runtime/types.js';
import { ManualClock } from '../testing/clock.js';
import { TEST_LABEL, testEnv } from '../testing/env.js';
import { MEMORY_COUNTER, counterReport, hostProcessesOf } from '../testing/memory-counter.js';
import { waitFor } from '../testing/wait.js';
import type { LocalBox } from './box.js';
import type { PoolConfig } from './config.js';
import { Manager } from './manager.js';

const IMAGE = testEnv.baseImage;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-checkpoint-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const managers: Manager[] = [];
let seq = 0;

function newManager(opts: { name?: string; runtime?: Runtime; pools?: Partial<PoolConfig>; clock?: ManualClock } = {}): Manager {
  const pools: PoolConfig[] = [
    opts.runtime
      ? { name: 'gvisor', runtime: opts.runtime, ociRuntime: testEnv.gvisorRuntime, ...opts.pools }
      : { name: 'gvisor', addr: testEnv.engineAddr, ociRuntime: testEnv.gvisorRuntime, ...opts.pools },
    { name: 'runc', addr: testEnv.engineAddr, ...opts.pools },
  ];
  const m = new Manager({
    name: opts.name ?? `ckpt${++seq}-${process.pid}`,
    pools,
    dataDir,
    cleanupIntervalMs: 0,
    logger: pino({ level: 'silent' }),
    ...(opts.clock ? { clock: opts.clock.now } : {}),
  });
  managers.push(m);
  return m;
}

after(async () => {
  await Promise.all(managers.map((m) => m.close()));
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** The engine with its checkpoint call replaced (failure injection). */
function withCheckpoint(checkpoint: (id: string, name: string) => Promise<void>): Runtime {
  return new Proxy(engine, {
    get(rt, key) {
      if (key === 'checkpoint') return checkpoint;
      const v = Reflect.get(rt, key, rt) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(rt) : v;
    },
  });
}

async function counterBox(m: Manager, extra: Omit<Parameters<Manager['create']>[0], 'image'> = {}): Promise<LocalBox> {
  return (await m.create({ image: IMAGE, pool: 'gvisor', cmd: MEMORY_COUNTER, ...extra })) as LocalBox;
}

describe('pause with memory released (gVisor)', () => {
  test('the box is checkpointed and its host processes end; a use restores it: same nonce, counting on, files and workspace there, agent exec', async () => {
    const m = newManager();
    await m.start();
    const ws = await m.workspaces.create({ name: 'kept', owner: 'alice', node: 'gvisor' });
    await (await m.workspaces.fs(ws.id)).writeFile('before.txt', 'written before the pause\n');
    const box = await counterBox(m, { owner: 'alice', workspaceId: ws.id });
    try {
      const r = await box.exec(['sh', '-c', 'head -c 65536 /dev/urandom > /tmp/blob && sha256sum /tmp/blob']);
      assert.equal(r.exitCode, 0, r.stderr);
      const before = await counterReport(box);
      const running = hostProcessesOf(box.containerId);
      assert.ok(running.count > 0 && running.rssKiB > 0, 'a running gVisor box has host processes');

      await box.pause({ memory: 'release' });
      assert.equal(box.status, 'paused');
      const info = await box.info();
      assert.equal(info.status, 'paused', 'an exited container with its checkpoint reads paused, not stopped');
      assert.equal(info.pausedMemory, 'released');
      assert.equal((await engine.inspect(box.containerId)).status, 'exited');
      assert.deepEqual(hostProcessesOf(box.containerId), { count: 0, rssKiB: 0 }, 'no process of the box is left on the host');
      const stats = await box.stats();
      assert.equal(stats.memoryBytes, 0);
      assert.equal(stats.pids, 0);
      // A plain pause of a released box keeps it released.
      await box.pause();
      assert.equal((await box.info()).pausedMemory, 'released');

      const after = await counterReport(box);
      assert.equal(after.nonce, before.nonce, 'the process kept its memory: the same nonce');
      assert.ok(after.count >= before.count, `counting on from ${before.count}, not from 0 (now ${after.count})`);
      const back = await box.info();
      assert.equal(back.status, 'running');
      assert.equal(back.pausedMemory, null);
      assert.equal(back.execPath, 'agent', 'the in-box agent serves the box after the restore');
      assert.equal((await box.exec(['sha256sum', '/tmp/blob'])).stdout, r.stdout, 'a file written before is there, byte for byte');
      const wsRead = await box.exec(['cat', `${box.mountPath}/before.txt`]);
      assert.equal(wsRead.stdout, 'written before the pause\n');
      assert.equal((await box.exec(['sh', '-c', `echo after > ${box.mountPath}/after.txt`])).exitCode, 0);
      assert.equal(await (await m.workspaces.fs(ws.id)).readFile('after.txt', 'utf8'), 'after\n', 'the workspace mount works after the restore');
      assert.deepEqual(await engine.checkpoints!(box.containerId), [], 'the checkpoint is deleted once the box runs again');
    } finally {
      await box.remove();
    }
  });

  test('a box whose address another container took meanwhile is restored at a new one: its processes, and its agent there', async () => {
    const m = newManager();
    await m.start();
    const box = await counterBox(m);
    let squatter = '';
    try {
      const before = await counterReport(box);
      const docker = (args: string[]) => execFileSync('docker', args, { encoding: 'utf8' }).trim();
      const [network, address] = docker([
        'inspect',
        '-f',
        '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{$v.IPAddress}}{{end}}',
        box.containerId,
      ]).split(' ');
      await box.pause({ memory: 'release' });
      // The engine frees the address a moment after the container ended: asked until it has.
      squatter = await waitFor(
        () => {
          try {
            return docker(['run', '-d', '--rm', '--label', `${TEST_LABEL}=checkpoint`, '--network', network!, '--ip', address!, IMAGE, 'sleep', '300']);
          } catch (err) {
            if (!/already in use|address.*(allocated|in use)/i.test(String(err))) throw err;
            return undefined;
          }
        },
        { what: "the engine to free the released box's address", intervalMs: 50 },
      );
      assert.equal((await counterReport(box)).nonce, before.nonce);
      const now = docker(['inspect', '-f', '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}', box.containerId]);
      assert.notEqual(now, address, 'the engine gave the restored box another address');
      assert.match(
        (await box.exec(['sh', '-c', 'ip addr'])).stdout,
        new RegExp(`inet ${now.replace(/\./g, '\\.')}/`),
        "gVisor's netstack took the new address",
      );
      assert.equal((await box.info()).execPath, 'agent');
    } finally {
      if (squatter) execFileSync('docker', ['rm', '-f', squatter]);
      await box.remove();
    }
  });

  test('resume() restores; stop() of a released box ends it (its checkpoint goes) and start() runs its command anew; archive() ends it too, files kept', async () => {
    const m = newManager();
    await m.start();
    const box = await counterBox(m);
    try {
      const before = await counterReport(box);
      await box.pause({ memory: 'release' });
      await box.resume();
      assert.equal(box.status, 'running');
      assert.equal((await counterReport(box)).nonce, before.nonce);
      await box.pause({ memory: 'release' });
      await box.stop();
      assert.equal(box.status, 'stopped');
      assert.deepEqual(await engine.checkpoints!(box.containerId), []);
      await box.start();
      const restarted = (await counterReport(box)).nonce;
      assert.notEqual(restarted, before.nonce, 'a stopped box starts its command anew');
      // An archive of a released box ends its processes, as every archive does; its files stay.
      assert.equal((await box.exec(['sh', '-c', 'echo kept > "$HOME/kept"'])).exitCode, 0);
      await box.pause({ memory: 'release' });
      await box.archive();
      assert.equal(box.status, 'archived');
      assert.equal((await box.exec(['sh', '-c', 'cat "$HOME/kept"'])).stdout, 'kept\n');
      assert.notEqual((await counterReport(box)).nonce, restarted, 'restored from the archive: its command anew');
    } finally {
      await box.remove();
    }
  });

  test('a restarted Manager finds the released box paused (not stopped, not started afresh) and restores it on use', async () => {
    const name = `ckpt-restart-${process.pid}`;
    const first = newManager({ name });
    await first.start();
    const box = await counterBox(first);
    try {
      const before = await counterReport(box);
      await box.pause({ memory: 'release' });
      await first.close();

      const second = newManager({ name });
      await second.start();
      const again = (await second.get(box.id)) as LocalBox;
      const info = await again.info();
      assert.equal(info.status, 'paused');
      assert.equal(info.pausedMemory, 'released');
      assert.equal((await engine.inspect(box.containerId)).status, 'exited', 'recovery did not start it behind the caller');
      // A cleanup pass (reconcile) keeps it paused too.
      await second.cleanup();
      assert.equal((await second.get(box.id)).status, 'paused');
      assert.equal((await counterReport(again)).nonce, before.nonce);
    } finally {
      await engine.remove(box.containerId, { force: true }).catch(() => undefined);
    }
  });

  test('an engine error in the checkpoint leaves the box running (nothing taken) or paused (the checkpoint was whole)', async () => {
    for (const when of ['before', 'after'] as const) {
      const failing = withCheckpoint(async (id, name) => {
        if (when === 'after') await engine.checkpoint!(id, name);
        throw Object.assign(new Error('injected engine failure'), { code: 'EINJECTED' });
      });
      const m = newManager({ runtime: failing });
      await m.start();
      const box = await counterBox(m);
      try {
        const before = await counterReport(box);
        if (when === 'before') {
          await assert.rejects(box.pause({ memory: 'release' }), /injected engine failure/);
          assert.equal(box.status, 'running');
          assert.equal((await box.info()).pausedMemory, null);
        } else {
          await box.pause({ memory: 'release' });
          assert.equal((await box.info()).pausedMemory, 'released');
        }
        assert.equal((await counterReport(box)).nonce, before.nonce, `${when}: the box's processes are kept`);
      } finally {
        await box.remove();
      }
    }
  });

  describe('a Manager SIGKILLed around the engine call leaves the box paused (released) or running, its processes kept', () => {
    const child = fileURLToPath(new URL('../testing/crash-checkpoint-child.ts', import.meta.url));
    const expected: Record<string, 'released' | 'running'> = {
      'checkpoint:before': 'running',
      'checkpoint:after': 'released',
      'restore:before': 'released',
      'restore:after': 'running',
    };
    for (const [step, outcome] of Object.entries(expected)) {
      test(`killed ${step.split(':')[1]} the engine's ${step.split(':')[0]}: ${outcome}`, async () => {
        const name = `ckk-${step.replace(':', '-')}-${process.pid}`;
        const first = newManager({ name });
        await first.start();
        const box = await counterBox(first);
        try {
          const before = await counterReport(box);
          if (step.startsWith('restore')) await box.pause({ memory: 'release' });
          await first.close();

          const r = spawnSync(process.execPath, ['--import', 'tsx', child, name, dataDir, box.id, step], { encoding: 'utf8', timeout: 120_000 });
          assert.equal(r.signal, 'SIGKILL', `the child should have died ${step}: ${r.stderr}`);

          const second = newManager({ name });
          await second.start();
          const found = (await second.get(box.id)) as LocalBox;
          const info = await found.info();
          if (outcome === 'released') {
            assert.deepEqual([info.status, info.pausedMemory], ['paused', 'released']);
            assert.equal((await engine.inspect(box.containerId)).status, 'exited');
          } else {
            assert.equal(info.status, 'running');
            if (step.startsWith('restore')) assert.deepEqual(await engine.checkpoints!(box.containerId), [], "the restored box's checkpoint is deleted");
          }
          assert.equal((await counterReport(found)).nonce, before.nonce, 'the same processes');
        } finally {
          await engine.remove(box.containerId, { force: true }).catch(() => undefined);
        }
      });
    }
  });

  test("a pool with pauseMemory: 'release' releases the memory of an idle pause on gVisor and freezes a runc box instead", async () => {
    const clock = new ManualClock(Date.now());
    const m = newManager({ pools: { pauseMemory: 'release', idlePauseMs: 60_000 }, clock });
    await m.start();
    assert.equal((await m.pools()).find((p) => p.name === 'gvisor')?.pauseMemory, 'release');
    const gvisor = await counterBox(m);
    const runc = (await m.create({ image: IMAGE, pool: 'runc' })) as LocalBox;
    try {
      const before = await counterReport(gvisor);
      assert.equal((await runc.exec(['true'])).exitCode, 0);
      clock.advance(61_000);
      await m.cleanup();
      assert.equal((await gvisor.info()).pausedMemory, 'released', 'the idle pause released the gVisor box');
      assert.equal((await engine.inspect(gvisor.containerId)).status, 'exited');
      const r = await runc.info();
      assert.equal(r.status, 'paused');
      assert.equal(r.pausedMemory, 'held', 'a runc box cannot be checkpointed: frozen');
      assert.equal((await counterReport(gvisor)).nonce, before.nonce);
    } finally {
      await gvisor.remove();
      await runc.remove();
    }
  });

  test('a runc pool refuses a memory-releasing pause (not_available) and the box keeps running; bad options are invalid_argument', async () => {
    const m = newManager();
    await m.start();
    await using box = await m.create({ image: IMAGE, pool: 'runc' });
    await assert.rejects(
      box.pause({ memory: 'release' }),
      (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'checkpoint_unsupported' && /runsc/.test(e.message) && e.message.includes(box.id),
    );
    assert.equal((await box.info()).status, 'running');
    await assert.rejects(box.pause({ memory: 'drop' as 'hold' }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'memory');
    await assert.rejects(box.pause({ memroy: 'release' } as never), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'memroy');
  });
});
