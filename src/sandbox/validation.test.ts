/**
 * Bad input from a hostile caller: each is refused with invalid_argument naming the field, and
 * the engine sees no request at all (counted by a wrapping Runtime). Positive controls show the
 * same calls go through when the input is fine.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { after, before, describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { ExecOptions, ExecStreamOptions } from '../runtime/types.js';
import { CountingRuntime } from '../testing/counting-runtime.js';
import { testEnv } from '../testing/env.js';
import type { Box } from './box.js';
import { loadConfig } from './config.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';
import type { CreateOptions } from './types.js';

const IMAGE = testEnv.baseImage;
const MiB = 1024 * 1024;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-validation-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const counting = new CountingRuntime(engine);
const manager = new Manager({
  name: `val-${process.pid}`,
  pools: [{ name: 'local', runtime: counting, maxMemory: 4096 * MiB, maxCpus: 2 }],
  dataDir,
  cleanupIntervalMs: 0,
  logger: pino({ level: 'silent' }),
});
let box: Box;

before(async () => {
  await manager.start();
  box = await manager.create({ image: IMAGE });
});

after(async () => {
  await box?.remove().catch(() => undefined);
  const left = await engine.list({ labels: managerSelector(manager.config.name) });
  await Promise.all(left.map((c) => engine.remove(c.id, { force: true })));
  await manager.close();
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(
    left.map((c) => c.name),
    [],
    'containers left behind',
  );
});

const NUL = '\0';

/** [what, options, the field the error must name] */
const badCreates: Array<[string, unknown, string]> = [
  ['no options', undefined, 'options'],
  ['options not an object', 'sbx-base', 'options'],
  ['options an array', [IMAGE], 'options'],
  ['no image', {}, 'image'],
  ['empty image', { image: '' }, 'image'],
  ['image with uppercase repository', { image: 'Sbx-Base:latest' }, 'image'],
  ['image with a space', { image: 'sbx base' }, 'image'],
  ['image with ..', { image: '../etc/passwd' }, 'image'],
  ['image with NUL', { image: `sbx-base${NUL}` }, 'image'],
  ['image with a bad tag', { image: 'sbx-base:-x' }, 'image'],
  ['image with a bad digest', { image: 'sbx-base@sha256:xyz' }, 'image'],
  ['image not a string', { image: 42 }, 'image'],
  ['unknown field', { image: IMAGE, imagee: 'x' }, 'options'],
  ['bad id', { image: IMAGE, id: '../x' }, 'id'],
  ['id too long', { image: IMAGE, id: 'a'.repeat(64) }, 'id'],
  ['owner with NUL', { image: IMAGE, owner: `alice${NUL}` }, 'owner'],
  ['owner with a newline', { image: IMAGE, owner: 'alice\nbob' }, 'owner'],
  ['owner empty', { image: IMAGE, owner: '' }, 'owner'],
  ['label value with a control character', { image: IMAGE, labels: { a: 'x\u0007' } }, 'labels.a'],
  ['label key with a space', { image: IMAGE, labels: { 'a b': 'x' } }, 'labels.a b'],
  ['env key with =', { image: IMAGE, env: { 'A=B': 'x' } }, 'env.A=B'],
  ['env value with NUL', { image: IMAGE, env: { A: `x${NUL}y` } }, 'env.A'],
  ['env SBX_ variable', { image: IMAGE, env: { SBX_TOKEN: 'mine' } }, 'env.SBX_TOKEN'],
  ['env value not a string', { image: IMAGE, env: { A: 1 } }, 'env.A'],
  ['cmd empty', { image: IMAGE, cmd: [] }, 'cmd'],
  ['cmd [""]', { image: IMAGE, cmd: [''] }, 'cmd'],
  ['cmd with NUL', { image: IMAGE, cmd: ['sh', `-c${NUL}`] }, 'cmd.1'],
  ['cmd not an array', { image: IMAGE, cmd: 'sh -c true' }, 'cmd'],
  ['workDir relative', { image: IMAGE, workDir: 'tmp' }, 'workDir'],
  ['workDir with ..', { image: IMAGE, workDir: '/a/../etc' }, 'workDir'],
  ['user with a space', { image: IMAGE, user: 'root user' }, 'user'],
  ['memory below 6 MiB', { image: IMAGE, memory: 1024 }, 'memory'],
  ['memory absurd', { image: IMAGE, memory: Number.MAX_SAFE_INTEGER }, 'memory'],
  ['memory above the pool ceiling', { image: IMAGE, memory: 8192 * MiB }, 'memory'],
  ['memory fractional', { image: IMAGE, memory: 10 * MiB + 0.5 }, 'memory'],
  ['cpus absurdly small', { image: IMAGE, cpus: 1e-9 }, 'cpus'],
  ['cpus negative', { image: IMAGE, cpus: -1 }, 'cpus'],
  ['cpus above the pool ceiling', { image: IMAGE, cpus: 3 }, 'cpus'],
  ['cpus NaN', { image: IMAGE, cpus: Number.NaN }, 'cpus'],
  ['pidsLimit 0', { image: IMAGE, pidsLimit: 0 }, 'pidsLimit'],
  ['policy unknown', { image: IMAGE, policy: 'forever' }, 'policy'],
  ['idleTimeoutMs negative', { image: IMAGE, idleTimeoutMs: -5 }, 'idleTimeoutMs'],
  ['maxLifetimeMs NaN', { image: IMAGE, maxLifetimeMs: Number.NaN }, 'maxLifetimeMs'],
  ['stopTimeoutMs as a string', { image: IMAGE, stopTimeoutMs: '30s' }, 'stopTimeoutMs'],
  ['network host', { image: IMAGE, network: 'host' }, 'network'],
  ['strict profile with a network', { image: IMAGE, security: 'strict', network: 'bridge' }, 'network'],
  ['security unknown', { image: IMAGE, security: 'none' }, 'security'],
  ['port on all interfaces', { image: IMAGE, ports: [{ containerPort: 80, hostIp: '0.0.0.0' }] }, 'ports.0.hostIp'],
  ['port 0', { image: IMAGE, ports: [{ containerPort: 0 }] }, 'ports.0.containerPort'],
  ['mountPath /', { image: IMAGE, mountPath: '/' }, 'mountPath'],
  ['mountMode unknown', { image: IMAGE, mountMode: 'rwx' }, 'mountMode'],
  ['workspaceId with ..', { image: IMAGE, workspaceId: '../ws' }, 'workspaceId'],
];

