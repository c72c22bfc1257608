/**
 * Warm pools on a real engine: a claimed spare is indistinguishable from a cold box, concurrent
 * creates share the spares and the rest go cold, limits count claims, spares are invisible and
 * replaced when they die, a Manager killed between claim and return recovers the claimed box with
 * every field and re-adopts its spares, and a changed template replaces the old spares.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { after, describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { testEnv, testRunId } from '../testing/env.js';
import { HANG_MS, waitFor } from '../testing/wait.js';
import type { Box } from './box.js';
import type { PoolConfig, WarmTemplate } from './config.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';
import { WARM_LABEL } from './warm.js';

const IMAGE = testEnv.baseImage;
const runId = testRunId('warm');
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-warm-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const managers: Manager[] = [];
let seq = 0;

function newManager(warm: WarmTemplate[], pool: Partial<PoolConfig> = {}, name = `w${++seq}-${process.pid}`): Manager {
  const m = new Manager({
    name,
    dataDir,
    cleanupIntervalMs: 0,
    logger: pino({ level: 'silent' }),
    pools: [{ name: 'local', addr: testEnv.engineAddr, warm, ...pool }],
  });
  managers.push(m);
  return m;
}

async function containersOf(name: string) {
  return engine.list({ labels: managerSelector(name) });
}

/** The spare containers of a Manager, as the engine lists them: warm-labelled, running, not claimed (a claimed one keeps its label). */
async function sparesOf(m: Manager): Promise<string[]> {
  const claimed = new Set((await m.list()).map((b) => b.containerId));
  return (await containersOf(m.config.name)).filter((c) => c.labels[WARM_LABEL] !== undefined && c.running && !claimed.has(c.id)).map((c) => c.id);
}

async function untilReady(m: Manager, ready: number, what = 'spares ready'): Promise<void> {
  for (const deadline = Date.now() + HANG_MS; Date.now() < deadline; await sleep(100)) {
    if ((await m.warm()).reduce((n, w) => n + w.ready, 0) === ready) return;
  }
  assert.fail(`${what}: wanted ${ready}, have ${JSON.stringify(await m.warm())}`);
}

