/**
 * The in-box agent through the Manager: the pool option (default on), `info().execPath`, nothing
 * of the agent's on the host (no per-box directory), and a restarted Manager reconnecting.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { after, test } from 'node:test';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { testEnv } from '../testing/env.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';
import type { PoolConfig } from './config.js';

const dataDir = mkdtempSync(join(tmpdir(), 'sbx-agent-pool-'));
const name = `agentpool-${process.pid}`;
const pools: PoolConfig[] = [
  { name: 'on', addr: testEnv.engineAddr },
  { name: 'off', addr: testEnv.engineAddr, agent: false },
];
const engine = new DockerRuntime(testEnv.engineAddr, { agent: false });
const managers: Manager[] = [];
const open = () => {
  const m = new Manager({ name, pools, dataDir, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }) });
  managers.push(m);
  return m;
};

after(async () => {
  const left = await engine.list({ labels: managerSelector(name) });
  await Promise.all(left.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
  await Promise.all(managers.map((m) => m.close()));
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(
    left.map((c) => c.name),
    [],
    'boxes left behind',
  );
});

test('the pool option: on by default, off means the engine path; a restarted Manager reconnects to the agent', async () => {
  const m = open();
  await m.start();
  assert.deepEqual(
    (await m.pools()).map((p) => [p.name, p.agent]),
    [
      ['on', true],
      ['off', false],
    ],
  );
  const withAgent = await m.create({ image: testEnv.baseImage, pool: 'on' });
  const without = await m.create({ image: testEnv.baseImage, pool: 'off' });
  assert.equal((await withAgent.info()).execPath, 'agent');
  assert.equal((await without.info()).execPath, 'engine');
  // Parent PID 1 = started by the agent; 0 = by the engine. Both as the box user.
  assert.equal((await withAgent.exec(['sh', '-c', 'id -u; cut -d" " -f4 /proc/self/stat'])).stdout, '1000\n1\n');
  assert.equal((await without.exec(['sh', '-c', 'id -u; cut -d" " -f4 /proc/self/stat'])).stdout, '1000\n0\n');
  assert.equal(existsSync(join(dataDir, 'agent')), false, 'no per-box directory of the agent on the host');

  await m.close();
  const again = open();
  await again.start();
  const back = await again.get(withAgent.id);
  assert.equal((await back.info()).execPath, 'agent');
  assert.equal((await back.exec(['sh', '-c', 'cut -d" " -f4 /proc/self/stat'])).stdout, '1\n');
  await back.remove();
  await (await again.get(without.id)).remove();
  assert.equal(existsSync(join(dataDir, 'agent')), false);
});
