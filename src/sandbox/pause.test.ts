/**
 * Pause and resume on the real engine: the freezer keeps memory, processes and files; any use
 * thaws the box first, reads do not; the idle ladder pauses an idle box; a restarted Manager finds
 * a paused box paused; paused against running is sbx's word, not the engine's lagging flag.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { ManualClock } from '../testing/clock.js';
import { CountingRuntime } from '../testing/counting-runtime.js';
import { testEnv } from '../testing/env.js';
import { kernelFrozen } from '../testing/freezer.js';
import type { LocalBox, ManagedBox } from './box.js';
import type { ManagerConfig } from './config.js';
import { Manager } from './manager.js';

const IMAGE = testEnv.baseImage;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-pause-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const counting = new CountingRuntime(engine);
const clock = new ManualClock(Date.now());
const managers: Manager[] = [];
let seq = 0;

function newManager(extra: Partial<ManagerConfig> = {}, name = `pause${++seq}-${process.pid}`): Manager {
  const m = new Manager({
    name,
    // `counted` counts the engine calls (and has none of the optional ones, such as the file tool).
    pools: [
      { name: 'local', addr: testEnv.engineAddr },
      { name: 'counted', runtime: counting },
    ],
    dataDir,
    cleanupIntervalMs: 0,
    clock: clock.now,
    logger: pino({ level: 'silent' }),
    ...extra,
  });
  managers.push(m);
  return m;
}

let manager: Manager;
before(async () => {
  manager = newManager();
  await manager.start();
});
after(async () => {
  await Promise.all(managers.map((m) => m.close()));
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/**
 * The kernel's word on the container: frozen (paused) or not. Not the engine's: its paused flag
 * can lag containerd for a moment on a busy engine (runtime/docker/freezer.ts).
 */
function kernelState(box: LocalBox): 'paused' | 'running' {
  return kernelFrozen(box.containerId) ? 'paused' : 'running';
}

/** A box whose main command is a long-lived process that wrote its pid: a restart would be a new one. */
async function boxWithWorker(m: Manager = manager, extra: Omit<Parameters<Manager['create']>[0], 'image'> = {}): Promise<{ box: LocalBox; pid: string }> {
  const box = (await m.create({ ...extra, image: IMAGE, cmd: ['sh', '-c', 'echo $$ > /tmp/worker.pid; while :; do sleep 0.05; done'] })) as LocalBox;
  try {
    const r = await box.exec(['sh', '-c', 'until [ -s /tmp/worker.pid ]; do sleep 0.01; done; cat /tmp/worker.pid']);
    assert.equal(r.exitCode, 0, r.stderr);
    return { box, pid: r.stdout.trim() };
  } catch (err) {
    // The caller's finally never sees a box it was not given: it goes here.
    await box.remove().catch(() => undefined);
    throw err;
  }
}

