/**
 * The seed's JSAPI tables, row by row, against a real engine: each call made with the seed's
 * snake_case names, its snake_case result checked, and the behaviour checked where it lands
 * (inside the box, on the engine, on disk).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { Manager } from '../sandbox/manager.js';
import type { ManagerConfig } from '../sandbox/config.js';
import { managerSelector } from '../sandbox/labels.js';
import { testEnv } from '../testing/env.js';
import { sandbox, workspace } from './index.js';
import type { Box, WorkspaceFS } from './index.js';

const IMAGE = testEnv.baseImage;
const MiB = 1024 * 1024;
const name = `jsapi-${process.pid}`;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-jsapi-'));
const hostDir = mkdtempSync(join(tmpdir(), 'sbx-jsapi-host-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const config: ManagerConfig = {
  name,
  dataDir,
  pools: [
    { name: 'local', addr: testEnv.engineAddr },
    { name: 'other', addr: testEnv.engineAddr },
  ],
  cleanupIntervalMs: 0,
  logger: pino({ level: 'silent' }),
};

const BOX_INFO_KEYS = ['container_id', 'created_at', 'id', 'image', 'labels', 'last_active', 'owner', 'policy', 'pool', 'process_count', 'status', 'vnc'];
const WORKSPACE_INFO_KEYS = ['created_at', 'id', 'labels', 'name', 'node', 'owner', 'updated_at'];
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

function containers() {
  return engine.list({ labels: managerSelector(name) });
}

/** Boxes made in a test, removed at its end even when it fails. */
async function withBoxes(fn: (keep: (b: Box) => Box) => Promise<void>): Promise<void> {
  const made: Box[] = [];
  try {
    await fn((b) => {
      made.push(b);
      return b;
    });
  } finally {
    for (const b of made) await sandbox.Delete(b.id).catch(() => undefined);
  }
}

async function ensureInit(): Promise<void> {
  try {
    sandbox.M();
  } catch {
    await sandbox.Init(config);
  }
}

const invalid = (field: string) => (e: unknown) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === field;

