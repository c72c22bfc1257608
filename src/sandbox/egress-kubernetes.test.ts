/**
 * The egress-policy suite (src/testing/egress-suite.ts) on a Kubernetes pool of the test cluster:
 * each pod's sbx-egress sidecar enforces it (docs/network.md, "Kubernetes"). Skipped, saying why,
 * where there is no cluster (scripts/test.sh brings it up for this file and fails without it).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe } from 'node:test';
import pino from 'pino';
import { egressSuite } from '../testing/egress-suite.js';
import { TEST_LABEL, testEnv, testRunId } from '../testing/env.js';
import { openTestKube, testAgentImage, testKubeAddress, unavailable } from '../testing/kube-cluster.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';

const why = await unavailable();
const runId = testRunId('egress-kube');

if (why) describe('egress policy: Kubernetes', { skip: why }, () => undefined);
else
  egressSuite('Kubernetes', {
    image: testEnv.testImage,
    labels: { [TEST_LABEL]: runId },
    async open(net) {
      const name = `egk-${process.pid}`;
      const dataDir = mkdtempSync(join(tmpdir(), 'sbx-egress-kube-'));
      const manager = new Manager({
        name,
        pools: [
          {
            name: 'kube',
            addr: testKubeAddress(),
            agentImage: testAgentImage,
            readyTimeoutMs: 60_000,
            maxPerUser: 0,
            // The test cluster's pod network: other boxes, closed under `all`.
            runtimeOptions: { egressDns: [net.dns], egressDenyNetworks: ['10.244.0.0/16'] },
          },
        ],
        dataDir,
        cleanupIntervalMs: 0,
        logger: pino({ level: 'silent' }),
      });
      await manager.start();
      return {
        manager,
        pool: 'kube',
        async close() {
          await manager.close();
          const cluster = openTestKube();
          const left = await cluster.list({ labels: managerSelector(name) });
          await Promise.all(left.map((c) => cluster.remove(c.id, { force: true }).catch(() => undefined)));
          await cluster.close();
          rmSync(dataDir, { recursive: true, force: true });
        },
      };
    },
  });
