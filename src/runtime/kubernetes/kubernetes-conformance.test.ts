// The Runtime conformance suite against a real Kubernetes cluster (src/testing/kube-cluster.ts says which,
// and skips with the reason when there is none), on both exec paths: the in-box agent through
// port-forward, and the API server's exec (no agent image).
import { test } from 'node:test';
import { runtimeConformance } from '../../testing/conformance.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { GRACEFUL_CMD } from '../../sandbox/box-spec.js';
import { KubernetesRuntime } from './runtime.js';
import { openTestKube, testAgentImage, testKubeAddress, unavailable, unreachableKubeconfig } from '../../testing/kube-cluster.js';

const why = await unavailable();
if (why) {
  test('Runtime conformance: kubernetes', { skip: why }, () => undefined);
} else {
  for (const agentImage of [testAgentImage, undefined]) {
    const options = agentImage ? { agentImage } : {};
    runtimeConformance(agentImage ? 'kubernetes, exec through the in-box agent' : 'kubernetes, exec through the API server', {
      open: () => openTestKube(options),
      openUnreachable: () => new KubernetesRuntime(testKubeAddress(unreachableKubeconfig()), options),
      baseImage: testEnv.baseImage,
      runId: testRunId(agentImage ? 'kube-agent-conformance' : 'kube-conformance'),
      // sbx-base's CMD: the agent needs the command in the spec (the image config is not read here).
      ...(agentImage ? { cmd: GRACEFUL_CMD } : {}),
    });
  }
}
