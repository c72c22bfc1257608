// A box's status is what the engine says, also for a state sbx never puts a box in itself: a
// restart policy someone gave its container behind sbx (restarting, with the last exit code).
// (Paused against running is sbx's own word: pause.test.ts.)
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import Docker from 'dockerode';
import pino from 'pino';
import { testEnv } from '../testing/env.js';
import type { Box } from './box.js';
import { Manager } from './manager.js';
import type { BoxInfo, BoxStatus } from './types.js';

const dataDir = mkdtempSync(join(tmpdir(), 'sbx-box-status-'));
const manager = new Manager({
  name: `box-status-${process.pid}`,
  dataDir,
  cleanupIntervalMs: 0,
  logger: pino({ level: 'silent' }),
  pools: [{ name: 'local', addr: testEnv.engineAddr }],
});
const docker = new Docker();

after(async () => {
  for (const b of await manager.list()) await b.remove().catch(() => undefined);
  await manager.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** Reads info() until the box reaches `status` (the engine's own pace: its restart backoff). */
async function until(box: Box, status: BoxStatus): Promise<BoxInfo> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const info = await box.info();
    if (info.status === status) return info;
    assert.ok(Date.now() < deadline, `box ${box.id} never became ${status} (${info.status})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('a container given a restart policy behind sbx reads restarting with its last exit code', async () => {
  await manager.start();
  const failing = await manager.create({ image: testEnv.baseImage, cmd: ['sh', '-c', 'echo hi; exit 4'] });
  const stopped = await until(failing, 'stopped');
  assert.deepEqual([stopped.exitCode, stopped.oomKilled], [4, false]);
  await docker.getContainer(failing.containerId).update({ RestartPolicy: { Name: 'always' } });
  await docker.getContainer(failing.containerId).start();
  const restarting = await until(failing, 'restarting');
  assert.equal(restarting.exitCode, 4, 'how the last run ended');
  await failing.remove();
});