const badExecs: Array<[string, unknown, ExecOptions | Record<string, unknown> | undefined, string]> = [
  ['cmd empty', [], undefined, 'cmd'],
  ['cmd [""]', [''], undefined, 'cmd'],
  ['cmd not an array', 'echo hi', undefined, 'cmd'],
  ['cmd with NUL', ['echo', `a${NUL}b`], undefined, 'cmd.1'],
  ['timeoutMs negative', ['true'], { timeoutMs: -1 }, 'timeoutMs'],
  ['timeoutMs NaN', ['true'], { timeoutMs: Number.NaN }, 'timeoutMs'],
  ['timeoutMs Infinity', ['true'], { timeoutMs: Infinity }, 'timeoutMs'],
  ['env key with =', ['true'], { env: { 'A=B': 'x' } }, 'env.A=B'],
  ['env value with NUL', ['true'], { env: { A: `x${NUL}` } }, 'env.A'],
  ['workDir relative', ['true'], { workDir: 'tmp' }, 'workDir'],
  ['user with a space', ['true'], { user: 'a b' }, 'user'],
  ['maxOutputBytes 0', ['true'], { maxOutputBytes: 0 }, 'maxOutputBytes'],
  ['stdin a number', ['cat'], { stdin: 5 }, 'stdin'],
  ['unknown option', ['true'], { cwd: '/' }, 'options'],
  ['signal not an AbortSignal', ['true'], { signal: {} }, 'signal'],
];