describe('pause and resume', () => {
  test('pause freezes the box (engine: paused), keeps files byte for byte and processes; an exec thaws it first', async () => {
    const { box, pid } = await boxWithWorker();
    try {
      // 4 MiB of random bytes, hashed before the pause.
      const made = await box.exec(['sh', '-c', 'head -c 4194304 /dev/urandom > /tmp/blob && sha256sum /tmp/blob']);
      assert.equal(made.exitCode, 0, made.stderr);
      await box.pause();
      assert.equal(box.status, 'paused');
      assert.equal(kernelState(box), 'paused', 'frozen');
      await box.pause(); // twice: nothing to do, not an error
      const info = await box.info();
      assert.equal(info.status, 'paused', 'info reads, it does not resume');
      assert.equal((await manager.list({ owner: box.owner })).find((b) => b.id === box.id)?.status, 'paused', 'list neither');
      assert.equal(kernelState(box), 'paused');
      // A use: thawed first, transparently, the same process still there and the bytes the same.
      const after = await box.exec(['sh', '-c', `sha256sum /tmp/blob; kill -0 ${pid} && echo alive`]);
      assert.equal(after.exitCode, 0, after.stderr);
      assert.equal(after.stdout, `${made.stdout}alive\n`);
      assert.equal(box.status, 'running');
      assert.equal(kernelState(box), 'running');
    } finally {
      await box.remove();
    }
  });

  test('every kind of use resumes a paused box: stream, files, dial', async () => {
    const box = (await manager.create({ image: IMAGE })) as LocalBox;
    try {
      await box.pause();
      const s = await box.stream(['echo', 'streamed']);
      let out = '';
      s.stdout.on('data', (d: Buffer) => (out += d.toString()));
      assert.equal(await s.wait(), 0);
      assert.equal(out, 'streamed\n');
      assert.equal(kernelState(box), 'running');

      await box.pause();
      await box.files().writeFile('/tmp/f.txt', 'via files');
      assert.equal(kernelState(box), 'running');
      assert.equal(await box.files().readFile('/tmp/f.txt', 'utf8'), 'via files');

      await box.pause();
      // Nothing listens on the port: the dial fails, but only after the box was thawed for it.
      await box.dial(9).then(
        (sock) => sock.destroy(),
        () => undefined,
      );
      assert.equal(kernelState(box), 'running');
    } finally {
      await box.remove();
    }
  });

  test('a status read before a pause never undoes it (a list or inspect taken meanwhile, an event)', async () => {
    const box = (await manager.create({ image: IMAGE })) as ManagedBox;
    try {
      const before = box.statusEpoch;
      await box.pause();
      box.observe('running', before); // what a list begun before the pause would report
      assert.equal(box.status, 'paused');
      box.observe('paused', box.statusEpoch); // a read begun after it is taken
      assert.equal(box.status, 'paused');
      assert.equal((await box.exec(['echo', 'thawed'])).stdout, 'thawed\n', 'and a use still thaws it');
    } finally {
      await box.remove();
    }
  });

  test("paused against running is sbx's word: a read that differs (a lagging engine flag, a client behind sbx) gets the box's own state applied again", async () => {
    const box = (await manager.create({ image: IMAGE })) as ManagedBox & LocalBox;
    try {
      await box.pause();
      // Thawed behind sbx: the engine reads running, as its lagging flag can about a frozen box.
      await engine.unpause(box.containerId);
      assert.equal((await box.info()).status, 'paused', 'sbx paused it: a read does not make it running');
      await box.pause(); // nothing to do, once the step that read began is done
      assert.equal(kernelState(box), 'paused', 'frozen again');

      assert.equal((await box.exec(['echo', 'thawed'])).stdout, 'thawed\n');
      // Frozen behind sbx: the engine reads paused, as its lagging flag can about a running box.
      await engine.pause(box.containerId);
      assert.equal((await box.info()).status, 'running', 'sbx runs it: a read does not make it paused');
      assert.equal((await box.exec(['echo', 'awake'])).stdout, 'awake\n', 'a use waits for that step and finds the box running');
      assert.equal(kernelState(box), 'running');
    } finally {
      await box.remove();
    }
  });

  test('uses racing on a paused box thaw it once and all succeed', async () => {
    const box = (await manager.create({ image: IMAGE, pool: 'counted' })) as LocalBox;
    try {
      await box.pause();
      const before = counting.count('unpause');
      const results = await Promise.all(Array.from({ length: 6 }, (_, i) => box.exec(['echo', String(i)])));
      assert.deepEqual(
        results.map((r) => r.stdout),
        ['0\n', '1\n', '2\n', '3\n', '4\n', '5\n'],
      );
      assert.equal(counting.count('unpause') - before, 1, 'one thaw for all of them');
    } finally {
      await box.remove();
    }
  });

  test('resume: a paused box thawed, a stopped one started, a running one left alone; a stopped box cannot be paused', async () => {
    const { box, pid } = await boxWithWorker();
    try {
      await box.pause();
      await box.resume();
      assert.equal(kernelState(box), 'running');
      assert.equal((await box.exec(['sh', '-c', `kill -0 ${pid} && echo alive`])).stdout, 'alive\n', 'the same processes');
      await box.resume();
      assert.equal(kernelState(box), 'running', 'running: nothing to do');
      await box.stop();
      await assert.rejects(box.pause(), (e) => isSbxError(e, 'conflict'));
      await box.resume();
      assert.equal((await box.info()).status, 'running', 'a stopped box is started by resume');
    } finally {
      await box.remove();
    }
  });

  test('a paused box stops (thawed first, so its SIGTERM handler runs) and removes', async () => {
    // The command traps TERM and says so in its log: a frozen process could not.
    const box = (await manager.create({
      image: IMAGE,
      cmd: ['sh', '-c', 'trap "echo got-term; exit 0" TERM; while :; do sleep 0.05; done'],
      stopTimeoutMs: 60_000,
    })) as LocalBox;
    try {
      await box.pause();
      await box.stop();
      const info = await box.info();
      assert.deepEqual([info.status, info.exitCode], ['stopped', 0], 'ended by its own TERM handler, not the SIGKILL');
      let log = '';
      for await (const c of await box.logs()) log += c.data.toString();
      assert.match(log, /got-term/);
      await box.start();
      await box.pause();
    } finally {
      await box.remove();
    }
    await assert.rejects(engine.inspect(box.containerId), (e) => isSbxError(e, 'not_found'));
  });

  test('the idle ladder pauses an idle box, the next use resumes it, and the idle timeout still ends it', async () => {
    const { box, pid } = await boxWithWorker(manager, { idlePauseMs: 1000, idleTimeoutMs: 5000 });
    try {
      assert.equal((await box.info()).idlePauseMs, 1000);
      clock.advance(999);
      await manager.cleanup();
      assert.equal(kernelState(box), 'running', 'not idle long enough');
      clock.advance(1);
      await manager.cleanup();
      assert.equal(kernelState(box), 'paused');
      assert.equal(manager.cleanupStats.pausedIdle, 1);
      // Used: thawed, and the idle time counts from this use.
      assert.equal((await box.exec(['sh', '-c', `kill -0 ${pid} && echo alive`])).stdout, 'alive\n');
      await manager.cleanup();
      assert.equal(kernelState(box), 'running');
      clock.advance(5000);
      // A use after the pass decided (here: at the very same instant) keeps the box awake.
      const planned = clock.now();
      (box as ManagedBox).touch();
      assert.equal(await (box as ManagedBox).pauseIfIdle(planned), false);
      assert.equal(kernelState(box), 'running');
      clock.advance(5000);
      await manager.cleanup();
      await assert.rejects(manager.get(box.id), (e) => isSbxError(e, 'not_found'));
    } finally {
      await box.remove().catch(() => undefined);
    }
  });

  test('maxLifetimeAction pause: the end of the lifetime pauses the box and ends its lifetime; renewLifetime sets a new one', async () => {
    const { box, pid } = await boxWithWorker(manager, { maxLifetimeMs: 3000, maxLifetimeAction: 'pause', idleTimeoutMs: 0 });
    try {
      assert.equal((await box.info()).maxLifetimeAction, 'pause');
      clock.set(Date.parse(box.createdAt) + 3000);
      await manager.cleanup();
      assert.equal(kernelState(box), 'paused', 'paused, not removed');
      assert.equal(manager.cleanupStats.pausedLifetime, 1);
      assert.equal(box.maxLifetimeMs, 0, 'its lifetime is over');
      clock.advance(60_000);
      await manager.cleanup();
      assert.equal(kernelState(box), 'paused', 'no later pass ends it');
      await box.renewLifetime(10_000);
      assert.equal((await box.exec(['sh', '-c', `kill -0 ${pid} && echo alive`])).stdout, 'alive\n');
      assert.ok(box.maxLifetimeMs > 60_000);
    } finally {
      await box.remove();
    }
    await assert.rejects(
      manager.create({ image: IMAGE, maxLifetimeAction: 'archive' as never }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'maxLifetimeAction',
    );
  });

  test('an idle pause at or after the idle timeout is refused (it would never come), except for persistent boxes', async () => {
    await assert.rejects(
      manager.create({ image: IMAGE, idlePauseMs: 5000, idleTimeoutMs: 5000 }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'idlePauseMs',
    );
    await assert.rejects(manager.create({ image: IMAGE, idlePauseMs: -1 }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'idlePauseMs');
    const box = await manager.create({ image: IMAGE, policy: 'persistent', idlePauseMs: 5000, idleTimeoutMs: 5000 });
    await box.remove();
  });

  test('a Manager restarted finds a paused box paused, and a use resumes it', async () => {
    const name = `pause-restart-${process.pid}`;
    const first = newManager({}, name);
    await first.start();
    const { box, pid } = await boxWithWorker(first);
    await box.pause();
    await first.close();
    const second = newManager({}, name);
    await second.start();
    const again = (await second.get(box.id)) as LocalBox;
    try {
      assert.equal(again.status, 'paused');
      assert.equal((await again.info()).status, 'paused');
      assert.equal((await again.exec(['sh', '-c', `kill -0 ${pid} && echo alive`])).stdout, 'alive\n');
    } finally {
      await again.remove();
    }
  });
});
