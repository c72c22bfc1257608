/**
 * The behaviour suite run twice: on the library's Manager, and on the SDK against a real
 * `sbx serve`. The same assertions hold for both (see testing/behaviour-suite.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { Manager } from '../sandbox/index.js';
import { removeContainersOf, startTestServer } from '../server/test-support.js';
import { testEnv } from '../testing/env.js';
import { Sbx } from './index.js';
import { behaviourSuite } from './testing/behaviour-suite.js';
import type { SandboxApi } from './testing/behaviour-suite.js';

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

/** box.attach() goes through the server's port proxy (/v1/boxes/:id/ports/:port/…), which lands in its own branch: remove these once it is merged. */
const NEEDS_PORT_PROXY = 'needs the server port proxy route /v1/boxes/:id/ports/:port/<path>';
const sdkGaps = Object.fromEntries(
  [
    'attach ws: a text and a 1 MB binary message echo back; close with a code',
    'attach ws: messages through the message event',
    'attach sse: the five events arrive one by one, about 100 ms apart (streamed, not buffered)',
    'attach sse: id (carried over), event, retry, multi-line data; comments and CRLF',
    'attach errors: options invalid_argument; port not exposed, nothing listening, aborted',
  ].map((t) => [t, NEEDS_PORT_PROXY]),
);

behaviourSuite(
  'SDK (Sbx over sbx serve)',
  async () => {
    const server = await startTestServer('sdk');
    const api: SandboxApi = new Sbx({ url: server.url, apiKey: server.admin });
    return { api, image: testEnv.baseImage, testImage: testEnv.testImage, pullImage: testEnv.pullImage, dispose: () => server.dispose() };
  },
  sdkGaps,
);
