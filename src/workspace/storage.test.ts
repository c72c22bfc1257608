// WorkspaceManager with a node that has storage of its own (what the sandbox layer gives a
// Kubernetes pool): what it calls when, and what stays on this disk. The storage here is a
// recording stand-in for the contract's calls only; the real one is tested on a cluster
// (src/sandbox/kubernetes-workspace.test.ts).
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SbxError } from '../errors.js';
import { makeTempDir, rejectsWithCode } from '../testing/workspace/fixtures.js';
import { WorkspaceManager } from './manager.js';
import type { FileOwner, Workspace, WorkspaceFS, WorkspaceNode, WorkspaceStorage } from './types.js';

let tmp: Awaited<ReturnType<typeof makeTempDir>>;
before(async () => {
  tmp = await makeTempDir('storage');
});
after(() => tmp.remove());

class RecordingStorage implements WorkspaceStorage {
  readonly calls: string[] = [];
  failCreate: SbxError | undefined;
  failRemove: SbxError | undefined;

  async create(workspace: Workspace, mountPath: string): Promise<void> {
    this.calls.push(`create ${workspace.id} ${mountPath} quota=${workspace.quotaBytes ?? 'none'}`);
    if (this.failCreate) throw this.failCreate;
  }

  async remove(workspace: Workspace, mountPath: string): Promise<void> {
    this.calls.push(`remove ${workspace.id} ${mountPath}`);
    if (this.failRemove) throw this.failRemove;
  }

  open(workspace: Workspace, mountPath: string, owner: FileOwner): WorkspaceFS {
    this.calls.push(`open ${workspace.id} ${mountPath} ${owner.uid}:${owner.gid}`);
    return { id: workspace.id, usage: async () => ({ bytes: 7, files: 1 }) } as unknown as WorkspaceFS;
  }
}

function setup(mounted = new Set<string>()) {
  const storage = new RecordingStorage();
  const nodes: WorkspaceNode[] = [
    { name: 'local', addr: 'local', online: true },
    { name: 'kube', addr: 'k8s://', online: true, storage },
  ];
  const dataDir = join(tmp.path, `data-${Math.random().toString(36).slice(2)}`);
  const manager = new WorkspaceManager({ dataDir, nodes: () => nodes, isMounted: (id) => mounted.has(id), fileOwner: { uid: 1234, gid: 5678 } });
  return { storage, nodes, dataDir, manager, mounted };
}

