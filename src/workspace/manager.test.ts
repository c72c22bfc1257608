import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { isSbxError } from '../errors.js';
import { WorkspaceManager } from './manager.js';
import { tempName } from './temp-names.js';
import { deadWriterTempName, makeManager, makeTempDir, rejectsWithCode } from '../testing/workspace/fixtures.js';
import type { WorkspaceNode } from './types.js';

let tmp: Awaited<ReturnType<typeof makeTempDir>>;
before(async () => {
  tmp = await makeTempDir('manager');
});
after(() => tmp.remove());

const base = { name: 'notes', owner: 'alice', node: 'local' };

describe('create', () => {
  test('auto id is ws-<random>, fields and timestamps are set', async () => {
    const manager = makeManager(tmp.path);
    const ws = await manager.create({ ...base, labels: { team: 'a' } });
    assert.match(ws.id, /^ws-[0-9a-f]{12}$/);
    assert.equal(ws.name, 'notes');
    assert.equal(ws.owner, 'alice');
    assert.equal(ws.node, 'local');
    assert.deepEqual(ws.labels, { team: 'a' });
    assert.equal(ws.createdAt, ws.updatedAt);
    assert.ok(!Number.isNaN(Date.parse(ws.createdAt)));
    assert.equal(ws.quotaBytes, undefined);
    assert.deepEqual(await manager.get(ws.id), ws);
  });

  test('explicit id is kept; a taken id is a conflict, also on another node', async () => {
    const nodes: WorkspaceNode[] = [
      { name: 'local', addr: 'local', online: true },
      { name: 'n2', addr: 'tcp://n2', online: true },
    ];
    const manager = makeManager(tmp.path, { nodes: () => nodes });
    const ws = await manager.create({ ...base, id: 'ws-explicit' });
    assert.equal(ws.id, 'ws-explicit');
    await rejectsWithCode(manager.create({ ...base, id: 'ws-explicit' }), 'conflict');
    await rejectsWithCode(manager.create({ ...base, id: 'ws-explicit', node: 'n2' }), 'conflict');
  });

  test('invalid ids are refused with invalid_argument on field id', async () => {
    const manager = makeManager(tmp.path);
    for (const id of ['UPPER', '-x', '', 'a/b', '..', '.x', 'x'.repeat(64), 'a b', '_a', 'ws\u00e9']) {
      const err = await rejectsWithCode(manager.create({ ...base, id }), 'invalid_argument', id);
      assert.equal((err as { details?: { field?: string } }).details?.field, 'id');
    }
    assert.equal((await manager.create({ ...base, id: 'a'.repeat(63) })).id.length, 63);
  });

  test('node is required, must exist and must be online', async () => {
    const manager = makeManager(tmp.path, {
      nodes: () => [
        { name: 'local', addr: 'local', online: true },
        { name: 'down', addr: 'tcp://down', online: false },
      ],
    });
    const missing = await rejectsWithCode(manager.create({ name: 'x', owner: 'a', node: '' }), 'invalid_argument');
    assert.equal((missing as { details?: { field?: string } }).details?.field, 'node');
    await rejectsWithCode(manager.create({ name: 'x', owner: 'a' } as never), 'invalid_argument');
    await rejectsWithCode(manager.create({ ...base, node: 'nowhere' }), 'not_found');
    await rejectsWithCode(manager.create({ ...base, node: 'down' }), 'not_available');
  });

  test('name, owner, labels and quota are validated', async () => {
    const manager = makeManager(tmp.path);
    await rejectsWithCode(manager.create({ ...base, name: '' }), 'invalid_argument');
    await rejectsWithCode(manager.create({ ...base, owner: '  ' }), 'invalid_argument');
    await rejectsWithCode(manager.create({ ...base, labels: { a: 1 } as never }), 'invalid_argument');
    await rejectsWithCode(manager.create({ ...base, labels: [] as never }), 'invalid_argument');
    await rejectsWithCode(manager.create({ ...base, quotaBytes: -1 }), 'invalid_argument');
  });

  test('an owner holds at most maxPerOwner workspaces (default 100), concurrent creates included', async () => {
    const manager = makeManager(tmp.path, { maxPerOwner: 3 });
    const results = await Promise.allSettled(Array.from({ length: 8 }, () => manager.create(base)));
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 3, 'concurrent creates cannot overshoot');
    for (const r of results) if (r.status === 'rejected') assert.ok(isSbxError(r.reason, 'limit_exceeded') && /max 3/.test(r.reason.message), String(r.reason));
    await manager.create({ ...base, owner: 'bob' }); // each owner has its own count
    const [first] = await manager.list({ owner: 'alice' });
    await manager.delete(first!.id);
    await manager.create(base); // a deleted workspace frees its slot
    await rejectsWithCode(manager.create(base), 'limit_exceeded');
    const unlimited = makeManager(tmp.path, { maxPerOwner: 0 });
    await Promise.all(Array.from({ length: 5 }, () => unlimited.create(base)));
    assert.throws(
      () => makeManager(tmp.path, { maxPerOwner: -1 }),
      (e) => isSbxError(e, 'invalid_argument'),
    );
    const defaulted = makeManager(tmp.path);
    await Promise.all(Array.from({ length: 100 }, () => defaulted.create(base)));
    await rejectsWithCode(defaulted.create(base), 'limit_exceeded', 'the 101st');
  });

  test('concurrent creates of one id in one manager: exactly one wins', async () => {
    const manager = makeManager(tmp.path);
    const results = await Promise.allSettled(Array.from({ length: 20 }, () => manager.create({ ...base, id: 'ws-race-one' })));
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
    for (const r of results) if (r.status === 'rejected') assert.ok(isSbxError(r.reason, 'conflict'), String(r.reason));
  });

  test('concurrent creates of one id from two managers on one data dir: the rename reservation lets exactly one win', async () => {
    const dataDir = join(tmp.path, 'shared-data');
    const a = new WorkspaceManager({ dataDir });
    const b = new WorkspaceManager({ dataDir });
    await Promise.all([a.list(), b.list()]);
    const results = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).create({ ...base, id: 'ws-race-two' })));
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
    for (const r of results) if (r.status === 'rejected') assert.ok(isSbxError(r.reason, 'conflict'), String(r.reason));
  });

  test('a data directory that cannot be used is an SbxError naming it, not a raw errno error', async () => {
    // A regular file where the data directory should be: mkdir fails with ENOTDIR, even as root.
    const blocker = join(tmp.path, 'not-a-dir');
    await writeFile(blocker, 'x');
    const manager = new WorkspaceManager({ dataDir: join(blocker, 'data') });
    for (const op of [() => manager.list(), () => manager.create(base)]) {
      await assert.rejects(op(), (e: unknown) => {
        assert.ok(isSbxError(e, 'internal'), String(e));
        assert.match(e.message, /workspace storage: .*not-a-dir.*check that the data directory/);
        assert.equal(e.details?.['errno'], 'ENOTDIR');
        return true;
      });
    }
  });

  test('default quota applies unless the workspace asks for one (0 = none)', async () => {
    const manager = makeManager(tmp.path, { defaultQuotaBytes: 5000 });
    assert.equal((await manager.create(base)).quotaBytes, 5000);
    assert.equal((await manager.create({ ...base, quotaBytes: 70 })).quotaBytes, 70);
    assert.equal((await manager.create({ ...base, quotaBytes: 0 })).quotaBytes, undefined);
  });
});

