// The Runtime conformance suite against RemoteRuntime: the client over a real HTTP/2 connection
// to a NodeService on 127.0.0.1, which serves the local engine (src/testing/remote-node.ts).
import { after } from 'node:test';
import { runtimeConformance } from '../../testing/conformance.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { startTestNode, unreachableRemote } from '../../testing/remote-node.js';

const node = await startTestNode({ name: `conformance-${process.pid}` });
const dead = await unreachableRemote();
after(async () => {
  dead.close();
  await node.close();
});

runtimeConformance('remote node', {
  open: () => node.connect(),
  openUnreachable: () => dead.runtime,
  baseImage: testEnv.baseImage,
  pull: {
    ref: testEnv.pullImage,
    authRef: testEnv.pullImage.replace(testEnv.registry, testEnv.authRegistry),
    auth: { username: testEnv.registryUser, password: testEnv.registryPass, server: testEnv.authRegistry },
  },
  runId: testRunId('remote-conformance'),
});
