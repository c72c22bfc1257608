/**
 * e2b's fork (`Sandbox.fork`, POST /sandboxes/:id/fork) against a real server and engine with the
 * e2b SDK 2.51 (2.31 has no fork): the forks have the source's files, template, metadata and env,
 * not its processes; the source runs on; owners, bounds and a pool that cannot commit.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as e2b from 'e2b';
import { isSbxError } from '../../../errors.js';
import { testEnv } from '../../../testing/env.js';
import { MemoryRuntime } from '../../../testing/memory-runtime.js';
import { startTestServer } from '../../../testing/server.js';
import type { TestServer } from '../../../testing/server.js';
import { MAX_FORK_COUNT } from './fork.js';

const { Sandbox, SandboxNotFoundError, InvalidArgumentError } = e2b;

let t: TestServer;
let alice: string;
let bob: string;

/** A runtime without the engine's commit, as Kubernetes is (capabilities.commit false). */
function noCommit(): MemoryRuntime {
  const rt = new MemoryRuntime();
  Object.defineProperty(rt, 'capabilities', { value: { ...rt.capabilities, commit: false } });
  return rt;
}

before(async () => {
  t = await startTestServer('e2b-fork', {
    config: {
      pools: [
        { name: 'local', addr: testEnv.engineAddr },
        { name: 'nocommit', runtime: noCommit() },
      ],
    },
    serve: { e2b: { templates: { base: testEnv.e2bImage } } },
  });
  alice = (await t.server.keys.create({ name: 'alice', role: 'user' })).e2bKey;
  bob = (await t.server.keys.create({ name: 'bob', role: 'user' })).e2bKey;
});
after(async () => {
  await t?.dispose();
});

function opts(apiKey: string) {
  return { apiUrl: `${t.url}/e2b/api`, sandboxUrl: `${t.url}/e2b/envd`, apiKey, requestTimeoutMs: 120_000 };
}