describe('get, list, nodes', () => {
  test('get of an unknown id is not_found', async () => {
    const manager = makeManager(tmp.path);
    await rejectsWithCode(manager.get('ws-nope'), 'not_found');
    await rejectsWithCode(manager.mountPath('ws-nope'), 'not_found');
    await rejectsWithCode(manager.nodeForWorkspace('ws-nope'), 'not_found');
    await rejectsWithCode(manager.fs('ws-nope'), 'not_found');
  });

  test('list filters by owner and node, oldest first', async () => {
    const manager = makeManager(tmp.path, {
      nodes: () => [
        { name: 'local', addr: 'local', online: true },
        { name: 'n2', addr: 'x', online: true },
      ],
    });
    const a1 = await manager.create({ ...base, owner: 'alice' });
    const b1 = await manager.create({ ...base, owner: 'bob', node: 'n2' });
    const a2 = await manager.create({ ...base, owner: 'alice', node: 'n2' });
    assert.deepEqual(
      (await manager.list()).map((w) => w.id),
      [a1.id, b1.id, a2.id],
    );
    assert.deepEqual(
      (await manager.list({ owner: 'alice' })).map((w) => w.id),
      [a1.id, a2.id],
    );
    assert.deepEqual(
      (await manager.list({ node: 'n2' })).map((w) => w.id),
      [b1.id, a2.id],
    );
    assert.deepEqual(
      (await manager.list({ owner: 'alice', node: 'local' })).map((w) => w.id),
      [a1.id],
    );
    assert.deepEqual(await manager.list({ owner: 'carol' }), []);
  });

  test('returned objects are copies: mutating one does not change the manager', async () => {
    const manager = makeManager(tmp.path);
    const ws = await manager.create({ ...base, labels: { k: 'v' } });
    ws.labels.k = 'changed';
    ws.owner = 'mallory';
    const again = await manager.get(ws.id);
    assert.equal(again.labels.k, 'v');
    assert.equal(again.owner, 'alice');
  });

  test('nodes defaults to one online local node; nodeForWorkspace names the bound node', async () => {
    const manager = makeManager(tmp.path);
    assert.deepEqual(manager.nodes(), [{ name: 'local', addr: 'local', online: true }]);
    const ws = await manager.create(base);
    assert.equal(await manager.nodeForWorkspace(ws.id), 'local');
  });

  test('a new manager on the same data dir finds every workspace (index rebuilt from disk)', async () => {
    const dataDir = join(tmp.path, 'persist');
    const first = new WorkspaceManager({ dataDir });
    const a = await first.create({ ...base, labels: { x: '1' } });
    const b = await first.create({ ...base, owner: 'bob' });
    const second = new WorkspaceManager({ dataDir });
    assert.deepEqual(await second.get(a.id), a);
    assert.deepEqual((await second.list()).map((w) => w.id).sort(), [a.id, b.id].sort());
  });
});