const badStreams: Array<[string, unknown, ExecStreamOptions | Record<string, unknown>, string]> = [
  ['size zero', ['cat'], { tty: true, size: { cols: 0, rows: 10 } }, 'size.cols'],
  ['tty not a boolean', ['cat'], { tty: 'yes' }, 'tty'],
  ['timeoutMs negative', ['cat'], { timeoutMs: -10 }, 'timeoutMs'],
];

function refused(field: string) {
  return (e: unknown) => {
    assert.ok(isSbxError(e, 'invalid_argument'), `expected invalid_argument, got ${String(e)}`);
    assert.equal(e.details?.['field'], field, `field of: ${e.message}`);
    return true;
  };
}

type WorkspaceCall = (m: Manager, fs: Awaited<ReturnType<Manager['workspaces']['fs']>>) => Promise<unknown>;
const ws = (opts: Record<string, unknown>) => (m: Manager) => m.workspaces.create({ name: 'w', owner: 'val', node: 'local', ...opts } as never);
const badWorkspaceCalls: Array<[string, WorkspaceCall, string]> = [
  ['workspace name missing', (m) => m.workspaces.create({ owner: 'val', node: 'local' } as never), 'name'],
  ['workspace name blank', ws({ name: '   ' }), 'name'],
  ['workspace name with NUL', ws({ name: `a${NUL}b` }), 'name'],
  ['workspace name with a newline', ws({ name: 'a\nb' }), 'name'],
  ['workspace name too long', ws({ name: 'n'.repeat(257) }), 'name'],
  ['workspace owner with a control character', ws({ owner: 'a\u0007' }), 'owner'],
  ['workspace node missing', (m) => m.workspaces.create({ name: 'w', owner: 'val' } as never), 'node'],
  ['workspace node with ..', ws({ node: '../etc' }), 'node'],
  ['workspace id uppercase', ws({ id: 'WS-1' }), 'id'],
  ['workspace id with /', ws({ id: 'a/b' }), 'id'],
  ['workspace label value with NUL', ws({ labels: { a: `x${NUL}` } }), 'labels.a'],
  ['workspace labels not an object', ws({ labels: ['a'] }), 'labels'],
  ['workspace quota negative', ws({ quotaBytes: -1 }), 'quotaBytes'],
  ['workspace quota fractional', ws({ quotaBytes: 1.5 }), 'quotaBytes'],
  ['workspace unknown field', ws({ size: 10 }), 'options'],
  ['workspace update unknown field', (m) => m.workspaces.update('ws-nope', { owner: 'x' } as never), 'changes'],
  ['workspace update name NUL', (m) => m.workspaces.update('ws-nope', { name: NUL }), 'name'],
  ['workspace delete unknown option', (m) => m.workspaces.delete('ws-nope', { recursive: true } as never), 'options'],
  ['writeFile mode too big', (_m, fs) => fs.writeFile('a.txt', 'x', { mode: 0o10000 }), 'mode'],
  ['writeFile mode fractional', (_m, fs) => fs.writeFile('a.txt', 'x', { mode: 1.5 }), 'mode'],
  ['writeFile unknown option', (_m, fs) => fs.writeFile('a.txt', 'x', { owner: 0 } as never), 'options'],
  ['mkdirAll mode negative', (_m, fs) => fs.mkdirAll('d', -1), 'mode'],
  ['readDir recursive not a boolean', (_m, fs) => fs.readDir('', { recursive: 'yes' } as never), 'recursive'],
  ['readDir unknown option', (_m, fs) => fs.readDir('', { follow: true } as never), 'options'],
];

