import { testEnv, testRunId } from '../../testing/env.js';
import { runtimeConformance } from '../../testing/conformance.js';
import { DockerRuntime } from './runtime.js';

runtimeConformance('docker', {
  open: () => new DockerRuntime(testEnv.engineAddr),
  openUnreachable: () => new DockerRuntime('unix:///tmp/sbx-no-engine-here.sock'),
  baseImage: testEnv.baseImage,
  pull: {
    ref: testEnv.pullImage,
    authRef: testEnv.pullImage.replace(testEnv.registry, testEnv.authRegistry),
    auth: { username: testEnv.registryUser, password: testEnv.registryPass, server: testEnv.authRegistry },
  },
  runId: testRunId('docker-conformance'),
});
