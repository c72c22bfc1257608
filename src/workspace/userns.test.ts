/**
 * Workspaces of a node whose boxes run in a user namespace (an engine with userns-remap): what the
 * API makes belongs, on this machine, to the file owner's ids in that namespace. Runs as root (the
 * harness does), since only root's chown shows it.
 */
import assert from 'node:assert/strict';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { UserNamespaceMap } from '../runtime/types.js';
import { makeManager, makeTempDir, rejectsWithCode } from '../testing/workspace/fixtures.js';
import type { WorkspaceNode } from './types.js';

let tmp: Awaited<ReturnType<typeof makeTempDir>>;
before(async () => {
  tmp = await makeTempDir('userns');
});
after(() => tmp.remove());

const nodes: WorkspaceNode[] = [
  { name: 'remapped', addr: 'unix:///run/remapped.sock', online: true },
  { name: 'plain', addr: 'local', online: true },
  { name: 'small', addr: 'unix:///run/small.sock', online: true },
];
const maps: Record<string, UserNamespaceMap> = {
  remapped: { hostUid: 200000, hostGid: 300000, size: 65536 },
  small: { hostUid: 400000, hostGid: 400000, size: 1000 },
};
/** Which nodes the manager asked for their map, in order. */
const asked: string[] = [];

async function owner(path: string): Promise<string> {
  const s = await stat(path);
  return `${s.uid}:${s.gid}`;
}

describe('workspaces on a node whose boxes run in a user namespace', { skip: process.getuid?.() !== 0 && 'needs root (chown)' }, () => {
  const manager = () =>
    makeManager(tmp.path, {
      nodes: () => nodes,
      userns: (node) => {
        asked.push(node);
        return Promise.resolve(maps[node]);
      },
    });

  test("the root and what the API writes belong to the file owner's ids in the namespace; a node without one keeps 1000:1000", async () => {
    const m = manager();
    for (const [node, want] of [
      ['remapped', '201000:301000'],
      ['plain', '1000:1000'],
    ] as const) {
      const ws = await m.create({ name: node, owner: 'alice', node });
      const root = await m.mountPath(ws.id);
      assert.equal(await owner(root), want, `${node}: root`);
      const files = await m.fs(ws.id);
      await files.writeFile('dir/a.txt', 'a');
      assert.equal(await owner(join(root, 'dir')), want, `${node}: a directory the API made`);
      assert.equal(await owner(join(root, 'dir/a.txt')), want, `${node}: a file the API wrote`);
    }
    assert.deepEqual(asked.splice(0), ['remapped', 'remapped', 'plain', 'plain'], 'asked at create and when the file API opens');
  });

  test('a namespace too small to hold the file owner refuses the workspace (not_available), leaving nothing', async () => {
    const m = manager();
    const err = await rejectsWithCode(m.create({ name: 'small', owner: 'alice', node: 'small' }), 'not_available');
    assert.match(err.message, /node small runs boxes in a user namespace of 1000 ids, which has no 1000:1000/);
    assert.deepEqual(
      (await m.list({})).filter((w) => w.node === 'small'),
      [],
    );
  });
});