describe('update', () => {
  test('name only keeps labels; labels replace all; updatedAt grows; createdAt stays', async () => {
    const manager = makeManager(tmp.path);
    const ws = await manager.create({ ...base, labels: { a: '1', b: '2' } });
    const renamed = await manager.update(ws.id, { name: 'renamed' });
    assert.equal(renamed.name, 'renamed');
    assert.deepEqual(renamed.labels, { a: '1', b: '2' });
    assert.ok(renamed.updatedAt > ws.updatedAt, `${renamed.updatedAt} > ${ws.updatedAt}`);
    assert.equal(renamed.createdAt, ws.createdAt);
    const relabeled = await manager.update(ws.id, { labels: { c: '3' } });
    assert.deepEqual(relabeled.labels, { c: '3' });
    assert.equal(relabeled.name, 'renamed');
    assert.ok(relabeled.updatedAt > renamed.updatedAt);
    const cleared = await manager.update(ws.id, { labels: {} });
    assert.deepEqual(cleared.labels, {});
    assert.deepEqual(await manager.get(ws.id), cleared);
  });

  test('updates are persisted atomically (no temp files left) and seen by a new manager', async () => {
    const dataDir = join(tmp.path, 'update-persist');
    const manager = new WorkspaceManager({ dataDir });
    const ws = await manager.create(base);
    await Promise.all(Array.from({ length: 10 }, (_, i) => manager.update(ws.id, { labels: { n: String(i) } })));
    const final = await manager.get(ws.id);
    const reloaded = await new WorkspaceManager({ dataDir }).get(ws.id);
    assert.deepEqual(reloaded, final);
    const dir = dirname(await manager.mountPath(ws.id));
    assert.deepEqual((await readdir(dir)).sort(), ['root', 'staging', 'workspace.json']);
  });

  test('unknown id is not_found; bad fields are invalid_argument', async () => {
    const manager = makeManager(tmp.path);
    await rejectsWithCode(manager.update('ws-none', { name: 'x' }), 'not_found');
    const ws = await manager.create(base);
    await rejectsWithCode(manager.update(ws.id, { name: '' }), 'invalid_argument');
    await rejectsWithCode(manager.update(ws.id, { labels: { a: 2 } as never }), 'invalid_argument');
  });
});