async function envOf(box: Box): Promise<Record<string, string>> {
  const r = await box.exec(['env']);
  return Object.fromEntries(
    r.stdout
      .trim()
      .split('\n')
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

after(async () => {
  await Promise.all(managers.map((m) => m.close()));
  const names = [...new Set(managers.map((m) => m.config.name))];
  const left = (await Promise.all(names.map(containersOf))).flat();
  await Promise.all(left.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(
    left.map((c) => c.name),
    [],
    'containers left behind by the warm-pool tests (spares are removed by each test)',
  );
});

describe(`warm pools on a real engine (${runId})`, () => {
  test('a claim gives a ready spare the caller’s identity: exec works at once, env, labels, info as a cold box', async () => {
    const m = newManager([{ image: IMAGE, size: 2 }]);
    const cold = newManager([]);
    await Promise.all([m.start(), cold.start()]);
    await untilReady(m, 2);
    const spares = await sparesOf(m);
    assert.equal(spares.length, 2);
    assert.deepEqual(await m.list(), [], 'spares are not boxes: list shows none');

    const opts = {
      owner: 'alice',
      labels: { team: 'a' },
      env: { FOO: 'bar' },
      policy: 'longrunning' as const,
      idleTimeoutMs: 90_000,
      maxLifetimeMs: 3_600_000,
    };
    const warm = await m.create({ image: IMAGE, ...opts });
    const plain = await cold.create({ image: IMAGE, ...opts });
    try {
      assert.ok(spares.includes(warm.containerId), 'the box is one of the spares');
      assert.equal((await m.warm())[0]!.hits, 1);
      const r = await warm.exec(['sh', '-c', 'pwd; id -u']);
      assert.deepEqual([r.exitCode, r.stdout], [0, '/workspace\n1000\n'], 'same working directory and user as a cold box');

      const env = await envOf(warm);
      assert.equal(env['SBX_SANDBOX_ID'], warm.id);
      assert.equal(env['FOO'], 'bar');
      assert.equal(await m.secrets.verifyBoxToken(env['SBX_TOKEN']!), warm.id, 'its SBX_TOKEN is this box’s');
      const agentView = await engine.exec(warm.containerId, ['sh', '-c', 'echo $SBX_SANDBOX_ID $FOO']);
      assert.equal(agentView.stdout, `${warm.id} bar\n`, 'the box’s agent was told its identity (for its heartbeat), not only the Manager’s execs');
      const coldEnv = await envOf(plain);
      assert.deepEqual(Object.keys(env).sort(), Object.keys(coldEnv).sort(), 'the same variables as a cold box');

      const [wi, ci] = [await warm.info(), await plain.info()];
      const comparable = (i: typeof wi) => ({ ...i, id: '', containerId: '', createdAt: '', lastActive: '' });
      assert.deepEqual(comparable(wi), comparable(ci), 'info matches a cold box field for field');
      assert.equal(wi.execPath, 'agent');
      assert.deepEqual(
        (await m.list()).map((b) => b.id),
        [warm.id],
        'list shows the claimed box only',
      );
      assert.equal((await m.get(warm.id)).owner, 'alice');
      await untilReady(m, 2, 'the claimed spare is replaced in the background');
    } finally {
      await warm.remove();
      await plain.remove();
    }
    const after = await sparesOf(m);
    assert.ok(!after.includes(warm.containerId), 'a removed claimed box is gone, not back in the pool');
    await m.removePool('local', { force: true });
    assert.deepEqual(await containersOf(m.config.name), [], 'removePool removes the spares');
  });

  test('10 concurrent creates against 3 spares: 3 warm, 7 cold, all correct', async () => {
    const m = newManager([{ image: IMAGE, size: 3 }]);
    await m.start();
    await untilReady(m, 3);
    const spares = new Set(await sparesOf(m));
    const boxes = await Promise.all(Array.from({ length: 10 }, (_, i) => m.create({ image: IMAGE, owner: `u${i}`, env: { N: String(i) } })));
    try {
      assert.equal(boxes.filter((b) => spares.has(b.containerId)).length, 3, 'three claimed spares');
      const info = (await m.warm())[0]!;
      assert.deepEqual([info.hits, info.misses], [3, 7]);
      assert.equal(new Set(boxes.map((b) => b.containerId)).size, 10, 'no spare handed out twice');
      for (const [i, b] of boxes.entries()) {
        const r = await b.exec(['sh', '-c', 'echo $SBX_SANDBOX_ID $N']);
        assert.equal(r.stdout, `${b.id} ${i}\n`);
        assert.equal(b.owner, `u${i}`);
      }
    } finally {
      await Promise.all(boxes.map((b) => b.remove()));
    }
    await m.removePool('local', { force: true });
  });

  test('limits count claimed boxes, spares count against nobody; a create that does not fit goes cold', async () => {
    const m = newManager([{ image: IMAGE, size: 3 }], { maxTotal: 2, maxPerUser: 1 });
    await m.start();
    await untilReady(m, 3);
    const a = await m.create({ image: IMAGE, owner: 'a' });
    await assert.rejects(m.create({ image: IMAGE, owner: 'a' }), (e) => isSbxError(e, 'limit_exceeded'), 'maxPerUser counts the claim');
    const b = await m.create({ image: IMAGE, owner: 'b', cmd: ['sleep', '600'] });
    await assert.rejects(m.create({ image: IMAGE, owner: 'c' }), (e) => isSbxError(e, 'limit_exceeded'), 'maxTotal counts the claim');
    try {
      const spares = await sparesOf(m);
      assert.ok(!spares.includes(b.containerId), 'a create with its own cmd is cold');
      const info = (await m.warm())[0]!;
      assert.deepEqual([info.hits, info.misses], [1, 0], 'only the fitting create claimed; refused creates claim nothing');
    } finally {
      await a.remove();
      await b.remove();
    }
    await m.removePool('local', { force: true });
  });

  test('a spare killed from outside is replaced; idle cleanup never reaps spares', async () => {
    const m = newManager([{ image: IMAGE, size: 2 }], { idleTimeoutMs: 1 });
    await m.start();
    await untilReady(m, 2);
    const [victim] = await sparesOf(m);
    await engine.remove(victim!, { force: true });
    // The replacement itself, not a pause: the ready count may still include the dead spare.
    await waitFor(async () => (await m.warm())[0]!.replaced >= 1, { what: 'the pool to notice the dead spare' });
    await untilReady(m, 2, 'the dead spare is replaced');
    const now = await sparesOf(m);
    assert.ok(!now.includes(victim!), 'the killed spare is not counted');
    assert.equal((await m.warm())[0]!.replaced >= 1, true);
    await m.cleanup();
    assert.deepEqual((await sparesOf(m)).sort(), now.sort(), 'a cleanup pass with a 1 ms idle timeout leaves the spares alone');
    await m.removePool('local', { force: true });
  });

  test('kill -9 between claim and return: the box comes back with every field, the pool refills', async () => {
    const name = `wcrash-${process.pid}`;
    const id = `warm-crash-${process.pid}`;
    const child = fileURLToPath(new URL('../testing/warm-claim-crash-child.ts', import.meta.url));
    const r = spawnSync(process.execPath, ['--import', 'tsx', child, name, dataDir, id], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.signal, 'SIGKILL', `the child should have died mid-claim: ${r.stderr}`);
    const { spare } = JSON.parse(r.stdout.trim().split('\n')[0]!) as { spare: string };
    assert.ok(spare, 'the child had a spare to claim');

    const m = newManager([{ image: IMAGE, size: 1 }], {}, name);
    await m.start();
    const box = await m.get(id);
    assert.equal(box.containerId, spare, 'the recovered box is the claimed spare');
    const info = await box.info();
    assert.deepEqual(
      [info.owner, info.labels, info.policy, info.idleTimeoutMs, info.status, info.image],
      ['crashed', { from: 'child' }, 'longrunning', 123_000, 'running', IMAGE],
    );
    const env = await envOf(box);
    assert.equal(env['SBX_SANDBOX_ID'], id);
    assert.equal(env['FOO'], 'bar');
    assert.equal(await m.secrets.verifyBoxToken(env['SBX_TOKEN']!), id, 'the token from before the crash still verifies');
    assert.deepEqual(await m.list().then((l) => l.map((b) => b.id)), [id], 'the claimed spare is a box, not a spare');
    await untilReady(m, 1, 'the recovered Manager makes a new spare');
    assert.ok(!(await sparesOf(m)).includes(spare));

    // A Manager that restarts with its spares running adopts them instead of making new ones.
    const before = await sparesOf(m);
    await m.close();
    const again = newManager([{ image: IMAGE, size: 1 }], {}, name);
    await again.start();
    await untilReady(again, 1);
    assert.deepEqual(await sparesOf(again), before, 'the same spare, re-adopted');
    assert.equal((await again.get(id)).containerId, spare);

    // A changed template: the old spare is removed and one of the new shape is made.
    await again.close();
    const changed = newManager([{ image: IMAGE, size: 1, memory: 256 * 1024 * 1024 }], {}, name);
    await changed.start();
    await untilReady(changed, 1);
    const [fresh] = await sparesOf(changed);
    assert.ok(fresh && !before.includes(fresh), 'a spare of the new template');
    assert.equal((await sparesOf(changed)).length, 1, 'the old template’s spare is gone');
    await (await changed.get(id)).remove();
    await changed.removePool('local', { force: true });
  });
});
