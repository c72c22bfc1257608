/**
 * Issue #17: boxes and their status across a real restart of the engine under a pool. The
 * engine is a second, disposable dockerd (scripts/engine2.sh) in a network namespace of its own,
 * so killing it touches nobody else's boxes. Needs root, like the rest of the harness.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pino from 'pino';
import { after, before, describe, test } from 'node:test';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { testEnv, testRunId } from '../testing/env.js';
import type { Box } from './box.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';
import { statusOf } from './reconcile.js';
import type { BoxInfo, LifecyclePolicy } from './types.js';

const IMAGE = testEnv.baseImage;
const SCRIPT = fileURLToPath(new URL('../../scripts/engine2.sh', import.meta.url));
/** How long boxes may take to be running again once the engine answers. */
const BACK_WITHIN_MS = 20_000;
const POOL = 'e2';
const runId = testRunId('engine-restart');
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-engine-restart-'));
const managers: Manager[] = [];
/** What the Managers logged, newest last: shown when an assertion fails. */
const logs: string[] = [];
let addr = '';
let engine: DockerRuntime;
let seq = 0;

const run = promisify(execFile);

/** Runs scripts/engine2.sh; returns its report line and how long it took. */
async function engine2(...args: string[]): Promise<{ out: string; ms: number }> {
  const t = performance.now();
  try {
    const { stdout } = await run('bash', [SCRIPT, ...args], { timeout: 180_000, env: { ...process.env, SBX_ENGINE2_IMAGES: IMAGE } });
    return { out: stdout.trim(), ms: Math.round(performance.now() - t) };
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`engine2.sh ${args.join(' ')} failed: ${e.stderr || e.message}`);
  }
}

function newManager(name = `e2r${++seq}-${process.pid}`): Manager {
  const logger = pino({ level: 'info', base: { m: name } }, { write: (line: string) => void logs.push(line.trim()) });
  // engine2's bridges are in its own network namespace, not this machine's to firewall
  // (docs/network.md), and the host cannot dial a box there, so its agent neither (the engine's exec
  // serves; agent boxes across container restarts are src/runtime/docker/agent.test.ts's).
  const m = new Manager({
    name,
    pools: [{ name: POOL, addr, agent: false, runtimeOptions: { hostFirewall: false } }],
    dataDir,
    cleanupIntervalMs: 0,
    logger,
  });
  managers.push(m);
  return m;
}

/** One box of each policy; the restartable ones answer an exec first, the oneshot is left for its one exec. */
const POLICIES: LifecyclePolicy[] = ['session', 'longrunning', 'persistent', 'oneshot'];
const RESTARTABLE: LifecyclePolicy[] = ['session', 'longrunning', 'persistent'];

async function boxesOfEveryPolicy(m: Manager, policies = POLICIES): Promise<Map<LifecyclePolicy, Box>> {
  const boxes = new Map<LifecyclePolicy, Box>();
  for (const policy of policies) boxes.set(policy, await m.create({ image: IMAGE, policy, owner: 'alice', labels: { run: runId, policy } }));
  for (const policy of policies.filter((p) => p !== 'oneshot')) assert.equal((await boxes.get(policy)!.exec(['echo', 'ok'])).stdout, 'ok\n');
  return boxes;
}

async function infos(boxes: Map<LifecyclePolicy, Box>): Promise<Record<string, BoxInfo>> {
  const out: Record<string, BoxInfo> = {};
  for (const [policy, box] of boxes) out[policy] = await box.info();
  return out;
}

/** The engine's own view, straight from it (not through the Manager), as a BoxStatus. */
async function engineStatus(box: Box): Promise<string> {
  return statusOf((await engine.inspect(box.containerId)).status);
}