describe('delete', () => {
  test('refused with conflict while mounted; force deletes; storage is gone', async () => {
    const mounted = new Set<string>();
    const manager = makeManager(tmp.path, { isMounted: (id) => mounted.has(id) });
    const ws = await manager.create(base);
    const files = await manager.fs(ws.id);
    await files.writeFile('keep/me.txt', 'data');
    const hostDir = dirname(await manager.mountPath(ws.id));
    mounted.add(ws.id);
    await rejectsWithCode(manager.delete(ws.id), 'conflict');
    assert.equal((await manager.get(ws.id)).id, ws.id);
    assert.equal(await files.readFile('keep/me.txt', 'utf8'), 'data');
    await manager.delete(ws.id, { force: true });
    await rejectsWithCode(manager.get(ws.id), 'not_found');
    assert.equal(existsSync(hostDir), false);
    assert.deepEqual(
      (await readdir(dirname(hostDir))).filter((n) => n.includes(ws.id)),
      [],
    );
    await rejectsWithCode(files.readFile('keep/me.txt'), 'not_found');
    await rejectsWithCode(files.exists('keep/me.txt'), 'not_found', 'exists on a deleted workspace');
    await rejectsWithCode(files.removeAll('keep'), 'not_found', 'removeAll on a deleted workspace');
  });

  test('an async mount checker installed by setMountChecker is honoured', async () => {
    const manager = makeManager(tmp.path);
    const ws = await manager.create(base);
    manager.setMountChecker(async (id) => id === ws.id);
    await rejectsWithCode(manager.delete(ws.id), 'conflict');
    manager.setMountChecker(() => false);
    await manager.delete(ws.id);
    await rejectsWithCode(manager.delete(ws.id), 'not_found');
  });

  test('deleting removes box-planted symlinks without following them', async () => {
    const manager = makeManager(tmp.path);
    const victim = await manager.create({ ...base, name: 'victim' });
    const victimFs = await manager.fs(victim.id);
    await victimFs.writeFile('precious.txt', 'keep');
    const ws = await manager.create(base);
    const { symlinkSync } = await import('node:fs');
    symlinkSync(await manager.mountPath(victim.id), join(await manager.mountPath(ws.id), 'sibling'));
    await manager.delete(ws.id);
    assert.equal(await victimFs.readFile('precious.txt', 'utf8'), 'keep');
  });
});

describe('crash leftovers', () => {
  test('staging a dead writer left is cleared when a manager first opens the workspace, a live one is kept; interrupted deletes are finished on load', async () => {
    const dataDir = join(tmp.path, 'crash');
    const first = new WorkspaceManager({ dataDir });
    const ws = await first.create(base);
    const wsDir = dirname(await first.mountPath(ws.id));
    const { mkdirSync, writeFileSync, symlinkSync } = await import('node:fs');
    const leftOver = deadWriterTempName();
    mkdirSync(join(wsDir, 'staging', leftOver, 'deep'), { recursive: true });
    writeFileSync(join(wsDir, 'staging', leftOver, 'deep', 'half.bin'), 'x');
    const live = tempName(); // this process's: alive
    mkdirSync(join(wsDir, 'staging', live));
    const trash = join(dirname(wsDir), '.trash-ws-gone-1234');
    mkdirSync(join(trash, 'root'), { recursive: true });
    symlinkSync('/etc', join(trash, 'root', 'etc'));
    const second = new WorkspaceManager({ dataDir });
    await (await second.fs(ws.id)).writeFile('a.txt', 'a');
    assert.deepEqual(await readdir(join(wsDir, 'staging')), [live]);
    assert.equal(existsSync(trash), false);
    assert.equal(existsSync('/etc/passwd'), true);
  });
});

