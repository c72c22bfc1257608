import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { after, before, describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { Runtime } from '../runtime/types.js';
import { ManualClock } from '../testing/clock.js';
import { testEnv, testRunId } from '../testing/env.js';
import { waitFor, within } from '../testing/wait.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';
import type { ManagerConfig, PoolConfig } from './config.js';
import type { CreateOptions } from './types.js';
import type { Box } from './box.js';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const IMAGE = testEnv.baseImage;
const runId = testRunId('manager');
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-manager-'));
const engine = new DockerRuntime(testEnv.engineAddr);
let seq = 0;
const managers: Manager[] = [];

/** A Manager with a name of its own, so its boxes are its alone on the shared engine. */
function newManager(
  pools: PoolConfig[] = [{ name: 'local', addr: testEnv.engineAddr }],
  extra: ManagerConfig = {},
  name = `t${++seq}-${process.pid}`,
): Manager {
  const m = new Manager({ name, pools, dataDir, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }), ...extra });
  managers.push(m);
  return m;
}

/** Runs a Manager in a child process that SIGKILLs itself in the middle of creating `id`. */
async function crashChild(name: string, id: string, mode: 'after-create' | 'after-start'): Promise<void> {
  const child = fileURLToPath(new URL('../testing/crash-create-child.ts', import.meta.url));
  const r = spawnSync(process.execPath, ['--import', 'tsx', child, name, dataDir, id, mode], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.signal, 'SIGKILL', `the child should have died mid-create: ${r.stderr}`);
}

async function containersOf(m: Manager) {
  return engine.list({ labels: managerSelector(m.config.name) });
}

