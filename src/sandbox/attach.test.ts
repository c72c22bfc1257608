/**
 * box.attach() on the library's Manager and a real engine: what the behaviour suite cannot
 * see from outside — an open attach is activity for the idle cleanup, and its close ends it;
 * failed ready attempts leave nothing held. Each runs on runc and on gVisor (`ociRuntime: runsc`),
 * whose own network stack serves the box's ports.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { testEnv, testRunId } from '../testing/env.js';
import { waitFor } from '../testing/wait.js';
import type { ManagedBox } from './box.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';

const runId = testRunId('attach');
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-attach-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const manager = new Manager({
  name: `attach-${process.pid}`,
  pools: [
    { name: 'local', addr: testEnv.engineAddr },
    { name: 'gvisor', addr: testEnv.engineAddr, ociRuntime: testEnv.gvisorRuntime },
  ],
  dataDir,
  cleanupIntervalMs: 0,
  logger: pino({ level: 'silent' }),
});
const IDLE_MS = 600;

after(async () => {
  const leaked = await engine.list({ labels: managerSelector(manager.config.name) });
  await Promise.all(leaked.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
  await manager.close();
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(
    leaked.map((c) => c.name),
    [],
    'containers left behind by the attach tests',
  );
});

async function exists(id: string): Promise<boolean> {
  return manager.get(id).then(
    () => true,
    (e: unknown) => {
      if (isSbxError(e, 'not_found')) return false;
      throw e;
    },
  );
}

for (const pool of ['local', 'gvisor'])
  describe(`attach on a real engine, pool ${pool} (${runId})`, () => {
    for (const protocol of ['ws', 'sse'] as const) {
      test(`idle (${protocol}): a session box with an open attach outlives its idle timeout; after close it is removed`, async () => {
        await manager.start();
        const box = await manager.create({
          image: testEnv.testImage,
          pool,
          idleTimeoutMs: IDLE_MS,
          ports: [{ containerPort: 3000 }, { containerPort: 3001 }],
        });
        // /forever: a tick every 200 ms until the client goes.
        const conn = protocol === 'ws' ? await box.attach(3000, { protocol }) : await box.attach(3001, { protocol, path: '/forever' });
        await sleep(IDLE_MS * 2);
        await manager.cleanup();
        assert.equal(await exists(box.id), true, 'kept while the attach is open');
        if (conn.protocol === 'ws') {
          conn.send('still here');
          assert.deepEqual((await conn[Symbol.asyncIterator]().next()).value, { type: 'text', data: 'still here' });
        } else {
          const ticks: string[] = [];
          for await (const e of conn) if (ticks.push(e.data) === 3) break;
          assert.deepEqual(ticks, ['tick-0', 'tick-1', 'tick-2'], 'the stream is still live');
        }
        conn.close();
        await conn.closed;
        // The dialed socket's close ends the hold (it may follow the close handshake by a moment).
        const managed = box as ManagedBox;
        await waitFor(() => managed.activity.inFlight === 0, { what: 'nothing held after close' });
        await sleep(IDLE_MS * 2);
        await manager.cleanup();
        assert.equal(await exists(box.id), false, 'removed once idle after the close');
      });
    }

    test('failed ready attempts and a refused handshake hold nothing; the box stays idle-able', async () => {
      await manager.start();
      const box = (await manager.create({
        image: testEnv.testImage,
        pool,
        ports: [{ containerPort: 3000 }, { containerPort: 3002 }],
      })) as ManagedBox;
      try {
        await assert.rejects(
          box.attach(3002, { protocol: 'ws', readyTimeoutMs: 800 }),
          (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'port_not_ready',
        );
        await assert.rejects(
          box.attach(3000, { protocol: 'sse', readyTimeoutMs: 5000 }),
          (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'handshake_refused',
        );
        await assert.rejects(
          box.attach(3000, { protocol: 'ws', path: 'bad path' }),
          (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'path',
        );
        await assert.rejects(
          box.attach(3000, { protocol: 'ws', headers: { 'bad header': 'x' } }),
          (e) => isSbxError(e, 'invalid_argument') && String(e.details?.['field']).startsWith('headers'),
        );
        await waitFor(() => box.activity.inFlight === 0, { what: 'the failed attempts to hold nothing' });
        const conn = await box.attach(3000, { protocol: 'ws', headers: { 'x-test': '1' } });
        assert.equal(box.activity.inFlight, 1, 'the open connection is the one hold');
        conn.close();
        await conn.closed;
        await waitFor(() => box.activity.inFlight === 0, { what: 'the closed connection to be released' });
      } finally {
        await box.remove();
      }
    });
  });
