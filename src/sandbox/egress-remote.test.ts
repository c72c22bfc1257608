/**
 * The egress-policy suite (src/testing/egress-suite.ts) on a remote pool: a Manager whose pool is
 * `sbx://<node>`, the node joined with a token and served by `sbx node` over mutual TLS on
 * 127.0.0.1 (this machine's engine, whose sbx-egress helper enforces the rules). Whatever a box's
 * policy does on a local Docker pool, it does on a node.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { egressSuite } from '../testing/egress-suite.js';
import { TEST_LABEL, testEnv, testRunId } from '../testing/env.js';
import { joinedNodeOf } from '../testing/remote-node.js';
import { removeContainersOf } from '../testing/server.js';
import { Manager } from './manager.js';

const runId = testRunId('egress-remote');

egressSuite('remote node', {
  image: testEnv.testImage,
  labels: { [TEST_LABEL]: runId },
  async open(net) {
    const name = `egress-remote-${process.pid}`;
    const dataDir = mkdtempSync(join(tmpdir(), 'sbx-egress-remote-'));
    const manager = new Manager({ name, pools: [{ name: 'remote', addr: `sbx://${name}`, maxPerUser: 0 }], dataDir, cleanupIntervalMs: 0 });
    await manager.start();
    // `sbx node` takes its enforcer's upstream resolvers from SBX_EGRESS_DNS, as a user runs it (this file's own process).
    process.env['SBX_EGRESS_DNS'] = net.dns;
    const node = await joinedNodeOf(manager, { name });
    return {
      manager,
      pool: 'remote',
      async close() {
        await manager.close();
        await node.close();
        // Nothing of this file's may outlive it (boxes the cases did not remove themselves included).
        await removeContainersOf(name);
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  },
});
