/**
 * The behaviour suite run twice: on the library's Manager, and on the SDK against a real
 * `sbx serve`. The same assertions hold for both (see testing/behaviour-suite.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { Manager } from '../sandbox/index.js';
import { removeContainersOf, startTestServer } from '../testing/server.js';
import { testEnv } from '../testing/env.js';
import { Sbx } from './index.js';
import { behaviourSuite } from '../testing/client/behaviour-suite.js';
import type { SandboxApi } from '../testing/client/behaviour-suite.js';

behaviourSuite('library (Manager)', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'sbx-sdk-lib-'));
  const name = `sdk-lib-${process.pid}`;
  const manager = new Manager({ name, dataDir, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }), pools: [{ name: 'local', addr: testEnv.engineAddr }] });
  await manager.start();
  // The library's Manager must fit the shape the SDK declares: this line is the check.
  const api: SandboxApi = manager;
  return {
    api,
    image: testEnv.baseImage,
    testImage: testEnv.testImage,
    pullImage: testEnv.pullImage,
    async dispose() {
      await removeContainersOf(name);
      await manager.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
});

behaviourSuite('SDK (Sbx over sbx serve)', async () => {
  const server = await startTestServer('sdk');
  const api: SandboxApi = new Sbx({ url: server.url, apiKey: server.admin });
  return { api, image: testEnv.baseImage, testImage: testEnv.testImage, pullImage: testEnv.pullImage, dispose: () => server.dispose() };
});