describe('bad input is refused before any engine request', () => {
  test(`create: ${badCreates.length} bad options`, async () => {
    for (const [what, opts, field] of badCreates) {
      counting.reset();
      await assert.rejects(manager.create(opts as CreateOptions), refused(field), what);
      await assert.rejects(manager.getOrCreate({ id: 'same', ...(opts as object) } as CreateOptions), (e) => isSbxError(e, 'invalid_argument'), what);
      assert.deepEqual(counting.counts(), {}, `${what}: the engine saw requests`);
    }
    assert.equal((await manager.list()).length, 1, 'only the fixture box exists');
  });

  test(`exec: ${badExecs.length} bad calls, on the box and on the runtime`, async () => {
    for (const [what, cmd, opts, field] of badExecs) {
      counting.reset();
      await assert.rejects(box.exec(cmd as string[], opts as ExecOptions), refused(field), `box.exec ${what}`);
      await assert.rejects(counting.inner.exec(box.containerId, cmd as string[], opts as ExecOptions), refused(field), `runtime.exec ${what}`);
      assert.deepEqual(counting.counts(), {}, `${what}: the engine saw requests`);
    }
  });

  test(`stream: ${badStreams.length} bad calls`, async () => {
    for (const [what, cmd, opts, field] of badStreams) {
      counting.reset();
      await assert.rejects(box.stream(cmd as string[], opts as ExecStreamOptions), refused(field), what);
      assert.deepEqual(counting.counts(), {}, `${what}: the engine saw requests`);
    }
  });

  test(`workspaces and files: ${badWorkspaceCalls.length} bad calls, refused by the one schema, nothing written`, async () => {
    const ws = await manager.workspaces.create({ name: 'fixture', owner: 'val', node: 'local' });
    const fs = await manager.workspaces.fs(ws.id);
    for (const [what, call, field] of badWorkspaceCalls) await assert.rejects(call(manager, fs), refused(field), what);
    assert.deepEqual(
      (await manager.workspaces.list()).map((w) => w.name),
      ['fixture'],
      'no bad create made a workspace',
    );
    assert.deepEqual(await fs.readDir(''), [], 'no bad write made a file');
    await manager.workspaces.delete(ws.id);
  });

  test('image references are parsed before the engine, for pulls and lookups too', async () => {
    counting.reset();
    await assert.rejects(manager.imageExists('local', 'UPPER/case'), refused('ref'));
    assert.throws(() => manager.pullImage('local', 'a b'), refused('ref'));
    assert.equal(counting.total(), 0);
  });

  test('the config loader refuses the same bounds, naming the key', () => {
    const env = { SBX_POOL_LOCAL_MEMORY: '1k' };
    assert.throws(() => loadConfig({ env }), refused('pools.0.memory'));
    assert.throws(() => loadConfig({ env: { SBX_POOL_LOCAL_CPUS: '0.001' } }), refused('pools.0.cpus'));
    assert.throws(() => loadConfig({ env: { SBX_POOL_LOCAL_IDLE_TIMEOUT: '-5m' } }), refused('pools.0.idleTimeout'));
  });

  test('positive controls: the same calls with good input reach the engine and work', async () => {
    counting.reset();
    const ok = await box.exec(['sh', '-c', 'echo "$A" $(pwd)'], { env: { A: 'x=y' }, workDir: '/tmp', timeoutMs: 10_000, maxOutputBytes: 1024 });
    assert.equal(ok.stdout, 'x=y /tmp\n');
    assert.ok(counting.total() > 0);
    const sized = await manager.create({ image: 'sbx-base:latest', memory: 64 * MiB, cpus: 0.5, owner: 'alice@example.com', labels: { 'team/x': 'a b' } });
    try {
      const info = await sized.info();
      assert.equal(info.owner, 'alice@example.com');
      const limits = await sized.exec(['cat', '/sys/fs/cgroup/memory/memory.limit_in_bytes']);
      assert.equal(limits.stdout.trim(), String(64 * MiB));
    } finally {
      await sized.remove();
    }
    assert.equal(await manager.imageExists('local', IMAGE), true);
  });

  test('boxes get the pool default memory and cpus when they ask for none', async () => {
    const b = await manager.create({ image: IMAGE });
    try {
      const mem = await b.exec(['cat', '/sys/fs/cgroup/memory/memory.limit_in_bytes']);
      assert.equal(mem.stdout.trim(), String(1024 * MiB));
      const cpu = await b.exec(['sh', '-c', 'cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us']);
      const [quota, period] = cpu.stdout.trim().split('\n').map(Number);
      assert.equal(quota! / period!, 1);
    } finally {
      await b.remove();
    }
  });
});
