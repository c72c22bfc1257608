/**
 * A Manager of a test file's own (own name, temp data dir, no cleanup loop, silent), and its
 * disposal: close it, remove whatever of its boxes is left on the engine, and fail on them.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { PoolConfig } from '../sandbox/config.js';
import { managerSelector } from '../sandbox/labels.js';
import { Manager } from '../sandbox/manager.js';
import { WARM_LABEL } from '../sandbox/warm.js';
import { testEnv } from './env.js';

export interface TestManager {
  manager: Manager;
  /** Closes the Manager, removes its containers left on the engine and fails naming them (warm spares are not leaks: close keeps them). */
  dispose(): Promise<void>;
}

/**
 * @example
 * const { manager, dispose } = testManager('gvisor', [{ name: 'gvisor', ociRuntime: 'runsc' }]);
 * after(dispose);
 */
export function testManager(label: string, pools: PoolConfig[]): TestManager {
  const dataDir = mkdtempSync(join(tmpdir(), `sbx-${label}-`));
  const name = `${label}-${process.pid}`;
  const manager = new Manager({ name, dataDir, pools, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }) });
  return {
    manager,
    async dispose() {
      await manager.close();
      const engine = new DockerRuntime(testEnv.engineAddr, { agent: false });
      const left = await engine.list({ labels: managerSelector(name) });
      await Promise.all(left.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
      await engine.close();
      rmSync(dataDir, { recursive: true, force: true });
      assert.deepEqual(
        left.filter((c) => c.labels[WARM_LABEL] === undefined).map((c) => c.name),
        [],
        `boxes left behind by the ${label} tests`,
      );
    },
  };
}
