/**
 * The egress-policy suite (src/testing/egress-suite.ts) on a local Docker pool: the engine's
 * sbx-egress helper enforces it (docs/network.md), resolving through the fake internet's DNS.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { egressSuite } from '../testing/egress-suite.js';
import { TEST_LABEL, testEnv, testRunId } from '../testing/env.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';

const runId = testRunId('egress');

egressSuite('Docker', {
  image: testEnv.testImage,
  labels: { [TEST_LABEL]: runId },
  async open(net) {
    const name = `egress-${process.pid}`;
    const dataDir = mkdtempSync(join(tmpdir(), 'sbx-egress-'));
    const manager = new Manager({
      name,
      pools: [{ name: 'local', addr: testEnv.engineAddr, maxPerUser: 0, runtimeOptions: { egressDns: [net.dns] } }],
      dataDir,
      cleanupIntervalMs: 0,
    });
    await manager.start();
    return {
      manager,
      pool: 'local',
      async close() {
        await manager.close();
        // Nothing of this file's may outlive it (boxes the cases did not remove themselves included).
        const engine = new DockerRuntime(testEnv.engineAddr);
        const left = await engine.list({ labels: managerSelector(name) });
        await Promise.all(left.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
        await engine.close();
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  },
});
