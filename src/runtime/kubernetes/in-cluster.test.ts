// sbx inside a pod finds its cluster from the pod's service account (`k8s://` with no kubeconfig:
// in-cluster config). The test cluster's API server listens on loopback and has no kube-proxy, so
// the pod reaches it through a relay on the node address under the name its certificate carries
// (kubernetes.default.svc, by hostAliases), as a pod of a normal cluster reaches its Service. The
// pod runs this checkout's runtime (a read-only hostPath) with the `sbx` ServiceAccount's token:
// the least-privilege Role. Local test cluster only (the pod needs the harness's admin identity).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import net from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, test } from 'node:test';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import type { V1Pod } from '@kubernetes/client-node';
import { testEnv, testRunId, TEST_LABEL } from '../../testing/env.js';
import { unavailable } from '../../testing/kube-cluster.js';

const ADMIN = '/var/lib/sbx-kube/kubeconfig/admin.kubeconfig';
const NODE_IP = '10.244.0.1';
const NAMESPACE = 'sbx-test';
const root = join(dirname(fileURLToPath(import.meta.url)), '../../..');
const why =
  (await unavailable()) ??
  (process.env['SBX_TEST_KUBECONFIG'] && !process.env['SBX_TEST_KUBECONFIG'].startsWith('/var/lib/sbx-kube/')
    ? 'another cluster than the local test cluster'
    : undefined) ??
  (existsSync(ADMIN) ? undefined : `no ${ADMIN}`);
const runId = testRunId('in-cluster');
const name = `sbx-in-cluster-${process.pid}`;
let relay: net.Server;
let core: CoreV1Api;

before(async () => {
  if (why) return;
  const kc = new KubeConfig();
  kc.loadFromFile(ADMIN);
  core = kc.makeApiClient(CoreV1Api);
  const api = new URL(kc.getCurrentCluster()!.server);
  relay = net.createServer((c) => {
    const up = net.connect(Number(api.port), api.hostname);
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  await new Promise<void>((resolve) => relay.listen(0, NODE_IP, resolve));
});

after(async () => {
  if (why) return;
  await core.deleteNamespacedPod({ name, namespace: NAMESPACE, gracePeriodSeconds: 0 }).catch(() => undefined);
  relay.close();
});

test('k8s:// inside a pod: in-cluster config, the pod’s service account, TLS verified by its CA', { skip: why ?? false }, async () => {
  const pod: V1Pod = {
    metadata: { name, namespace: NAMESPACE, labels: { [TEST_LABEL]: runId } },
    spec: {
      serviceAccountName: 'sbx',
      automountServiceAccountToken: true,
      restartPolicy: 'Never',
      hostAliases: [{ ip: NODE_IP, hostnames: ['kubernetes.default.svc'] }],
      volumes: [{ name: 'sbx', hostPath: { path: root, type: 'Directory' } }],
      containers: [
        {
          name: 'main',
          image: testEnv.testImage,
          imagePullPolicy: 'IfNotPresent',
          command: ['node', '--import', `file://${root}/node_modules/tsx/dist/loader.mjs`, join(root, 'src/testing/in-cluster-child.ts')],
          workingDir: '/tmp',
          env: [
            { name: 'KUBERNETES_SERVICE_HOST', value: 'kubernetes.default.svc' },
            { name: 'KUBERNETES_SERVICE_PORT', value: String((relay.address() as net.AddressInfo).port) },
            { name: 'HOME', value: '/tmp' },
          ],
          volumeMounts: [{ name: 'sbx', mountPath: root, readOnly: true }],
          securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
        },
      ],
    },
  };
  await core.createNamespacedPod({ namespace: NAMESPACE, body: pod });
  let phase = '';
  for (let i = 0; i < 600 && phase !== 'Succeeded' && phase !== 'Failed'; i++) {
    await sleep(100);
    phase = (await core.readNamespacedPod({ name, namespace: NAMESPACE })).status?.phase ?? '';
  }
  const log = await core.readNamespacedPodLog({ name, namespace: NAMESPACE, container: 'main' });
  const line = log.trim().split('\n').at(-1) ?? '';
  assert.equal(phase, 'Succeeded', `the pod ended ${phase}: ${log}`);
  const out = JSON.parse(line) as { ok: boolean; version: string; seesItself: boolean };
  assert.equal(out.ok, true, line);
  assert.match(out.version, /^v1\./);
  assert.equal(out.seesItself, true, 'it listed its own namespace, the service account’s');
});