after(async () => {
  // Each test removes its boxes; anything left now is a leak the suite reports, then sweeps.
  const leaked = (await Promise.all(managers.map(containersOf))).flat();
  await Promise.all(leaked.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
  await Promise.all(managers.map((m) => m.close()));
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(
    leaked.map((c) => c.name),
    [],
    'containers left behind by the manager tests',
  );
});

describe(`Manager on a real engine (${runId})`, () => {
  test('create and exec: a box runs a command and is removed', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, owner: 'alice' });
    assert.match(box.id, /^sb-[0-9a-f]{12}$/);
    const r = await box.exec(['sh', '-c', 'echo hello; pwd; echo $SBX_SANDBOX_ID']);
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, `hello\n/workspace\n${box.id}\n`);
    const info = await box.info();
    assert.equal(info.status, 'running');
    assert.equal(info.owner, 'alice');
    assert.equal(info.policy, 'session');
    assert.equal(info.image, IMAGE);
    await box.remove();
    assert.deepEqual(await containersOf(m), []);
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));
  });

  test('await using removes the box at the end of the scope', async () => {
    const m = newManager();
    let id = '';
    {
      await using box = await m.create({ image: IMAGE });
      id = box.id;
      assert.equal((await box.exec(['true'])).exitCode, 0);
    }
    await assert.rejects(m.get(id), (e) => isSbxError(e, 'not_found'));
    assert.deepEqual(await containersOf(m), []);
  });

  test('create with labels: stored, listed and filtered', async () => {
    const m = newManager();
    const a = await m.create({ image: IMAGE, owner: 'alice', labels: { team: 'red', tier: '1' } });
    const b = await m.create({ image: IMAGE, owner: 'bob', labels: { team: 'blue' } });
    assert.deepEqual(a.labels, { team: 'red', tier: '1' });
    assert.deepEqual(
      (await m.list({ labels: { team: 'red' } })).map((x) => x.id),
      [a.id],
    );
    assert.deepEqual(
      (await m.list({ owner: 'bob' })).map((x) => x.id),
      [b.id],
    );
    assert.equal((await m.list({ pool: 'local' })).length, 2);
    assert.deepEqual((await a.info()).labels, { team: 'red', tier: '1' });
    await Promise.all([a.remove(), b.remove()]);
  });

  test('explicit ids are validated and unique', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, id: 'my-box.1' });
    assert.equal(box.id, 'my-box.1');
    await assert.rejects(m.create({ image: IMAGE, id: 'my-box.1' }), (e) => isSbxError(e, 'conflict'));
    await assert.rejects(m.create({ image: IMAGE, id: '../etc' }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'id');
    await assert.rejects(m.create({ image: IMAGE, id: 'x'.repeat(64) }), (e) => isSbxError(e, 'invalid_argument'));
    await box.remove();
  });

  test('invalid options are invalid_argument naming the field, and nothing is created', async () => {
    const m = newManager();
    const cases: Array<[Partial<CreateOptions>, string]> = [
      [{ image: '' }, 'image'],
      [{ policy: 'forever' as never }, 'policy'],
      [{ memory: 1024 }, 'memory'],
      [{ cpus: -1 }, 'cpus'],
      [{ workDir: 'relative' }, 'workDir'],
      [{ mountPath: '/a/../etc' }, 'mountPath'],
      [{ env: { SBX_TOKEN: 'mine' } }, 'env.SBX_TOKEN'],
      [{ ports: [{ containerPort: 80, hostIp: '0.0.0.0' }] }, 'ports.0.hostIp'],
      [{ network: 'host' }, 'network'],
      [{ idleTimeoutMs: -5 }, 'idleTimeoutMs'],
      [{ unknownField: 1 } as never, 'options'],
    ];
    for (const [extra, field] of cases) {
      await assert.rejects(m.create({ image: IMAGE, ...extra }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === field, `field ${field}`);
    }
    await assert.rejects(m.create({ image: IMAGE, pool: 'nope' }), (e) => isSbxError(e, 'pool_not_found'));
    await assert.rejects(m.create({ image: 'sbx-absent:none' }), (e) => isSbxError(e, 'not_found') && /sbx-absent:none/.test(e.message));
    assert.deepEqual(await containersOf(m), []);
    assert.equal((await m.list()).length, 0);
  });

  test('a box whose command cannot start is removed again and the error surfaces', async () => {
    // The engine's start is held until the slot was seen: a create in flight, not a timing guess.
    const real = new DockerRuntime(testEnv.engineAddr);
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let reached!: () => void;
    const starting = new Promise<void>((r) => (reached = r));
    const held: Runtime = Object.assign(Object.create(real) as Runtime, {
      start: async (id: string) => {
        reached();
        await released;
        return real.start(id);
      },
    });
    const m = newManager([{ name: 'local', runtime: held }]);
    const failing = m.create({ image: IMAGE, cmd: ['/no/such/binary'] });
    await within(starting, 'the create to reach the engine');
    assert.equal((await m.pools())[0]?.boxes, 1, 'a create in flight holds its slot');
    release();
    await assert.rejects(failing, (e) => isSbxError(e) && /no\/such\/binary|executable file not found/.test(e.message));
    assert.equal((await m.list()).length, 0);
    assert.deepEqual(await containersOf(m), []);
    // The slot was released: the pool is not left thinking it holds a box.
    assert.equal((await m.pools())[0]?.boxes, 0);
    await real.close();
  });

  test('containers get hardened defaults', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, ports: [{ containerPort: 8080 }] });
    const raw = await new DockerRuntime(testEnv.engineAddr).inspect(box.containerId);
    assert.equal(raw.ports[0]?.hostIp, '127.0.0.1');
    // Read the effective settings from inside the box.
    const status = (await box.exec(['cat', '/proc/self/status'])).stdout;
    assert.match(status, /NoNewPrivs:\s+1/);
    const capBnd = BigInt('0x' + /CapBnd:\s+([0-9a-f]+)/.exec(status)![1]);
    const NET_RAW = 13n;
    const SYS_ADMIN = 21n;
    const MKNOD = 27n;
    const KILL = 5n;
    assert.equal(capBnd & (1n << NET_RAW), 0n, 'no NET_RAW');
    assert.equal(capBnd & (1n << SYS_ADMIN), 0n, 'no SYS_ADMIN');
    assert.equal(capBnd & (1n << MKNOD), 0n, 'no MKNOD');
    assert.notEqual(capBnd & (1n << KILL), 0n, 'KILL kept');
    const pids = await box.exec(['sh', '-c', 'cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max']);
    assert.equal(pids.stdout.trim(), '512');
    const sock = await box.exec(['sh', '-c', 'ls /var/run/docker.sock /run/docker.sock 2>&1; true']);
    assert.match(sock.stdout, /No such file/);
    const env = (await box.exec(['env'])).stdout;
    assert.match(env, /SBX_TOKEN=sbxb1\./);
    await box.remove();
  });

  test('the strict profile adds a read-only root, a tmpfs /tmp and no network', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, security: 'strict', workDir: '/tmp' });
    const w = await box.exec(['sh', '-c', 'touch /etc/x 2>&1; touch /tmp/ok && echo tmp-ok; cat /proc/self/status | grep CapBnd']);
    assert.match(w.stdout, /Read-only file system/);
    assert.match(w.stdout, /tmp-ok/);
    assert.match(w.stdout, /CapBnd:\s+0+\n/);
    // /proc/net/dev is in every image: the interfaces the box has, loopback only.
    const interfaces = async (b: Box) => (await b.exec(['cat', '/proc/net/dev'])).stdout.match(/^\s*([a-z0-9]+):/gm)?.map((x) => x.trim().slice(0, -1));
    assert.deepEqual(await interfaces(box), ['lo']);
    const open = await m.create({ image: IMAGE });
    assert.ok((await interfaces(open))?.includes('eth0'), 'a standard box has a network (control)');
    await Promise.all([box.remove(), open.remove()]);
  });

  test('the box token in SBX_TOKEN verifies for its box only, refreshes, and dies with it', async () => {
    const m = newManager();
    const a = await m.create({ image: IMAGE, id: 'tok-a' });
    const b = await m.create({ image: IMAGE, id: 'tok-b' });
    const tokenA = (await a.exec(['sh', '-c', 'printf %s "$SBX_TOKEN"'])).stdout;
    assert.equal(await m.secrets.verifyBoxToken(tokenA), 'tok-a');
    const refreshed = await m.secrets.refreshBoxToken(tokenA);
    assert.equal(await m.secrets.verifyBoxToken(refreshed), 'tok-a');
    await a.remove();
    await assert.rejects(m.secrets.verifyBoxToken(tokenA), (e) => isSbxError(e, 'unauthorized'));
    // A new box under the same id does not accept the old box's token.
    const again = await m.create({ image: IMAGE, id: 'tok-a' });
    await assert.rejects(m.secrets.verifyBoxToken(tokenA), (e) => isSbxError(e, 'unauthorized'));
    await Promise.all([again.remove(), b.remove()]);
  });

  test('idle cleanup: a session box idle past its timeout is removed', async () => {
    const clock = new ManualClock(Date.now());
    const m = newManager(undefined, { clock: clock.now });
    const idle = await m.create({ image: IMAGE, idleTimeoutMs: 1000 });
    const busy = await m.create({ image: IMAGE, idleTimeoutMs: 1000 });
    clock.advance(600);
    await busy.exec(['true']);
    clock.advance(600);
    await m.cleanup();
    await assert.rejects(m.get(idle.id), (e) => isSbxError(e, 'not_found'));
    await m.get(busy.id);
    assert.equal(m.cleanupStats.removedIdle, 1);
    assert.deepEqual(
      (await containersOf(m)).map((c) => c.id),
      [busy.containerId],
    );
    await busy.remove();
  });

  test('the cleanup loop runs by itself on its interval', async () => {
    const m = newManager(undefined, { cleanupIntervalMs: 200 });
    await m.start();
    const box = await m.create({ image: IMAGE, idleTimeoutMs: 500 });
    // The removal's end, not list(): a box reads as gone from the start of its removal.
    await waitFor(() => m.cleanupStats.removedIdle === 1, { what: 'the loop to remove the idle box' });
    assert.equal((await m.list()).length, 0);
    assert.ok(m.cleanupStats.ticks >= 2);
    await assert.rejects(engine.inspect(box.containerId), (e) => isSbxError(e, 'not_found'));
    await m.close();
  });

  test('heartbeats keep an idle box alive; unknown ids are not_found', async () => {
    const clock = new ManualClock(Date.now());
    const m = newManager(undefined, { clock: clock.now });
    const box = await m.create({ image: IMAGE, idleTimeoutMs: 800 });
    for (let i = 0; i < 4; i++) {
      clock.advance(400);
      await m.heartbeat(box.id, { active: true, processCount: 3 });
    }
    await m.cleanup();
    const info = await (await m.get(box.id)).info();
    assert.equal(info.processCount, 3);
    await assert.rejects(m.heartbeat('nope', { active: true }), (e) => isSbxError(e, 'not_found'));
    // An inactive heartbeat reports processes but is not activity.
    clock.advance(900);
    await m.heartbeat(box.id, { active: false, processCount: 0 });
    await m.cleanup();
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));
  });

  test('an open stream keeps a box alive past its idle timeout', async () => {
    const clock = new ManualClock(Date.now());
    const m = newManager(undefined, { clock: clock.now });
    const box = await m.create({ image: IMAGE, idleTimeoutMs: 500 });
    // Open until this test ends its stdin, however slow the machine.
    const s = await box.stream(['sh', '-c', 'cat >/dev/null; echo done']);
    clock.advance(1000);
    await m.cleanup();
    await m.get(box.id);
    const out: Buffer[] = [];
    s.stdout.on('data', (d: Buffer) => out.push(d));
    s.stdin.end();
    assert.equal(await s.wait(), 0);
    assert.equal(Buffer.concat(out).toString(), 'done\n');
    clock.advance(500);
    await m.cleanup();
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));
  });

  test('stream: output chunks arrive as they are written', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE });
    // b is written only once a arrived here: a stream that held output back would never deliver a.
    const s = await box.stream(['sh', '-c', 'echo a; read x; echo b']);
    let text = '';
    s.stdout.on('data', (d: Buffer) => (text += d.toString()));
    await waitFor(() => text === 'a\n', { what: 'a, before b is written' });
    s.stdin.end('go\n');
    assert.equal(await s.wait(), 0);
    assert.equal(text, 'a\nb\n');
    await box.remove();
  });

  test('oneshot: removed once its first exec completes', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, policy: 'oneshot' });
    const r = await box.exec(['echo', 'once']);
    assert.equal(r.stdout, 'once\n');
    // Nobody removes it here: the Manager does, in the background, on its own.
    // The container's end, not list(): a box reads as gone from the start of its removal.
    const gone = () =>
      engine.inspect(box.containerId).then(
        () => false,
        (e: unknown) => isSbxError(e, 'not_found'),
      );
    await waitFor(gone, { what: 'the Manager to remove the oneshot box' });
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));
    await assert.rejects(engine.inspect(box.containerId), (e) => isSbxError(e, 'not_found'));
  });

  test('longrunning: stopped when idle, removed past its max lifetime', async () => {
    // A manual clock: idle and lifetime are the ones set, however slow a create or stop is.
    const clock = new ManualClock(Date.now());
    const m = newManager(undefined, { clock: clock.now });
    const box = await m.create({ image: IMAGE, policy: 'longrunning', idleTimeoutMs: 500, maxLifetimeMs: 6000 });
    clock.advance(500);
    await m.cleanup();
    assert.equal((await box.info()).status, 'stopped');
    assert.equal(m.cleanupStats.stoppedIdle, 1);
    await box.start();
    assert.equal((await box.info()).status, 'running');
    clock.set(Date.parse(box.createdAt) + 6000);
    await m.cleanup();
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));
    assert.equal(m.cleanupStats.removedLifetime, 1);
  });

  test('persistent: survives idle and lifetime', async () => {
    const clock = new ManualClock(Date.now());
    const m = newManager(undefined, { clock: clock.now });
    const box = await m.create({ image: IMAGE, policy: 'persistent', idleTimeoutMs: 100, maxLifetimeMs: 200 });
    clock.advance(400);
    await m.cleanup();
    assert.equal((await (await m.get(box.id)).info()).status, 'running');
    await box.remove();
  });

  test('start recovery: a new Manager recovers every field, and cleanup acts on recovered boxes', async () => {
    const name = `recover-${process.pid}`;
    const first = newManager(undefined, {}, name);
    const box = await first.create({
      image: IMAGE,
      id: 'rec-1',
      owner: 'carol',
      labels: { app: 'x' },
      policy: 'longrunning',
      idleTimeoutMs: 1200,
      stopTimeoutMs: 700,
      maxLifetimeMs: 3_600_000,
      vnc: true,
    });
    const before = await box.info();
    await first.close();

    const clock = new ManualClock(Date.now());
    const second = newManager(undefined, { clock: clock.now }, name);
    const other = newManager();
    await Promise.all([second.start(), other.start()]);
    assert.equal((await other.list()).length, 0, 'a Manager of another name adopts nothing');
    const got = await second.get('rec-1');
    const after = await got.info();
    for (const k of [
      'id',
      'containerId',
      'pool',
      'owner',
      'policy',
      'labels',
      'image',
      'createdAt',
      'vnc',
      'idleTimeoutMs',
      'stopTimeoutMs',
      'maxLifetimeMs',
      'workspaceId',
    ] as const) {
      assert.deepEqual(after[k], before[k], `field ${k}`);
    }
    clock.advance(1200); // the idle timeout, counted from recovery
    await second.cleanup();
    assert.equal((await got.info()).status, 'stopped', 'the recovered idle timeout applies');
    await got.remove();
  });

  test('pool limits hold under concurrency: 10 creates against maxTotal 3', async () => {
    const m = newManager([{ name: 'local', addr: testEnv.engineAddr, maxTotal: 3 }]);
    const results = await Promise.allSettled(Array.from({ length: 10 }, () => m.create({ image: IMAGE })));
    const ok = results.filter((r) => r.status === 'fulfilled');
    const refused = results.filter((r) => r.status === 'rejected');
    assert.equal(ok.length, 3);
    assert.equal(refused.length, 7);
    for (const r of refused) assert.ok(isSbxError((r as PromiseRejectedResult).reason, 'limit_exceeded'));
    assert.equal((await containersOf(m)).length, 3);
    assert.equal((await m.pools())[0]?.boxes, 3);
    await Promise.all((await m.list()).map((b) => b.remove()));
  });

  test('maxPerUser limits each owner separately', async () => {
    const m = newManager([{ name: 'local', addr: testEnv.engineAddr, maxPerUser: 1 }]);
    const results = await Promise.allSettled([
      m.create({ image: IMAGE, owner: 'a' }),
      m.create({ image: IMAGE, owner: 'a' }),
      m.create({ image: IMAGE, owner: 'b' }),
    ]);
    assert.deepEqual(
      results.map((r) => r.status),
      ['fulfilled', 'rejected', 'fulfilled'],
    );
    assert.ok(isSbxError((results[1] as PromiseRejectedResult).reason, 'limit_exceeded'));
    await Promise.all((await m.list()).map((b) => b.remove()));
  });

  test('getOrCreate: 10 concurrent calls for one id create exactly one box', async () => {
    const m = newManager();
    const boxes = await Promise.all(Array.from({ length: 10 }, () => m.getOrCreate({ image: IMAGE, id: 'shared-1', owner: 'dana' })));
    assert.equal(new Set(boxes).size, 1);
    assert.equal((await containersOf(m)).length, 1);
    assert.equal(await m.getOrCreate({ image: IMAGE, id: 'shared-1', owner: 'dana' }), boxes[0]);
    await assert.rejects(m.getOrCreate({ image: IMAGE, id: 'shared-1', owner: 'eve' }), (e) => isSbxError(e, 'conflict'));
    await assert.rejects(m.getOrCreate({ image: IMAGE }), (e) => isSbxError(e, 'invalid_argument'));
    await boxes[0]!.remove();
  });

  test('getOrCreate racing a plain create of the same id returns the box being created', async () => {
    const m = newManager();
    const [made, joined] = await Promise.all([
      m.create({ image: IMAGE, id: 'race-1', owner: 'dana' }),
      m.getOrCreate({ image: IMAGE, id: 'race-1', owner: 'dana' }),
    ]);
    assert.equal(joined, made);
    assert.equal((await containersOf(m)).length, 1);
    // The other way round, create means "a new box": conflict.
    const first = m.getOrCreate({ image: IMAGE, id: 'race-2' });
    await assert.rejects(m.create({ image: IMAGE, id: 'race-2' }), (e) => isSbxError(e, 'conflict'));
    await Promise.all([made.remove(), (await first).remove()]);
  });

  test('reads are not use: polling get, info and list does not delay idle removal; an exec does', async () => {
    const clock = new ManualClock(Date.now());
    const m = newManager(undefined, { clock: clock.now });
    const polled = await m.create({ image: IMAGE, idleTimeoutMs: 800 });
    const used = await m.create({ image: IMAGE, idleTimeoutMs: 800 });
    for (let i = 0; i < 6; i++) {
      clock.advance(250);
      await (await m.get(polled.id)).info();
      await m.info(polled.id);
      await m.list();
      await used.exec(['true']);
    }
    await m.cleanup();
    await assert.rejects(m.get(polled.id), (e) => isSbxError(e, 'not_found'));
    assert.equal((await m.get(used.id)).id, used.id);
    assert.equal(m.cleanupStats.removedIdle, 1);
    await used.remove();
  });

  test('getOrCreate returning an existing box counts as use', async () => {
    const clock = new ManualClock(Date.now());
    const m = newManager(undefined, { clock: clock.now });
    const box = await m.getOrCreate({ image: IMAGE, id: 'resume-1', idleTimeoutMs: 800 });
    for (let i = 0; i < 5; i++) {
      clock.advance(250);
      await m.getOrCreate({ image: IMAGE, id: 'resume-1' });
    }
    await m.cleanup();
    assert.equal((await m.get(box.id)).id, box.id);
    await box.remove();
  });

  test('a create whose Manager was killed after the engine made the container is swept, at start and by the next pass', async () => {
    const name = `crash-${process.pid}`;
    const m = newManager(undefined, {}, name);
    await m.start();
    await crashChild(name, 'half-1', 'after-create');
    const left = await containersOf(m);
    assert.deepEqual(
      left.map((c) => [c.labels['sbx.id'], c.status]),
      [['half-1', 'created']],
      'the child died between create and start',
    );
    await m.cleanup();
    assert.deepEqual(await containersOf(m), []);
    assert.equal(m.cleanupStats.swept, 1);
    await assert.rejects(m.get('half-1'), (e) => isSbxError(e, 'not_found'));
    // Killed before any Manager was up: start() sweeps it.
    await crashChild(name, 'half-2', 'after-create');
    const fresh = newManager(undefined, {}, name);
    await fresh.start();
    assert.deepEqual(await containersOf(fresh), []);
  });

  test('a create that landed after a new Manager recovered is adopted by the next pass, with every field', async () => {
    const name = `late-${process.pid}`;
    const m = newManager(undefined, {}, name);
    await m.start();
    await crashChild(name, 'late-1', 'after-start');
    await assert.rejects(m.get('late-1'), (e) => isSbxError(e, 'not_found'));
    await m.cleanup();
    const box = await m.get('late-1');
    assert.equal(m.cleanupStats.adopted, 1);
    assert.deepEqual([box.owner, box.labels, box.status], ['crashed', { from: 'child' }, 'running']);
    assert.equal((await box.exec(['echo', 'adopted'])).stdout, 'adopted\n');
    await box.remove();
  });

  test('removePool: pool_in_use with boxes, force removes them', async () => {
    const m = newManager([
      { name: 'local', addr: testEnv.engineAddr },
      { name: 'second', addr: testEnv.engineAddr },
    ]);
    await assert.rejects(m.addPool({ name: 'second' }), (e) => isSbxError(e, 'conflict'));
    await assert.rejects(m.addPool({ name: 'Bad Name' }), (e) => isSbxError(e, 'invalid_argument'));
    const info = await m.addPool({ name: 'third', addr: testEnv.engineAddr, maxTotal: 2 });
    assert.equal(info.maxTotal, 2);
    const box = await m.create({ image: IMAGE, pool: 'second' });
    await assert.rejects(
      m.removePool('second'),
      (e) => isSbxError(e, 'pool_in_use') && e.message.endsWith('pass { force: true }') && e.details?.['option'] === 'force',
    );
    await m.removePool('third');
    await m.removePool('second', { force: true });
    await assert.rejects(engine.inspect(box.containerId), (e) => isSbxError(e, 'not_found'));
    assert.deepEqual(
      (await m.pools()).map((p) => p.name),
      ['local'],
    );
    await assert.rejects(m.removePool('second'), (e) => isSbxError(e, 'pool_not_found'));
  });

  test('a refused pool leaves nothing behind: not in pools(), not a workspace node, creates still work', async () => {
    for (const started of [false, true]) {
      const m = newManager();
      if (started) await m.start();
      const before = await m.pools();
      await assert.rejects(
        m.addPool({ name: 'bad', addr: 'ftp://x' }),
        (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'addr' && /ftp/.test(e.message),
      );
      assert.deepEqual(await m.pools(), before, `started: ${started}`);
      assert.deepEqual(
        m.workspaces.nodes().map((n) => n.name),
        ['local'],
      );
      await assert.rejects(m.create({ image: IMAGE, pool: 'bad' }), (e) => isSbxError(e, 'pool_not_found'));
      const ws = await m.workspaces.create({ name: `after-bad-${started}`, owner: 'alice', node: 'local' });
      const box = await m.create({ image: IMAGE, owner: 'alice', workspaceId: ws.id });
      assert.equal((await box.exec(['true'])).exitCode, 0);
      // The name is free: the same pool with a good address is taken.
      assert.equal((await m.addPool({ name: 'bad', addr: testEnv.engineAddr })).name, 'bad');
      await m.removePool('bad');
      await box.remove();
      await m.workspaces.delete(ws.id);
    }
  });

  test('removePool, even with force, refuses while a create is in flight on the pool, and keeps the pool', async () => {
    const real = new DockerRuntime(testEnv.engineAddr);
    let entered!: () => void;
    const inCreate = new Promise<void>((resolve) => (entered = resolve));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const gated: Runtime = Object.assign(Object.create(real) as Runtime, {
      create: async (spec: Parameters<Runtime['create']>[0]) => {
        entered();
        await gate;
        return real.create(spec);
      },
    });
    const m = newManager([
      { name: 'local', addr: testEnv.engineAddr },
      { name: 'gated', runtime: gated },
    ]);
    const creating = m.create({ image: IMAGE, pool: 'gated' });
    await inCreate;
    await assert.rejects(m.removePool('gated', { force: true }), (e) => isSbxError(e, 'pool_in_use') && /being created/.test(e.message));
    release();
    const box = await creating;
    assert.deepEqual(
      (await m.pools()).map((p) => p.name),
      ['local', 'gated'],
    );
    assert.equal((await box.exec(['echo', 'kept'])).stdout, 'kept\n', 'the box landed on a pool that is still there');
    await m.removePool('gated', { force: true });
    await assert.rejects(engine.inspect(box.containerId), (e) => isSbxError(e, 'not_found'));
    await real.close();
  });

  test('errors of a box name the box, not its container', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, stopTimeoutMs: 1000 });
    const short = box.containerId.slice(0, 12);
    const namesTheBox = (e: unknown) => {
      assert.ok(isSbxError(e), String(e));
      assert.ok(e.message.includes(box.id) && !e.message.includes(short), e.message);
      assert.ok(
        Object.entries(e.details ?? {}).every(([k, v]) => k === 'containerId' || !String(v).includes(short)),
        JSON.stringify(e.details),
      );
      return true;
    };
    await assert.rejects(box.exec(['no-such-program']), (e) => isSbxError(e, 'not_found') && namesTheBox(e));
    await assert.rejects(box.exec(['true'], { workDir: '/no/such/dir' }), (e) => isSbxError(e, 'invalid_argument') && namesTheBox(e));
    await box.stop();
    await assert.rejects(box.exec(['true']), (e) => isSbxError(e, 'conflict') && namesTheBox(e));
    await assert.rejects(box.stream(['true']), (e) => isSbxError(e, 'conflict') && namesTheBox(e));
    await box.remove();
    await assert.rejects(
      m.create({ id: 'sb-cmd-fails', image: IMAGE, cmd: ['/no/such/binary'] }),
      (e) => isSbxError(e) && e.message.includes('box sb-cmd-fails') && !/[0-9a-f]{64}/.test(e.message),
    );
  });

  test('a host port already taken is conflict naming ports, not internal, and leaves no container', async () => {
    const m = newManager();
    const first = await m.create({ image: IMAGE, ports: [{ containerPort: 8080, hostPort: 0 }] });
    const taken = (await first.info()).ports.find((p) => p.containerPort === 8080)?.hostPort;
    assert.ok(taken, 'the engine chose a host port');
    await assert.rejects(
      m.create({ image: IMAGE, ports: [{ containerPort: 8080, hostPort: taken }] }),
      (e) => isSbxError(e, 'conflict') && e.details?.['field'] === 'ports' && /already allocated|already in use/.test(e.message),
    );
    assert.deepEqual(
      (await containersOf(m)).map((c) => c.id),
      [first.containerId],
    );
    await first.remove();
  });

  test('a runtime failure on remove keeps the box registered; a vanished container is forgotten cleanly', async () => {
    let failRemove = true;
    const real = new DockerRuntime(testEnv.engineAddr);
    const flaky: Runtime = Object.assign(Object.create(real) as Runtime, {
      remove: async (id: string, opts?: { force?: boolean }) => {
        if (failRemove) throw Object.assign(new Error('engine hiccup'), { code: 'EPIPE' });
        return real.remove(id, opts);
      },
    });
    const m = newManager([{ name: 'local', runtime: flaky }]);
    const box = await m.create({ image: IMAGE });
    await assert.rejects(box.remove(), /engine hiccup/);
    await m.get(box.id);
    failRemove = false;
    await box.remove();
    await assert.rejects(m.get(box.id), (e) => isSbxError(e, 'not_found'));

    const gone = await m.create({ image: IMAGE });
    await real.remove(gone.containerId, { force: true });
    await gone.remove();
    await assert.rejects(m.get(gone.id), (e) => isSbxError(e, 'not_found'));
    await real.close();
  });

  test('stop and start keep the box registered', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, stopTimeoutMs: 1000 });
    await box.stop();
    assert.equal((await box.info()).status, 'stopped');
    await box.start();
    assert.equal((await box.exec(['echo', 'back'])).stdout, 'back\n');
    await box.remove();
  });

  test('a caller-given command replaces the graceful sleep', async () => {
    const m = newManager();
    const box = await m.create({ image: IMAGE, cmd: ['sleep', '1000'] });
    const ps = await engine.processes(box.containerId);
    assert.ok(ps.some((p) => p.command === 'sleep 1000'));
    await box.remove();
  });

  test('images: exists, ensure (no pull when present)', async () => {
    const m = newManager();
    assert.equal(await m.imageExists('local', IMAGE), true);
    assert.equal(await m.imageExists('local', 'sbx-absent:none'), false);
    assert.deepEqual(await m.ensureImage('local', IMAGE), { pulled: false });
    await engine.images.remove(testEnv.pullImage, { force: true }).catch(() => undefined);
    const events = [];
    for await (const ev of m.pullImage('local', testEnv.pullImage)) events.push(ev);
    assert.ok(events.length > 0);
    assert.equal(await m.imageExists('local', testEnv.pullImage), true);
  });

  test('an unreachable pool is reported, and creating on it is runtime_unavailable', async () => {
    const m = newManager([{ name: 'dead', addr: 'unix:///tmp/sbx-no-engine.sock' }]);
    await m.start();
    assert.equal((await m.pools())[0]?.connected, false);
    await assert.rejects(m.create({ image: IMAGE }), (e) => isSbxError(e, 'runtime_unavailable'));
    await m.cleanup();
    assert.ok(m.cleanupStats.errors >= 1);
  });
});

before(async () => {
  await engine.ping();
});