describe('a node with storage of its own', () => {
  test('create makes the storage after the id is reserved, named by the mount path; only the metadata is on disk', async () => {
    const { storage, dataDir, manager } = setup();
    const ws = await manager.create({ id: 'ws-remote', name: 'r', owner: 'alice', node: 'kube', quotaBytes: 4096 });
    const mountPath = await manager.mountPath(ws.id);
    assert.equal(mountPath, join(dataDir, 'workspaces', 'kube', 'ws-remote', 'root'));
    assert.deepEqual(storage.calls, [`create ws-remote ${mountPath} quota=4096`]);
    assert.deepEqual(readdirSync(join(dataDir, 'workspaces', 'kube', 'ws-remote')), ['workspace.json']);
    // A taken id never reaches the storage (the winner's storage has that name).
    await rejectsWithCode(manager.create({ id: 'ws-remote', name: 'again', owner: 'bob', node: 'kube' }), 'conflict');
    assert.equal(storage.calls.length, 1);
  });

  test('a storage that cannot be made takes the metadata with it: the id stays free', async () => {
    const { storage, dataDir, manager } = setup();
    storage.failCreate = new SbxError('conflict', 'volume exists');
    await rejectsWithCode(manager.create({ id: 'ws-fail', name: 'f', owner: 'alice', node: 'kube' }), 'conflict');
    assert.equal(existsSync(join(dataDir, 'workspaces', 'kube', 'ws-fail')), false);
    await rejectsWithCode(manager.get('ws-fail'), 'not_found');
    assert.deepEqual(
      readdirSync(join(dataDir, 'workspaces', 'kube')).filter((n) => !n.startsWith('.')),
      [],
    );
    storage.failCreate = undefined;
    assert.equal((await manager.create({ id: 'ws-fail', name: 'f', owner: 'alice', node: 'kube' })).id, 'ws-fail');
  });

  test("fs and usage are the storage's, with the manager's file owner; host workspaces keep the host FS", async () => {
    const { storage, manager } = setup();
    const remote = await manager.create({ id: 'ws-r', name: 'r', owner: 'alice', node: 'kube' });
    const local = await manager.create({ id: 'ws-l', name: 'l', owner: 'alice', node: 'local' });
    const files = await manager.fs(remote.id);
    assert.equal(files, await manager.fs(remote.id), 'one file API per workspace');
    assert.deepEqual(await manager.usage(remote.id), { bytes: 7, files: 1 });
    assert.deepEqual(storage.calls.slice(1), [`open ws-r ${await manager.mountPath(remote.id)} 1234:5678`]);
    await (await manager.fs(local.id)).writeFile('a.txt', 'host');
    assert.equal(await (await manager.fs(local.id)).readFile('a.txt', 'utf8'), 'host');
    assert.equal(storage.calls.length, 2);
  });

  test('delete: refused while mounted (storage untouched); the storage goes first, and its failure keeps the workspace', async () => {
    const { storage, manager, mounted } = setup();
    const ws = await manager.create({ id: 'ws-d', name: 'd', owner: 'alice', node: 'kube' });
    const mountPath = await manager.mountPath(ws.id);
    mounted.add(ws.id);
    await rejectsWithCode(manager.delete(ws.id), 'conflict');
    assert.deepEqual(storage.calls, [`create ws-d ${mountPath} quota=none`]);
    mounted.delete(ws.id);
    storage.failRemove = new SbxError('runtime_unavailable', 'cluster down');
    await rejectsWithCode(manager.delete(ws.id), 'runtime_unavailable');
    assert.deepEqual(await manager.get(ws.id), ws);
    storage.failRemove = undefined;
    await manager.delete(ws.id);
    assert.deepEqual(storage.calls.slice(1), [`remove ws-d ${mountPath}`, `remove ws-d ${mountPath}`]);
    await rejectsWithCode(manager.get(ws.id), 'not_found');
  });

  test('a node that no longer offers storage: its workspaces are not_available; delete with force drops the metadata alone', async () => {
    const { storage, nodes, manager, dataDir } = setup();
    const ws = await manager.create({ id: 'ws-gone', name: 'g', owner: 'alice', node: 'kube' });
    nodes[1] = { name: 'kube', addr: 'k8s://', online: false };
    await rejectsWithCode(manager.fs(ws.id), 'not_available');
    await rejectsWithCode(manager.delete(ws.id), 'not_available');
    await manager.delete(ws.id, { force: true });
    await rejectsWithCode(manager.get(ws.id), 'not_found');
    assert.equal(existsSync(join(dataDir, 'workspaces', 'kube', 'ws-gone')), false);
    assert.equal(storage.calls.length, 1, 'only the create reached the storage');
  });

  test('a restarted manager finds remote workspaces from their metadata; the sweep leaves them alone', async () => {
    const { storage, nodes, dataDir, manager } = setup();
    const ws = await manager.create({ id: 'ws-again', name: 'a', owner: 'alice', node: 'kube' });
    const again = new WorkspaceManager({ dataDir, nodes: () => nodes });
    assert.deepEqual(await again.sweepLeftovers(), { stagingRemoved: 0, orphanDirsRemoved: 0 });
    assert.deepEqual(await again.get(ws.id), ws);
    await again.fs(ws.id);
    assert.equal(storage.calls.at(-1), `open ws-again ${await again.mountPath(ws.id)} 1000:1000`);
  });
});
