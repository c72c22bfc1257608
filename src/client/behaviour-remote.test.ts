/**
 * The behaviour suite (testing/client/behaviour-suite.ts) on a remote pool: the SDK against a real
 * `sbx serve` whose only pool is `sbx://<node>`, a node joined with a token and served by
 * `sbx node` over mutual TLS on 127.0.0.1 (this machine's engine). Whatever a box does on the
 * local engine, it does on a node.
 */
import { Sbx } from './index.js';
import { behaviourSuite } from '../testing/client/behaviour-suite.js';
import type { SandboxApi } from '../testing/client/behaviour-suite.js';
import { testEnv } from '../testing/env.js';
import { joinedNodeOf } from '../testing/remote-node.js';
import { startTestServer } from '../testing/server.js';

behaviourSuite('SDK over sbx serve, on a remote node', async () => {
  const name = `beh-${process.pid}`;
  const server = await startTestServer('remote', { config: { pools: [{ name: 'remote', addr: `sbx://${name}` }] } });
  const node = await joinedNodeOf(server.manager, { name });
  const api: SandboxApi = new Sbx({ url: server.url, apiKey: server.admin });
  return {
    api,
    pool: 'remote',
    image: testEnv.baseImage,
    testImage: testEnv.testImage,
    pullImage: testEnv.pullImage,
    async dispose() {
      await server.dispose();
      await node.close();
    },
  };
});
