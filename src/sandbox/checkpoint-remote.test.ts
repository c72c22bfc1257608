/**
 * The memory-releasing pause on a remote pool: a Manager whose pool is `sbx://<node>` with
 * `ociRuntime: runsc`, the node joined with a token and served by `sbx node` over mutual TLS on
 * 127.0.0.1 (this machine's engine, with gVisor and its checkpoint API). The node forwards the
 * checkpoint calls for its own containers only; a runc box on it refuses as on a local pool.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { TEST_LABEL, testEnv } from '../testing/env.js';
import { MEMORY_COUNTER, counterReport, hostProcessesOf } from '../testing/memory-counter.js';
import { joinedNodeOf, startTestNode } from '../testing/remote-node.js';
import type { JoinedNode } from '../testing/remote-node.js';
import { removeContainersOf } from '../testing/server.js';
import type { LocalBox } from './box.js';
import { Manager } from './manager.js';

const name = `ckpt-remote-${process.pid}`;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-ckpt-remote-'));
const engine = new DockerRuntime(testEnv.engineAddr);
let manager: Manager;
let node: JoinedNode;

/** The engine's id of a remote box's container (the Manager knows it as `<node>:<id>`). */
function engineIdOf(box: LocalBox): string {
  const id = box.containerId.slice(box.containerId.indexOf(':') + 1);
  assert.ok(id.length > 0 && box.containerId.startsWith(`${name}:`), `a container of node ${name}: ${box.containerId}`);
  return id;
}

before(async () => {
  manager = new Manager({
    name,
    pools: [
      { name: 'gvisor', addr: `sbx://${name}`, ociRuntime: testEnv.gvisorRuntime, maxPerUser: 0 },
      { name: 'runc', addr: `sbx://${name}`, maxPerUser: 0 },
    ],
    dataDir,
    cleanupIntervalMs: 0,
    logger: pino({ level: 'silent' }),
  });
  await manager.start();
  node = await joinedNodeOf(manager, { name });
});

after(async () => {
  await manager?.close();
  await node?.close();
  await removeContainersOf(name);
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('pause with memory released on a remote gVisor pool', () => {
  test('the node checkpoints the box (no host process left); a use restores it with its memory: same nonce, counting on', async () => {
    const box = (await manager.create({ image: testEnv.baseImage, pool: 'gvisor', cmd: MEMORY_COUNTER })) as LocalBox;
    try {
      const id = engineIdOf(box);
      const before = await counterReport(box);
      assert.ok(hostProcessesOf(id).count > 0, 'a running box has host processes');

      await box.pause({ memory: 'release' });
      const info = await box.info();
      assert.equal(info.status, 'paused');
      assert.equal(info.pausedMemory, 'released');
      assert.equal((await engine.inspect(id)).status, 'exited', "the node's engine ended the container");
      assert.equal(hostProcessesOf(id).count, 0, 'no process of the box is left on the host');
      assert.equal((await engine.checkpoints!(id)).length, 1, 'its checkpoint is on the node');

      const after = await counterReport(box);
      assert.equal(after.nonce, before.nonce, 'the process kept its memory: the same nonce');
      assert.ok(after.count >= before.count, `counting on from ${before.count}, not from 0 (now ${after.count})`);
      assert.equal((await box.info()).pausedMemory, null);
      assert.deepEqual(await engine.checkpoints!(id), [], 'the checkpoint is deleted once the box runs again');
    } finally {
      await box.remove();
    }
  });

  test('a runc box on the same node refuses (not_available, checkpoint_unsupported) and keeps running', async () => {
    const box = (await manager.create({ image: testEnv.baseImage, pool: 'runc', cmd: ['sleep', '300'] })) as LocalBox;
    try {
      await assert.rejects(
        box.pause({ memory: 'release' }),
        (err: unknown) => isSbxError(err, 'not_available') && err.details?.['reason'] === 'checkpoint_unsupported',
      );
      assert.equal((await box.info()).status, 'running');
      assert.equal((await box.exec(['true'])).exitCode, 0);
    } finally {
      await box.remove();
    }
  });
});

describe("the node's checkpoint calls", () => {
  test("refuse a container that is not the node's (not_found, nothing said of it) and a bad checkpoint name (invalid_argument)", async () => {
    const testNode = await startTestNode({ name: `${name}-calls` });
    const remote = testNode.runtime;
    const outsider = await engine.create({
      image: testEnv.baseImage,
      cmd: ['sleep', '300'],
      labels: { [TEST_LABEL]: name },
      ociRuntime: testEnv.gvisorRuntime,
    });
    let own: string | undefined;
    try {
      assert.equal((await remote.facts()).checkpoint, true, 'the node says its runtime checkpoints');
      assert.equal(remote.capabilities.checkpoint, true, 'and the remote runtime learnt it');
      await engine.start(outsider);
      for (const call of [
        () => remote.checkpoint(outsider, 'sbx-outsider'),
        () => remote.checkpoints(outsider),
        () => remote.restoreCheckpoint(outsider, 'sbx-outsider'),
        () => remote.removeCheckpoint(outsider, 'sbx-outsider'),
      ]) {
        await assert.rejects(call(), (err: unknown) => isSbxError(err, 'not_found'));
      }
      assert.equal((await engine.inspect(outsider)).status, 'running', 'the outsider was not touched');
      assert.deepEqual(await engine.checkpoints!(outsider), []);

      own = await remote.create({ image: testEnv.baseImage, cmd: ['sleep', '300'], labels: { [TEST_LABEL]: name }, ociRuntime: testEnv.gvisorRuntime });
      await remote.start(own);
      for (const bad of ['../x', '', '-x', 'a/b', 'x'.repeat(129)]) {
        await assert.rejects(remote.checkpoint(own, bad), (err: unknown) => isSbxError(err, 'invalid_argument'), `name ${JSON.stringify(bad)}`);
      }
      assert.equal((await remote.inspect(own)).status, 'running');
    } finally {
      if (own) await remote.remove(own, { force: true });
      await engine.remove(outsider, { force: true });
      await testNode.close();
    }
  });
});
