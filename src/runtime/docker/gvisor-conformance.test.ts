/**
 * The unchanged Runtime conformance suite on gVisor (`ociRuntime: runsc`), through the in-box
 * agent and through the engine's exec.
 */
import { runtimeConformance } from '../../testing/conformance.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { DockerRuntime } from './runtime.js';

for (const agent of [true, false]) {
  runtimeConformance(agent ? 'docker on gVisor, exec through the in-box agent' : 'docker on gVisor, exec through the engine', {
    open: () => new DockerRuntime(testEnv.engineAddr, { agent }),
    openUnreachable: () => new DockerRuntime('unix:///tmp/sbx-no-engine-here.sock', { agent }),
    baseImage: testEnv.baseImage,
    spec: { ociRuntime: testEnv.gvisorRuntime },
    runId: testRunId(agent ? 'gvisor-agent-conformance' : 'gvisor-engine-conformance'),
  });
}
