/**
 * A started Manager costs what its pools use (issue 30: Memory0Boxes): with only a Docker pool it
 * loads no Kubernetes client (@kubernetes/client-node, ~130 MiB of RSS), nothing of the remote
 * nodes' wire (Connect, protobuf) and no certificate builder (node-forge). Checked in a child that
 * imports the package entry, as `import { Manager } from 'sbx-manager'` does, starts a Manager and
 * records every module it loads; the same child with a k8s:// pool shows the check can fail.
 */
import assert from 'node:assert/strict';
import { dirname, join, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { modulesLoadedBy, packagesOf } from '../testing/module-recorder.js';
import { testEnv } from '../testing/env.js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const entry = pathToFileURL(join(repo, 'src/index.ts')).href;
/** What only a pool or a feature that needs it may load. */
const FEATURE_ONLY = ['@kubernetes/client-node', '@connectrpc/connect', '@connectrpc/connect-node', '@bufbuild/protobuf', 'node-forge'];

/** The packages a child loads that starts (and closes) a Manager over `pools`. */
async function packagesLoadedByManager(pools: object[]): Promise<{ packages: string[]; modules: string[] }> {
  const { modules, stdout } = await modulesLoadedBy(
    `import { mkdtempSync, rmSync } from 'node:fs';
     import { tmpdir } from 'node:os';
     import { join } from 'node:path';
     const { Manager } = await import(${JSON.stringify(entry)});
     const dataDir = mkdtempSync(join(tmpdir(), 'sbx-manager-graph-'));
     const pino = (await import('pino')).default;
     const manager = new Manager({ name: 'graph-' + process.pid, pools: ${JSON.stringify(pools)}, dataDir, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }) });
     await manager.start();
     await manager.close();
     rmSync(dataDir, { recursive: true, force: true });
     process.stdout.write('started');`,
    { cwd: repo },
  );
  assert.equal(stdout, 'started');
  return { packages: packagesOf(modules), modules };
}

test('a started Manager with one Docker pool loads no Kubernetes client, no remote-node wire, no node-forge', async () => {
  const { packages, modules } = await packagesLoadedByManager([{ name: 'local', addr: testEnv.engineAddr, maxPerUser: 0 }]);
  assert.deepEqual(
    packages.filter((p) => FEATURE_ONLY.includes(p)),
    [],
    `packages loaded: ${packages.join(', ')}`,
  );
  assert.ok(packages.includes('dockerode'), 'the recorder saw the Docker pool load its client');
  assert.ok(!modules.some((m) => m.endsWith('/src/runtime/remote/hub.ts')), 'the node hub is loaded when nodes are used');
});

test('a k8s:// pool loads the Kubernetes client when it is first used (so the check above can fail)', async () => {
  const { packages } = await packagesLoadedByManager([{ name: 'kube', addr: 'k8s://?kubeconfig=/nonexistent/kubeconfig&namespace=sbx' }]);
  assert.ok(packages.includes('@kubernetes/client-node'), `packages loaded: ${packages.join(', ')}`);
});