after(async () => {
  // Each test removes its boxes; anything left is a leak, reported after it is swept.
  const left = await containers();
  await Promise.all(left.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
  await sandbox
    .M()
    .close()
    .catch(() => undefined);
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(hostDir, { recursive: true, force: true });
  assert.deepEqual(
    left.map((c) => c.name),
    [],
    'containers left behind by the jsapi tests',
  );
});

test('sandbox.M() and workspace.M() before Init: not_available naming Init', () => {
  assert.throws(
    () => sandbox.M(),
    (e) => isSbxError(e, 'not_available') && /sandbox\.Init\(config\)/.test(e.message),
  );
  assert.throws(
    () => workspace.M(),
    (e) => isSbxError(e, 'not_available'),
  );
});

describe('sandbox.Init(config) / sandbox.M()', () => {
  test('Init creates and starts the Manager: boxes made before are recovered; a second Init replaces the first', async () => {
    // A box another process of the same name made: only a started Manager knows it.
    const earlier = new Manager(config);
    const made = await earlier.create({ image: IMAGE, owner: 'alice', policy: 'persistent' });
    await earlier.close();

    const first = await sandbox.Init(config);
    assert.equal(sandbox.M(), first);
    assert.equal(workspace.M(), first.workspaces);
    const found = await sandbox.Get(made.id);
    assert.ok(found, 'Init started the Manager, which recovered the box');
    assert.equal((await found.Exec(['echo', 'recovered'])).stdout, 'recovered\n');

    // Overlapping Inits: the one called last is the Manager M() gives.
    const [, second] = await Promise.all([sandbox.Init(config), sandbox.Init(config)]);
    assert.notEqual(second, first);
    assert.equal(sandbox.M(), second);
    // The Box object holds an id: it keeps working through the new Manager.
    assert.equal((await found.Exec(['echo', 'again'])).exit_code, 0);
    await sandbox.Delete(made.id);
    assert.deepEqual(await containers(), []);

    // A bad config: no Manager at all rather than the closed one.
    await assert.rejects(sandbox.Init({ ...config, pools: [{ name: 'Bad Name' }] }), (e) => isSbxError(e, 'invalid_argument'));
    assert.throws(
      () => sandbox.M(),
      (e) => isSbxError(e, 'not_available'),
    );
    await sandbox.Init(config);
  });
});

describe('sandbox namespace', () => {
  before(async () => {
    // Run alone (--test-name-pattern), the Init test may not have run.
    await ensureInit();
  });

  test('Create(opts) → Box: a new box with a generated id, running', async () => {
    await withBoxes(async (keep) => {
      const box = keep(await sandbox.Create({ owner: 'alice', image: IMAGE }));
      assert.match(box.id, /^sb-[0-9a-f]{12}$/);
      assert.equal(box.owner, 'alice');
      assert.equal(box.pool, 'local', 'default: the first pool');
      assert.equal((await box.Exec(['echo', 'made'])).stdout, 'made\n');
      assert.equal((await containers()).length, 1);
    });
  });

  test('Create(opts) with id → GetOrCreate: twice gives the same box and one container', async () => {
    await withBoxes(async (keep) => {
      const id = `js-${randomBytes(3).toString('hex')}`;
      const a = keep(await sandbox.Create({ id, owner: 'alice', image: IMAGE }));
      const b = await sandbox.Create({ id, owner: 'alice', image: IMAGE });
      assert.equal(a.id, id);
      assert.equal(b.id, id);
      assert.equal((await a.Info()).container_id, (await b.Info()).container_id);
      assert.equal((await containers()).length, 1);
      await assert.rejects(sandbox.Create({ id, owner: 'bob', image: IMAGE }), (e) => isSbxError(e, 'conflict'));
    });
  });

  test('Create options: workdir, user, env, memory, cpus, ports reach the container', async () => {
    await withBoxes(async (keep) => {
      const box = keep(
        await sandbox.Create({
          owner: 'alice',
          image: IMAGE,
          workdir: '/tmp',
          user: '1000:1000',
          env: { GREETING: 'hi there' },
          memory: 64 * MiB,
          cpus: 0.5,
          ports: [{ container: 8080, host: 0, host_ip: '127.0.0.1', protocol: 'tcp' }],
        }),
      );
      const r = await box.Exec([
        'sh',
        '-c',
        'pwd; id -u; id -g; echo "$GREETING"; cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us',
      ]);
      assert.equal(r.exit_code, 0, r.stderr);
      const [pwd, uid, gid, greeting, memory, quota, period] = r.stdout.trim().split('\n');
      assert.deepEqual([pwd, uid, gid, greeting, memory], ['/tmp', '1000', '1000', 'hi there', String(64 * MiB)]);
      assert.equal(Number(quota) / Number(period), 0.5);
      const ports = (await engine.inspect((await box.Info()).container_id)).ports;
      assert.equal(ports.length, 1);
      assert.equal(ports[0]!.containerPort, 8080);
      assert.equal(ports[0]!.hostIp, '127.0.0.1');
      assert.ok(ports[0]!.hostPort > 0, 'host 0 picks a free port');
    });
  });

  test('Create options: pool, policy, idle_timeout, stop_timeout, vnc, labels', async () => {
    await withBoxes(async (keep) => {
      const box = keep(
        await sandbox.Create({
          owner: 'alice',
          image: IMAGE,
          pool: 'other',
          policy: 'longrunning',
          idle_timeout: 90_000,
          stop_timeout: 1_500,
          vnc: true,
          labels: { team: 'a' },
        }),
      );
      assert.equal(box.pool, 'other');
      const info = await box.Info();
      assert.equal(info.pool, 'other');
      assert.equal(info.policy, 'longrunning');
      assert.equal(info.vnc, true);
      assert.deepEqual(info.labels, { team: 'a' });
      // Durations are milliseconds on both sides: no unit conversion on the way.
      const lib = await (await sandbox.M().get(box.id)).info();
      assert.equal(lib.idleTimeoutMs, 90_000);
      assert.equal(lib.stopTimeoutMs, 1_500);
    });
  });

  test('Create options: workspace_id, mount_mode, mount_path mount the workspace', async () => {
    await withBoxes(async (keep) => {
      const ws = await workspace.Create({ name: 'mounted', owner: 'alice', node: 'other' });
      await ws.WriteFile('hello.txt', 'from the host\n');
      const box = keep(await sandbox.Create({ owner: 'alice', image: IMAGE, workspace_id: ws.id, mount_mode: 'ro', mount_path: '/data' }));
      assert.equal(box.pool, 'other', "the box runs on the workspace's node");
      assert.equal((await box.Exec(['cat', '/data/hello.txt'])).stdout, 'from the host\n');
      const write = await box.Exec(['sh', '-c', 'echo x > /data/new.txt']);
      assert.notEqual(write.exit_code, 0, 'mount_mode ro: the box cannot write');
      const rw = keep(await sandbox.Create({ owner: 'alice', image: IMAGE, workspace_id: ws.id }));
      assert.equal((await rw.Exec(['sh', '-c', 'echo from-box > /workspace/box.txt'])).exit_code, 0, 'default: rw at /workspace');
      assert.equal(await ws.ReadFile('box.txt'), 'from-box\n');
    });
  });

  test('Create refuses unknown options and names the seed fields in its errors; nothing is created', async () => {
    await assert.rejects(sandbox.Create({ owner: 'alice', image: IMAGE, workDir: '/tmp' } as never), (e) => invalid('workDir')(e) && /workdir/.test(String(e)));
    await assert.rejects(sandbox.Create({ image: IMAGE } as never), invalid('owner'));
    await assert.rejects(
      sandbox.Create({ owner: 'alice', image: IMAGE, idle_timeout: -1 }),
      (e) => invalid('idle_timeout')(e) && !/idleTimeoutMs/.test(String(e)),
    );
    await assert.rejects(sandbox.Create({ owner: 'alice', image: IMAGE, workdir: 'relative' }), (e) => invalid('workdir')(e) && !/workDir/.test(String(e)));
    await assert.rejects(sandbox.Create({ owner: 'alice', image: IMAGE, ports: [{ container: 0 }] }), invalid('ports.0.container'));
    await assert.rejects(sandbox.Create({ owner: 'alice', image: IMAGE, ports: [{ container: 80, hostPort: 1 } as never] }), invalid('ports.0.hostPort'));
    assert.deepEqual(await containers(), []);
  });

  test('Get(id) → Box | null', async () => {
    await withBoxes(async (keep) => {
      const made = keep(await sandbox.Create({ owner: 'carol', image: IMAGE }));
      const got = await sandbox.Get(made.id);
      assert.ok(got);
      assert.deepEqual([got.id, got.owner, got.pool], [made.id, 'carol', 'local']);
      assert.equal(await sandbox.Get('no-such-box'), null);
    });
  });

  test('List(filter) → BoxInfo[]: owner, pool and labels filter; empty fields mean all', async () => {
    await withBoxes(async (keep) => {
      const a = keep(await sandbox.Create({ owner: 'alice', image: IMAGE, labels: { role: 'web' } }));
      const b = keep(await sandbox.Create({ owner: 'bob', image: IMAGE, pool: 'other', labels: { role: 'db' } }));
      const ids = (infos: Array<{ id: string }>) => infos.map((i) => i.id).sort();
      assert.deepEqual(ids(await sandbox.List()), [a.id, b.id].sort());
      assert.deepEqual(ids(await sandbox.List({ owner: '', pool: '' })), [a.id, b.id].sort());
      assert.deepEqual(ids(await sandbox.List({ owner: 'alice' })), [a.id]);
      assert.deepEqual(ids(await sandbox.List({ pool: 'other' })), [b.id]);
      assert.deepEqual(ids(await sandbox.List({ labels: { role: 'db' } })), [b.id]);
      assert.deepEqual(ids(await sandbox.List({ owner: 'alice', labels: { role: 'db' } })), []);
      const [info] = await sandbox.List({ owner: 'bob' });
      assert.deepEqual(Object.keys(info!).sort(), BOX_INFO_KEYS);
      assert.equal(info!.owner, 'bob');
      assert.equal(info!.pool, 'other');
      assert.equal(info!.status, 'running');
      await assert.rejects(sandbox.List({ Owner: 'alice' } as never), invalid('Owner'));
    });
  });

  test('Delete(id) → the container is gone; again → not_found', async () => {
    const box = await sandbox.Create({ owner: 'alice', image: IMAGE });
    assert.equal((await containers()).length, 1);
    await sandbox.Delete(box.id);
    assert.deepEqual(await containers(), []);
    assert.equal(await sandbox.Get(box.id), null);
    await assert.rejects(sandbox.Delete(box.id), (e) => isSbxError(e, 'not_found'));
  });
});

describe('Box object', () => {
  let box: Box;
  before(async () => {
    await ensureInit();
    box = await sandbox.Create({ owner: 'dave', image: IMAGE, labels: { k: 'v' } });
  });
  after(async () => {
    await sandbox.Delete(box.id).catch(() => undefined);
  });

  test('box.id, box.owner, box.pool', () => {
    assert.match(box.id, /^sb-/);
    assert.equal(box.owner, 'dave');
    assert.equal(box.pool, 'local');
  });

  test('box.Exec(cmd, {workdir, env, timeout}) → {exit_code, stdout, stderr}', async () => {
    const r = await box.Exec(['sh', '-c', 'pwd; echo "$X"; echo oops >&2; exit 3'], { workdir: '/etc', env: { X: 'y' }, timeout: 10_000 });
    assert.deepEqual(r, { exit_code: 3, stdout: '/etc\ny\n', stderr: 'oops\n' });
    // 137, not the 0 of a sleep that ran out: read as seconds, 300 would outlast the sleep.
    const killed = await box.Exec(['sleep', '30'], { timeout: 300 });
    assert.equal(killed.exit_code, 137, 'timeout is milliseconds: the process is killed');
    await assert.rejects(box.Exec(['true'], { timeoutMs: 5 } as never), invalid('timeoutMs'));
    await assert.rejects(box.Exec(['true'], { workdir: 'rel' }), invalid('workdir'));
  });

  test('box.Stream(cmd, opts) → {stdout, stderr, stdin, wait, cancel}', async () => {
    const s = await box.Stream(['sh', '-c', 'cat; echo "$X" >&2; pwd >&2'], { env: { X: 'streamed' }, workdir: '/tmp' });
    assert.deepEqual(Object.keys(s).sort(), ['cancel', 'stderr', 'stdin', 'stdout', 'wait']);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    s.stdout.on('data', (c: Buffer) => out.push(c));
    s.stderr.on('data', (c: Buffer) => err.push(c));
    s.stdin.end('piped in\n');
    assert.equal(await s.wait(), 0);
    assert.equal(Buffer.concat(out).toString(), 'piped in\n');
    assert.equal(Buffer.concat(err).toString(), 'streamed\n/tmp\n');

    const long = await box.Stream(['sleep', '60']);
    long.stdout.resume();
    long.stderr.resume();
    await long.cancel();
    const code = await long.wait();
    assert.notEqual(code, 0, 'cancel kills the process (a sleep that ran out would be 0)');
  });

  test('box.Attach, box.VNC, box.Proxy call the library: an echo over Attach; VNC and Proxy refusals name why', async () => {
    const svc = await sandbox.Create({ owner: 'alice', image: testEnv.testImage, ports: [{ container: 3000 }] });
    try {
      const conn = await svc.Attach(3000);
      assert.equal(conn.protocol, 'ws');
      if (conn.protocol !== 'ws') return;
      conn.send('over jsapi');
      for await (const m of conn) {
        assert.deepEqual(m, { type: 'text', data: 'over jsapi' });
        break;
      }
      conn.close();
      await assert.rejects(svc.Attach(3001, { protocol: 'sse' }), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'port_not_exposed');
    } finally {
      await sandbox.Delete(svc.id);
    }
    await assert.rejects(box.VNC(), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'vnc_not_enabled');
    await assert.rejects(box.Proxy(8080, '/'), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'port_not_exposed');
  });

  test('box.Workspace() → WorkspaceFS of the mounted workspace; none → not_found', async () => {
    await assert.rejects(box.Workspace(), (e) => isSbxError(e, 'not_found'));
    const ws = await workspace.Create({ name: 'for-box', owner: 'dave', node: 'local' });
    const mounted = await sandbox.Create({ owner: 'dave', image: IMAGE, workspace_id: ws.id });
    try {
      const files = await mounted.Workspace();
      assert.deepEqual([files.id, files.name, files.node], [ws.id, 'for-box', 'local']);
      await files.WriteFile('via-box.txt', 'seen inside\n');
      assert.equal((await mounted.Exec(['cat', '/workspace/via-box.txt'])).stdout, 'seen inside\n');
    } finally {
      await sandbox.Delete(mounted.id);
    }
  });

  test('box.Info() → BoxInfo with the seed fields and ISO times', async () => {
    const info = await box.Info();
    assert.deepEqual(Object.keys(info).sort(), BOX_INFO_KEYS);
    assert.equal(info.id, box.id);
    assert.equal(info.owner, 'dave');
    assert.equal(info.pool, 'local');
    assert.equal(info.status, 'running');
    assert.equal(info.image, IMAGE);
    assert.equal(info.vnc, false);
    assert.equal(info.policy, 'session');
    assert.deepEqual(info.labels, { k: 'v' });
    assert.match(info.created_at, ISO);
    assert.match(info.last_active, ISO);
    assert.equal(info.process_count, 0);
    assert.equal((await engine.inspect(info.container_id)).running, true);
  });

  test('box.Stop() and box.Start()', async () => {
    await box.Stop();
    assert.equal((await box.Info()).status, 'stopped');
    assert.equal((await engine.inspect((await box.Info()).container_id)).running, false);
    await box.Start();
    assert.equal((await box.Info()).status, 'running');
    assert.equal((await box.Exec(['echo', 'back'])).stdout, 'back\n');
  });

  test('box.Remove() → the container is gone; the object then fails not_found', async () => {
    const doomed = await sandbox.Create({ owner: 'dave', image: IMAGE });
    const containerId = (await doomed.Info()).container_id;
    await doomed.Remove();
    await assert.rejects(engine.inspect(containerId), (e) => isSbxError(e, 'not_found'));
    await assert.rejects(doomed.Exec(['true']), (e) => isSbxError(e, 'not_found'));
  });
});

describe('workspace namespace', () => {
  before(ensureInit);
  test('Create(opts) → WorkspaceFS: id, name, owner, node, labels', async () => {
    const id = `ws-js-${randomBytes(3).toString('hex')}`;
    const ws = await workspace.Create({ id, name: 'named', owner: 'erin', node: 'other', labels: { team: 'x' } });
    assert.deepEqual([ws.id, ws.name, ws.node], [id, 'named', 'other']);
    const stored = await workspace.M().get(id);
    assert.equal(stored.owner, 'erin');
    assert.deepEqual(stored.labels, { team: 'x' });
    const generated = await workspace.Create({ name: 'auto', owner: 'erin', node: 'local' });
    assert.match(generated.id, /^ws-/);
    await assert.rejects(workspace.Create({ id, name: 'again', owner: 'erin', node: 'other' }), (e) => isSbxError(e, 'conflict'));
    await assert.rejects(workspace.Create({ name: 'q', owner: 'erin', node: 'local', quotaBytes: 1 } as never), invalid('quotaBytes'));
  });

  test('Get(id) → WorkspaceFS | null', async () => {
    const made = await workspace.Create({ name: 'got', owner: 'erin', node: 'local' });
    const got = await workspace.Get(made.id);
    assert.ok(got);
    assert.deepEqual([got.id, got.name, got.node], [made.id, 'got', 'local']);
    assert.equal(await workspace.Get('ws-missing'), null);
  });

  test('List(filter) → WorkspaceInfo[]: owner and node filter; empty fields mean all', async () => {
    const a = await workspace.Create({ name: 'la', owner: 'frank', node: 'local', labels: { a: '1' } });
    const b = await workspace.Create({ name: 'lb', owner: 'frank', node: 'other' });
    const c = await workspace.Create({ name: 'lc', owner: 'gina', node: 'other' });
    const ids = (infos: Array<{ id: string }>) => infos.map((i) => i.id).sort();
    assert.deepEqual(ids(await workspace.List({ owner: 'frank' })), [a.id, b.id].sort());
    assert.deepEqual(ids(await workspace.List({ owner: 'frank', node: 'other' })), [b.id]);
    assert.ok(ids(await workspace.List({ owner: '', node: '' })).includes(c.id));
    assert.ok(ids(await workspace.List()).includes(c.id));
    const [info] = (await workspace.List({ owner: 'frank', node: 'local' })).filter((w) => w.id === a.id);
    assert.deepEqual(Object.keys(info!).sort(), WORKSPACE_INFO_KEYS);
    assert.deepEqual([info!.name, info!.owner, info!.node, info!.labels], ['la', 'frank', 'local', { a: '1' }]);
    assert.match(info!.created_at, ISO);
    assert.match(info!.updated_at, ISO);
  });

  test('Delete(id) → gone with its files; while a box mounts it → conflict', async () => {
    const ws = await workspace.Create({ name: 'doomed', owner: 'erin', node: 'local' });
    await ws.WriteFile('f.txt', 'x');
    const root = await workspace.M().mountPath(ws.id);
    const box = await sandbox.Create({ owner: 'erin', image: IMAGE, workspace_id: ws.id });
    try {
      await assert.rejects(workspace.Delete(ws.id), (e) => isSbxError(e, 'conflict'));
    } finally {
      await sandbox.Delete(box.id);
    }
    await workspace.Delete(ws.id);
    assert.equal(await workspace.Get(ws.id), null);
    assert.throws(() => statSync(root), /ENOENT/);
    await assert.rejects(ws.ReadFile('f.txt'), (e) => isSbxError(e, 'not_found'));
  });
});

describe('WorkspaceFS object', () => {
  let ws: WorkspaceFS;
  let root: string;
  before(async () => {
    await ensureInit();
    ws = await workspace.Create({ name: 'files', owner: 'hank', node: 'local' });
    root = await workspace.M().mountPath(ws.id);
  });

  test('ws.id, ws.name, ws.node', () => {
    assert.match(ws.id, /^ws-/);
    assert.equal(ws.name, 'files');
    assert.equal(ws.node, 'local');
  });

  test('ws.WriteFile(path, data, perm) / ws.ReadFile(path) → string', async () => {
    await ws.WriteFile('dir/note.txt', 'héllo\n', 0o600);
    assert.equal(await ws.ReadFile('dir/note.txt'), 'héllo\n');
    assert.equal(statSync(join(root, 'dir/note.txt')).mode & 0o777, 0o600);
    await ws.WriteFile('bytes.bin', new Uint8Array([104, 105]));
    assert.equal(await ws.ReadFile('bytes.bin'), 'hi');
    assert.equal(statSync(join(root, 'bytes.bin')).mode & 0o777, 0o644, 'default perm');
    await assert.rejects(ws.ReadFile('../escape'), (e) => isSbxError(e, 'invalid_argument'));
    await assert.rejects(ws.WriteFile('bad-perm.txt', 'x', 0o10000), (e) => invalid('perm')(e) && /^perm:/.test((e as Error).message));
  });

  test('ws.ReadDir(path?) → DirEntry[] {name, is_dir, size}', async () => {
    await ws.MkdirAll('list/sub');
    await ws.WriteFile('list/a.txt', 'abc');
    assert.deepEqual(await ws.ReadDir('list'), [
      { name: 'a.txt', is_dir: false, size: 3 },
      { name: 'sub', is_dir: true, size: (await ws.Stat('list/sub')).size },
    ]);
    assert.ok(
      (await ws.ReadDir()).some((e) => e.name === 'list' && e.is_dir),
      'no path: the root',
    );
  });

  test('ws.Stat(path) → FileInfo {name, size, is_dir, mod_time}', async () => {
    await ws.WriteFile('stat/me.txt', '12345');
    const info = await ws.Stat('stat/me.txt');
    assert.deepEqual(Object.keys(info).sort(), ['is_dir', 'mod_time', 'name', 'size']);
    assert.deepEqual([info.name, info.size, info.is_dir], ['me.txt', 5, false]);
    assert.match(info.mod_time, ISO);
    assert.ok(Math.abs(Date.parse(info.mod_time) - statSync(join(root, 'stat/me.txt')).mtimeMs) < 1, 'mod_time is the file mtime');
    assert.equal((await ws.Stat('stat')).is_dir, true);
    await assert.rejects(ws.Stat('stat/none'), (e) => isSbxError(e, 'not_found'));
  });

  test('ws.MkdirAll(path, perm)', async () => {
    await ws.MkdirAll('deep/er/est', 0o750);
    assert.equal(statSync(join(root, 'deep/er/est')).mode & 0o777, 0o750);
    await ws.MkdirAll('deep/er/est');
    await ws.WriteFile('deep/file', 'x');
    await assert.rejects(ws.MkdirAll('deep/file'), (e) => isSbxError(e, 'conflict'));
    await assert.rejects(ws.MkdirAll('deep/bad', -1), invalid('perm'));
  });

  test('ws.Remove(path): a file or an empty directory', async () => {
    await ws.WriteFile('rm/one.txt', '1');
    await ws.Remove('rm/one.txt');
    assert.throws(() => statSync(join(root, 'rm/one.txt')), /ENOENT/);
    await ws.WriteFile('rm/two.txt', '2');
    await assert.rejects(ws.Remove('rm'), (e) => isSbxError(e), 'a non-empty directory is refused');
    await ws.Remove('rm/two.txt');
    await ws.Remove('rm');
    assert.throws(() => statSync(join(root, 'rm')), /ENOENT/);
  });

  test('ws.RemoveAll(path): a whole tree; missing is fine', async () => {
    await ws.WriteFile('tree/a/b/c.txt', 'c');
    await ws.RemoveAll('tree');
    assert.throws(() => statSync(join(root, 'tree')), /ENOENT/);
    await ws.RemoveAll('tree');
  });

  test('ws.Rename(from, to)', async () => {
    await ws.WriteFile('mv/from.txt', 'moved');
    await ws.Rename('mv/from.txt', 'mv/to/there.txt');
    assert.equal(await ws.ReadFile('mv/to/there.txt'), 'moved');
    await assert.rejects(ws.ReadFile('mv/from.txt'), (e) => isSbxError(e, 'not_found'));
  });

  test('ws.WriteFileBase64(path, b64, perm) / ws.ReadFileBase64(path): binary bytes both ways', async () => {
    const bytes = Buffer.from([0, 1, 2, 255, 254, 10, 13, 0x80]);
    await ws.WriteFileBase64('bin/blob', bytes.toString('base64'), 0o640);
    assert.deepEqual(readFileSync(join(root, 'bin/blob')), bytes);
    assert.equal(statSync(join(root, 'bin/blob')).mode & 0o777, 0o640);
    assert.equal(await ws.ReadFileBase64('bin/blob'), bytes.toString('base64'));
    await ws.WriteFileBase64('bin/text', Buffer.from('plain').toString('base64'));
    assert.equal(await ws.ReadFile('bin/text'), 'plain');
    await assert.rejects(ws.WriteFileBase64('bin/bad', 'not base64!'), (e) => isSbxError(e, 'invalid_argument'));
  });

  test('ws.CopyFromHost(hostPath, destPath?): a file and a directory; dest defaults to the basename', async () => {
    const src = join(hostDir, 'project');
    mkdirSync(join(src, 'lib'), { recursive: true });
    writeFileSync(join(src, 'main.js'), 'main\n');
    writeFileSync(join(src, 'lib', 'util.js'), 'util\n');
    symlinkSync('main.js', join(src, 'link.js'));
    await ws.CopyFromHost(src);
    assert.equal(await ws.ReadFile('project/main.js'), 'main\n');
    assert.equal(await ws.ReadFile('project/lib/util.js'), 'util\n');
    await ws.CopyFromHost(src, 'copies/p2');
    assert.equal(await ws.ReadFile('copies/p2/lib/util.js'), 'util\n');
    await ws.CopyFromHost(join(src, 'main.js'), 'single.js');
    assert.equal(await ws.ReadFile('single.js'), 'main\n');
    await assert.rejects(ws.CopyFromHost(join(hostDir, 'missing')), (e) => isSbxError(e, 'not_found'));
  });

  test('ws.CopyFromHostArchive(hostPath, destPath?): a tree as one archive, all or nothing', async () => {
    const src = join(hostDir, 'big');
    mkdirSync(join(src, 'a', 'b'), { recursive: true });
    writeFileSync(join(src, 'top.txt'), 'top\n');
    writeFileSync(join(src, 'a', 'b', 'deep.txt'), 'deep\n');
    symlinkSync('top.txt', join(src, 'inside-link'));
    await ws.CopyFromHostArchive(src);
    assert.equal(await ws.ReadFile('big/top.txt'), 'top\n');
    assert.equal(await ws.ReadFile('big/a/b/deep.txt'), 'deep\n');
    assert.equal(readlinkSync(join(root, 'big/inside-link')), 'top.txt', 'a symlink inside the tree comes along as a symlink');
    await ws.CopyFromHostArchive(src, 'elsewhere/big');
    assert.equal(await ws.ReadFile('elsewhere/big/a/b/deep.txt'), 'deep\n');
    symlinkSync(src, join(hostDir, 'big-link'));
    await ws.CopyFromHostArchive(join(hostDir, 'big-link'));
    assert.equal(await ws.ReadFile('big-link/a/b/deep.txt'), 'deep\n', 'a host symlink given as hostPath is followed');
    await ws.CopyFromHostArchive(join(src, 'top.txt'), 'one.txt');
    assert.equal(await ws.ReadFile('one.txt'), 'top\n');

    // All or nothing: past the quota, no file of the archive lands.
    const small = await workspace.M().create({ name: 'small', owner: 'hank', node: 'local', quotaBytes: 8 });
    const limited = (await workspace.Get(small.id))!;
    await assert.rejects(limited.CopyFromHostArchive(src, 'dest'), (e) => isSbxError(e, 'quota_exceeded'));
    assert.deepEqual(await limited.ReadDir(), []);
    await assert.rejects(ws.CopyFromHostArchive('relative/path'), invalid('hostPath'));
    await assert.rejects(ws.CopyFromHostArchive(join(hostDir, 'missing')), (e) => isSbxError(e, 'not_found'));
  });
});