/** Polls `check` until it returns true; returns the ms it took, or fails with `describe()`. */
async function waitFor(what: string, check: () => Promise<boolean> | boolean, describe: () => Promise<string> | string, ms = BACK_WITHIN_MS): Promise<number> {
  const t = performance.now();
  for (;;) {
    let ok = false;
    try {
      ok = await check();
    } catch {
      ok = false;
    }
    if (ok) return Math.round(performance.now() - t);
    if (performance.now() - t > ms) {
      assert.fail(`${what}: not within ${ms} ms. ${await describe()}\nlast Manager log lines:\n${logs.slice(-8).join('\n')}`);
    }
    await sleep(100);
  }
}

async function statusTable(boxes: Map<LifecyclePolicy, Box>): Promise<string> {
  const rows = [];
  for (const [policy, box] of boxes) rows.push(`${policy}: box.status=${box.status} engine=${await engineStatus(box).catch((e: Error) => e.message)}`);
  return rows.join('; ');
}

async function removeAll(m: Manager): Promise<void> {
  await Promise.all((await m.list()).map((b) => b.remove()));
}

/** A box with 1 MiB of random bytes at $HOME/blob; the sha256sum line of them. */
async function boxWithBlob(m: Manager, cmd?: string[]): Promise<{ box: Box; hash: string }> {
  const box = await m.create({ image: IMAGE, policy: 'longrunning', labels: { run: runId }, ...(cmd ? { cmd } : {}) });
  const r = await box.exec(['sh', '-c', 'head -c 1048576 /dev/urandom > "$HOME/blob" && sha256sum "$HOME/blob"']);
  assert.equal(r.exitCode, 0, r.stderr);
  return { box, hash: r.stdout };
}

/**
 * After a kill -9 of dockerd, as `m` sees it: the box that was paused reads running everywhere
 * (never `paused` for a container the engine ended), its files are whole and its main process is a
 * new one (`starts` counts the starts of its command); the archived box is still archived, and a
 * use restores it with its file.
 */
async function checkLadderAfterRestart(m: Manager, paused: { box: Box; hash: string }, archived: { box: Box; hash: string }, starts: number): Promise<void> {
  const p = await m.get(paused.box.id);
  assert.equal(p.status, 'running');
  assert.equal((await p.info()).status, 'running', 'info reads the engine: running');
  assert.equal((await m.list()).find((b) => b.id === p.id)?.status, 'running');
  const r = await p.exec(['sh', '-c', 'sha256sum "$HOME/blob"; wc -l < "$HOME/starts"']);
  assert.equal(r.stdout, `${paused.hash}${starts}\n`, 'files whole; its command started again (a new process)');
  await p.resume(); // running: nothing to do, not an error
  const a = await m.get(archived.box.id);
  assert.equal(a.status, 'archived');
  assert.equal((await a.info()).status, 'archived', 'the archive outlived the engine restart');
  assert.equal((await a.exec(['sh', '-c', 'sha256sum "$HOME/blob"'])).stdout, archived.hash, 'restored by a use, its file whole');
  assert.equal(a.status, 'running');
}

