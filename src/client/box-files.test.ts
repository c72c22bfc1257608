/**
 * The box filesystem suite (testing/box-files-suite.ts) on the library's Manager and on the SDK
 * against a real `sbx serve`, each with a pool that has the agent and one with `agent: false`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { Manager } from '../sandbox/index.js';
import type { PoolConfig } from '../sandbox/config.js';
import { removeContainersOf, startTestServer } from '../testing/server.js';
import { testEnv } from '../testing/env.js';
import { Sbx } from './index.js';
import { boxFilesSuite } from '../testing/client/box-files-suite.js';

const pools: PoolConfig[] = [
  { name: 'local', addr: testEnv.engineAddr },
  { name: 'noagent', addr: testEnv.engineAddr, agent: false },
];

boxFilesSuite('library (Manager)', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'sbx-boxfiles-lib-'));
  const name = `boxfiles-lib-${process.pid}`;
  const manager = new Manager({ name, dataDir, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }), pools });
  await manager.start();
  return {
    api: manager,
    image: testEnv.baseImage,
    pools: { agent: 'local', fallback: 'noagent' },
    async dispose() {
      await removeContainersOf(name);
      await manager.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
});

boxFilesSuite('SDK (Sbx over sbx serve)', async () => {
  const server = await startTestServer('boxfiles', { config: { pools } });
  return {
    api: new Sbx({ url: server.url, apiKey: server.admin }),
    image: testEnv.baseImage,
    pools: { agent: 'local', fallback: 'noagent' },
    dispose: () => server.dispose(),
  };
});
