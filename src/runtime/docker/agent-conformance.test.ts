/**
 * The unchanged Runtime conformance suite on both exec paths of the Docker runtime: through
 * the in-box agent (the default) and through the engine's exec (the agent turned off).
 */
import { runtimeConformance } from '../../testing/conformance.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { DockerRuntime } from './runtime.js';

for (const agent of [true, false]) {
  runtimeConformance(agent ? 'docker, exec through the in-box agent' : 'docker, exec through the engine (agent off)', {
    open: () => new DockerRuntime(testEnv.engineAddr, { agent }),
    openUnreachable: () => new DockerRuntime('unix:///tmp/sbx-no-engine-here.sock', { agent }),
    baseImage: testEnv.baseImage,
    runId: testRunId(agent ? 'agent-conformance' : 'engine-conformance'),
  });
}