describe('metadata lives outside the mounted root', () => {
  test('the mount path holds only user files; workspace.json is its sibling and unreachable by the FS', async () => {
    const manager = makeManager(tmp.path);
    const ws = await manager.create(base);
    const root = await manager.mountPath(ws.id);
    assert.equal(existsSync(join(root, 'workspace.json')), false);
    const metadata = JSON.parse(await readFile(join(dirname(root), 'workspace.json'), 'utf8')) as { owner: string; node: string };
    assert.equal(metadata.owner, 'alice');
    assert.equal(metadata.node, 'local');
    const files = await manager.fs(ws.id);
    assert.deepEqual(await files.readDir(''), []);
    await rejectsWithCode(files.readFile('../workspace.json'), 'invalid_argument');
    await rejectsWithCode(files.writeFile('../workspace.json', '{}'), 'invalid_argument');
    await rejectsWithCode(files.stat('..'), 'invalid_argument');
    // The metadata file is only readable by the host user.
    assert.equal((await stat(join(dirname(root), 'workspace.json'))).mode & 0o077, 0);
  });

  test('when running as root, the mounted root belongs to fileOwner (default 1000:1000)', async (t) => {
    if (process.getuid?.() !== 0) return t.skip('needs root');
    const manager = makeManager(tmp.path);
    const ws = await manager.create(base);
    const rootStat = await stat(await manager.mountPath(ws.id));
    assert.equal(rootStat.uid, 1000);
    assert.equal(rootStat.gid, 1000);
    assert.equal(rootStat.mode & 0o777, 0o755);
    const custom = makeManager(tmp.path, { fileOwner: { uid: 1234, gid: 4321 } });
    const other = await custom.create(base);
    const otherStat = await stat(await custom.mountPath(other.id));
    assert.deepEqual([otherStat.uid, otherStat.gid], [1234, 4321]);
  });
});

describe('scale: 1,000 workspaces', () => {
  test('get and list are served from the in-memory index once it is loaded (timings reported, not asserted)', async (t) => {
    const dataDir = join(tmp.path, 'scale');
    const writer = new WorkspaceManager({ dataDir, maxPerOwner: 0 }); // 250 per owner, past the default bound
    const owners = ['alice', 'bob', 'carol', 'dave'];
    const started = performance.now();
    const ids: string[] = [];
    for (let batch = 0; batch < 1000; batch += 25) {
      const created = await Promise.all(
        Array.from({ length: 25 }, (_, i) =>
          writer.create({ name: `ws ${batch + i}`, owner: owners[(batch + i) % owners.length] as string, node: 'local', labels: { i: String(batch + i) } }),
        ),
      );
      ids.push(...created.map((w) => w.id));
    }
    const createMs = performance.now() - started;

    const reader = new WorkspaceManager({ dataDir });
    let mark = performance.now();
    const first = await reader.get(ids[500] as string);
    const coldGetMs = performance.now() - mark;
    assert.equal(first.id, ids[500]);
    // Fast because nothing is read from disk any more: with the data directory moved away, every
    // get and list still answers, from the index (a speed bound broke on loaded machines).
    const away = `${dataDir}-away`;
    await rename(dataDir, away);

    mark = performance.now();
    for (const id of ids) await reader.get(id);
    const warmGetUs = ((performance.now() - mark) / ids.length) * 1000;

    mark = performance.now();
    const rounds = 20;
    let all = 0;
    for (let i = 0; i < rounds; i++) all = (await reader.list()).length;
    const listMs = (performance.now() - mark) / rounds;
    mark = performance.now();
    const alices = (await reader.list({ owner: 'alice' })).length;
    const filteredMs = performance.now() - mark;

    await rename(away, dataDir);
    assert.equal(all, 1000);
    assert.equal(alices, 250);
    t.diagnostic(
      `1000 workspaces: create ${createMs.toFixed(0)} ms total (${(createMs / 1000).toFixed(2)} ms each, 25 in parallel); ` +
        `cold get (index load = full metadata scan) ${coldGetMs.toFixed(1)} ms; warm get ${warmGetUs.toFixed(1)} µs; ` +
        `list all ${listMs.toFixed(2)} ms; list by owner ${filteredMs.toFixed(2)} ms`,
    );
  });
});