/** Kills or stops-and-starts dockerd, then checks what the Manager and the boxes do. */
async function restartScenario(kill: boolean): Promise<void> {
  const m = newManager();
  await m.start();
  try {
    const boxes = await boxesOfEveryPolicy(m);
    const was = await infos(boxes);
    const restart = await engine2('restart', ...(kill ? ['--kill'] : []));
    const t0 = performance.now();

    // The status the Manager keeps (events, and the reconcile when the engine comes back) is
    // the engine's, for every box, without anyone asking info() or running a cleanup pass.
    const trueAfter = await waitFor(
      'box.status agrees with the engine for every box',
      async () => {
        for (const box of boxes.values()) if (box.status !== (await engineStatus(box))) return false;
        return true;
      },
      () => statusTable(boxes),
    );

    // FAILS (kill -9 only; SIGTERM passes): after a kill -9 of dockerd nothing starts the boxes
    // again. The engine does not: dockerd 20.10 without --live-restore, when it starts again, finds
    // the boxes still running (their containerd-shims outlived it) and stops them itself through
    // its normal stop path (daemon.restore -> shutdownContainer -> containerStop ->
    // killWithSignal), which marks them HasBeenManuallyStopped since the daemon is not shutting
    // down, so `unless-stopped` leaves them stopped (docker/for-linux#652, moby/moby#53415). The
    // Manager does not either: src/sandbox/manager.ts reconcilePool, run on the watcher's
    // reconnect, only copies the engine's status into box.status (which is then true: the check
    // above passes). Fix (report of issue #17): when the engine comes back and at start, the
    // Manager starts every stopped session/longrunning/persistent box that sbx did not stop on
    // purpose, with its own stops recorded in the data directory.
    const back = await waitFor(
      `session, longrunning and persistent boxes running again after ${kill ? 'kill -9' : 'SIGTERM'} of dockerd`,
      () => RESTARTABLE.every((p) => boxes.get(p)!.status === 'running'),
      () => statusTable(boxes),
    );
    const sinceUp = Math.round(performance.now() - t0);
    const now = await infos(boxes);
    for (const policy of RESTARTABLE) {
      assert.deepEqual(now[policy], was[policy], `${policy}: every BoxInfo field is as before the restart`);
      assert.equal((await boxes.get(policy)!.exec(['echo', 'back'])).stdout, 'back\n', `${policy}: exec answers`);
    }

    // A oneshot box is not started again: the restart ended it and it stays stopped, registered,
    // holding its slot until its idle timeout removes it; the one exec it was made for can no
    // longer run in it (the container is not running). Asserted as the code does it; the report
    // of issue #17 says why starting it again (or removing it at once) would be better.
    const oneshot = boxes.get('oneshot')!;
    assert.equal(oneshot.status, 'stopped');
    // How it ended is the engine's (the agent's exit on SIGTERM, or the new dockerd's stop after a kill -9).
    assert.equal(typeof now['oneshot']?.exitCode, 'number', 'oneshot: says how its main process ended');
    assert.deepEqual(
      now['oneshot'],
      { ...was['oneshot'], status: 'stopped', exitCode: now['oneshot']?.exitCode },
      'oneshot: stopped, every other field as before',
    );
    assert.equal((await m.get(oneshot.id)).id, oneshot.id, 'oneshot: still registered');
    // A cleanup pass now changes nothing: no box is reaped because the engine restarted.
    await m.cleanup();
    assert.equal((await m.list()).length, POLICIES.length);
    assert.equal((await m.pools())[0]?.connected, true);
    console.log(
      `# ${kill ? 'kill -9' : 'SIGTERM'}: ${restart.out} | engine2.sh took ${restart.ms} ms; status true after ${trueAfter} ms, boxes running ${sinceUp} ms (${back} ms more) after engine2.sh returned`,
    );
  } finally {
    await removeAll(m);
  }
}