describe('e2b 2.51 Sandbox.fork against sbx', () => {
  test('forks carry the files, template, metadata and env, not the processes; the source runs on', async () => {
    const source = await Sandbox.create('base', { ...opts(alice), envs: { GREETING: 'from the source' }, metadata: { role: 'fork-source' } });
    const forks: e2b.Sandbox[] = [];
    try {
      await source.files.write('/home/user/state.txt', 'before the fork');
      const sleeper = await source.commands.run('sleep 600', { background: true });
      const results = await Sandbox.fork(source.sandboxId, { ...opts(alice), count: 2, timeoutMs: 60_000 });
      assert.equal(results.length, 2);
      for (const r of results) {
        assert.ok(r instanceof Sandbox, `a fork failed: ${String(r)}`);
        forks.push(r);
      }
      assert.notEqual(forks[0]!.sandboxId, forks[1]!.sandboxId);
      for (const fork of forks) {
        assert.notEqual(fork.sandboxId, source.sandboxId);
        assert.equal(await fork.files.read('/home/user/state.txt'), 'before the fork');
        assert.equal((await fork.commands.run('printf %s "$GREETING"')).stdout, 'from the source');
        assert.deepEqual(await fork.commands.list(), [], 'no process of the source');
        assert.equal((await fork.commands.run('sudo -n id -u')).stdout, '0\n', 'sudo works in a fork as in the source (the sudo profile)');
        const info = await fork.getInfo();
        assert.equal(info.templateId, 'base');
        assert.deepEqual(info.metadata, { role: 'fork-source' });
        assert.equal(info.endAt.getTime() - info.startedAt.getTime(), 60_000, 'its own timeout');
        assert.equal((await t.manager.get(fork.sandboxId)).owner, 'alice');
      }
      // Each fork is its own sandbox: a write in one is not in the other nor in the source.
      await forks[0]!.files.write('/home/user/state.txt', 'fork 0');
      assert.equal(await forks[1]!.files.read('/home/user/state.txt'), 'before the fork');
      assert.equal(await source.files.read('/home/user/state.txt'), 'before the fork');
      assert.equal((await source.getInfo()).state, 'running');
      assert.ok(
        (await source.commands.list()).some((p) => p.pid === sleeper.pid),
        'the source keeps its processes',
      );
      // The copy is a snapshot of the source, as createSnapshot's: listed, deletable once its forks are gone.
      const snaps = await Sandbox.listSnapshots({ ...opts(alice), sandboxId: source.sandboxId }).nextItems();
      assert.equal(snaps.length, 1);
      await assert.rejects(Sandbox.deleteSnapshot(snaps[0]!.snapshotId, opts(alice)), /remove them first/);
      for (const fork of forks.splice(0)) assert.equal(await fork.kill(), true);
      assert.equal(await Sandbox.deleteSnapshot(snaps[0]!.snapshotId, opts(alice)), true);
    } finally {
      for (const fork of forks) await fork.kill();
      await source.kill();
    }
  });

  test("another owner's sandbox is not found; count is bounded; one fork by default", async () => {
    const source = await Sandbox.create('base', opts(alice));
    try {
      await assert.rejects(Sandbox.fork(source.sandboxId, { ...opts(bob), count: 1 }), SandboxNotFoundError);
      await assert.rejects(Sandbox.fork('sb-000000000000', opts(alice)), SandboxNotFoundError);
      await assert.rejects(Sandbox.fork(source.sandboxId, { ...opts(alice), count: MAX_FORK_COUNT + 1 }), (e: Error) => {
        assert.ok(e instanceof InvalidArgumentError || /400/.test(e.message), String(e));
        assert.match(e.message, new RegExp(`at most ${MAX_FORK_COUNT} forks`));
        return true;
      });
      assert.deepEqual(await t.manager.snapshots.list({ owner: 'alice' }), [], 'a refused fork takes no snapshot');
      const [only, ...rest] = await Sandbox.fork(source.sandboxId, opts(alice));
      assert.deepEqual(rest, []);
      assert.ok(only instanceof Sandbox);
      const info = await only.getInfo();
      assert.equal(info.endAt.getTime() - info.startedAt.getTime(), 300_000, "e2b's default timeout");
      // The next fork collects the fork snapshot nobody uses any more (e2b code never deletes it).
      const [firstSnap, ...others] = await t.manager.snapshots.list({ owner: 'alice' });
      assert.deepEqual(others, []);
      await only.kill();
      const [again] = await Sandbox.fork(source.sandboxId, opts(alice));
      assert.ok(again instanceof Sandbox);
      const now = await t.manager.snapshots.list({ owner: 'alice' });
      assert.equal(now.length, 1, 'the unused fork snapshot was deleted, only the new one is left');
      assert.notEqual(now[0]!.id, firstSnap!.id);
      // One still used by a fork stays.
      const [third] = await Sandbox.fork(source.sandboxId, opts(alice));
      assert.ok(third instanceof Sandbox);
      assert.equal((await t.manager.snapshots.list({ owner: 'alice' })).length, 2, 'a snapshot a fork runs from is kept');
      await again.kill();
      await third.kill();
      for (const s of await t.manager.snapshots.list({ owner: 'alice' })) await t.manager.snapshots.delete(s.id);
    } finally {
      await source.kill();
    }
  });

  test('a fork of a sandbox on a pool that cannot commit is a clear 503, with no sandbox made', async () => {
    const box = await t.manager.create({ image: testEnv.baseImage, owner: 'alice', pool: 'nocommit', labels: { 'e2b.template': 'base' } });
    try {
      const before = (await t.manager.list()).length;
      const res = await fetch(`${t.url}/e2b/api/sandboxes/${box.id}/fork`, {
        method: 'POST',
        headers: { 'x-api-key': alice, 'content-type': 'application/json' },
        body: JSON.stringify({ count: 2 }),
      });
      assert.equal(res.status, 503);
      const body = (await res.json()) as { code: number; message: string };
      assert.equal(body.code, 503);
      assert.match(body.message, new RegExp(`cannot fork sandbox '${box.id}'.*pool 'nocommit'.*filesystem`));
      assert.equal((await t.manager.list()).length, before);
    } finally {
      await box.remove().catch((e: unknown) => assert.ok(isSbxError(e, 'not_found')));
    }
  });
});
