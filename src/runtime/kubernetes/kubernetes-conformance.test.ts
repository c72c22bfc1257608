// The Runtime conformance suite against a real Kubernetes cluster (test-cluster.ts says which,
// and skips with the reason when there is none).
import { test } from 'node:test';
import { runtimeConformance } from '../../testing/conformance.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { KubernetesRuntime } from './runtime.js';
import { openTestKube, testKubeAddress, unavailable, unreachableKubeconfig } from './test-cluster.js';

const why = await unavailable();
if (why) {
  test('Runtime conformance: kubernetes', { skip: why }, () => undefined);
} else {
  runtimeConformance('kubernetes', {
    open: () => openTestKube(),
    openUnreachable: () => new KubernetesRuntime(testKubeAddress(unreachableKubeconfig())),
    baseImage: testEnv.baseImage,
    runId: testRunId('kube-conformance'),
  });
}