before(async () => {
  const up = await engine2('up');
  console.log(`# ${up.out} | engine2.sh up took ${up.ms} ms`);
  addr = /unix:\/\/\S+/.exec((await engine2('env')).out)?.[0] ?? '';
  assert.match(addr, /^unix:\/\//);
  engine = new DockerRuntime(addr);
  // engine2 serves this file alone: a container on it now is a run's that was killed before its
  // after() (CI starts after a killed run). Removed, or the leak check below would blame this run.
  const stale = await engine.list({});
  await Promise.all(stale.map((c) => engine.remove(c.id, { force: true })));
  if (stale.length) console.log(`# removed ${stale.length} container(s) a killed run left on engine2: ${stale.map((c) => c.name).join(', ')}`);
});

after(async () => {
  await Promise.all(managers.map((m) => m.close()));
  let leaked: string[] = [];
  if (engine) {
    // Each test removes its boxes; anything of ours left is a leak, reported once the engine is gone.
    await engine2('up').catch(() => undefined);
    const left = (await Promise.all(managers.map((m) => engine.list({ labels: managerSelector(m.config.name) }).catch(() => [])))).flat();
    leaked = left.map((c) => c.name);
    const all = await engine.list({}).catch(() => []);
    leaked.push(...all.filter((c) => !left.some((l) => l.id === c.id)).map((c) => `(not ours) ${c.name}`));
    await engine.close();
  }
  await engine2('down');
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(leaked, [], 'containers left on engine2');
});

describe(`boxes across a restart of their engine (${runId})`, { timeout: 240_000 }, () => {
  test('kill -9 of dockerd: status stays true, restartable boxes run again with the same info, oneshot does not', () => restartScenario(true));

  test('SIGTERM of dockerd: status stays true, restartable boxes run again with the same info, oneshot does not', () => restartScenario(false));

  for (const kill of [false, true]) {
    const how = kill ? 'kill -9' : 'SIGTERM';
    test(`a Manager started while the engine is down (${how}) reports the pool not connected, then adopts the boxes running when it is up`, async () => {
      const name = `e2r-adopt${kill ? 'k' : 't'}-${process.pid}`;
      const first = newManager(name);
      await first.start();
      const boxes = await boxesOfEveryPolicy(first, RESTARTABLE);
      const was = await infos(boxes);
      await first.close();

      await engine2('stop', ...(kill ? ['--kill'] : []));
      const second = newManager(name);
      await second.start(); // must not throw: an unreachable pool is adopted later
      try {
        const [pool] = await second.pools();
        assert.equal(pool?.connected, false, 'pool reported not connected while its engine is down');
        assert.equal(pool?.boxes, 0);
        assert.deepEqual(await second.list(), []);

        const up = await engine2('up');
        // No cleanup pass: the event watcher's reconnect alone must find the boxes.
        const found = await waitFor(
          'the event watcher adopts the boxes once the engine is up',
          async () => (await second.list()).length === RESTARTABLE.length,
          async () => `listed: ${(await second.list()).length}`,
        );
        assert.equal((await second.pools())[0]?.connected, true);
        // FAILS (kill -9 only): as in the kill -9 test above, the engine left the boxes stopped and
        // src/sandbox/manager.ts reconcilePool adopts them as stopped; this Manager cannot tell
        // whether its predecessor stopped them on purpose. Fixed by the same change: the stops sbx
        // made on purpose are kept in the data directory, so the adopting Manager knows them.
        const running = await waitFor(
          `adopted boxes running after ${how} of dockerd`,
          async () => (await second.list()).every((b) => b.status === 'running'),
          async () => (await second.list()).map((b) => `${b.policy}=${b.status}`).join(', '),
        );
        for (const policy of RESTARTABLE) {
          const box = await second.get(boxes.get(policy)!.id);
          const info = await box.info();
          // The idle clock restarts at adoption, and activity counters are not labels.
          assert.deepEqual({ ...info, lastActive: '' }, { ...was[policy]!, lastActive: '' }, `${policy}: adopted with every field as created`);
          assert.equal((await box.exec(['echo', 'adopted'])).stdout, 'adopted\n');
        }
        console.log(
          `# adopt after ${how}: ${up.out} | engine2.sh up took ${up.ms} ms; boxes adopted ${found} ms and running ${found + running} ms after it returned`,
        );
      } finally {
        await removeAll(second);
      }
    });
  }

  // Issue #27: the lifecycle ladder across a kill -9 of dockerd. The engine's restart ends every
  // container's processes, frozen ones too; an archive is an image and outlives it.
  for (const seen of [true, false]) {
    test(`a paused box comes back running with its files (new processes), an archived box stays archived and restores: ${seen ? 'the Manager that saw the restart, then a new one' : 'a Manager started after the restart'}`, async () => {
      const name = `e2r-ladder${seen ? 's' : 'n'}-${process.pid}`;
      const first = newManager(name);
      await first.start();
      const paused = await boxWithBlob(first, ['sh', '-c', 'echo "$$" >> "$HOME/starts"; while :; do sleep 0.05; done']);
      // Two archived boxes: the Manager that saw the restart restores one, the next Manager the other.
      const archived = [await boxWithBlob(first), await boxWithBlob(first)];
      const ids = [paused, ...archived].map((b) => b.box.id);
      let last = first;
      try {
        assert.equal((await paused.box.exec(['sh', '-c', 'until [ -s "$HOME/starts" ]; do sleep 0.01; done; wc -l < "$HOME/starts"'])).stdout.trim(), '1');
        await paused.box.pause();
        for (const a of archived) await a.box.archive();
        assert.equal(await engineStatus(paused.box), 'paused');
        if (!seen) await first.close();

        const restart = await engine2('restart', '--kill');
        let m = first;
        if (seen) {
          // The paused box's processes ended with the engine; this Manager starts it again
          // (reviveStopped: sbx did not stop it), and its status is the engine's all the way.
          const back = await waitFor(
            'the paused box running again, by the Manager and by the engine',
            async () => paused.box.status === 'running' && (await engineStatus(paused.box)) === 'running',
            async () => `box.status=${paused.box.status} engine=${await engineStatus(paused.box).catch((e: Error) => e.message)}`,
          );
          console.log(`# paused box across kill -9: ${restart.out} | running again ${back} ms after engine2.sh returned`);
          await checkLadderAfterRestart(first, paused, archived[0]!, 2);
          await first.close();
        }
        m = last = newManager(name);
        await m.start();
        if (!seen) {
          // A Manager started after the restart finds the container stopped and starts it at once.
          const again = await m.get(paused.box.id);
          await waitFor(
            'the paused box running again for a Manager started after the restart',
            async () => again.status === 'running' && (await engineStatus(paused.box)) === 'running',
            async () => `box.status=${again.status} engine=${await engineStatus(paused.box).catch((e: Error) => e.message)}`,
          );
        }
        await checkLadderAfterRestart(m, paused, archived[1]!, 2);
        if (seen) assert.equal((await m.get(archived[0]!.box.id)).status, 'running', 'the box restored before stays restored');
        else assert.equal((await m.get(archived[0]!.box.id)).status, 'archived', 'the other archived box is still archived');
        // Nothing of the ladder's is stuck: each box pauses and archives again.
        const box = await m.get(paused.box.id);
        await box.pause();
        assert.equal(await engineStatus(box), 'paused');
        await box.archive();
        assert.equal((await box.exec(['sh', '-c', 'sha256sum "$HOME/blob"'])).stdout, paused.hash);
      } finally {
        await removeAll(last).catch(() => undefined);
        for (const m of [first, last])
          for (const id of ids)
            await m
              .get(id)
              .then((b) => b.remove())
              .catch(() => undefined);
      }
    });
  }

  test('a box sbx stopped on purpose stays stopped across a kill -9 of dockerd, for this Manager and the next', async () => {
    const name = `e2r-stopped-${process.pid}`;
    const first = newManager(name);
    await first.start();
    const box = await first.create({ image: IMAGE, policy: 'longrunning', labels: { run: runId } });
    await box.stop(); // what the cleanup loop does to an idle longrunning box
    const up = await first.create({ image: IMAGE, policy: 'longrunning', labels: { run: runId } });
    try {
      await engine2('restart', '--kill');
      await waitFor(
        'the Manager has seen the engine come back',
        async () => (await first.pools())[0]?.connected === true && (await engineStatus(up)) === up.status,
        async () => `pool ${JSON.stringify(await first.pools())}`,
      );
      await first.cleanup();
      await sleep(1000); // whatever the Manager does when the engine is back, it has done it by now
      assert.equal(await engineStatus(box), 'stopped', 'the box stopped on purpose is still stopped');
      assert.equal(box.status, 'stopped');
      await first.close();
      const second = newManager(name);
      await second.start();
      assert.equal((await second.get(box.id)).status, 'stopped', 'a new Manager leaves it stopped too');
      assert.equal(await engineStatus(box), 'stopped');
      await removeAll(second);
    } finally {
      await removeAll(first).catch(() => undefined);
      await engine.remove(box.containerId, { force: true }).catch(() => undefined);
      await engine.remove(up.containerId, { force: true }).catch(() => undefined);
    }
  });
});
