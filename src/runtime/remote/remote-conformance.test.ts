// The Runtime conformance suite against RemoteRuntime as a Manager has it: a node joined to a
// hub (token, pinned certificates, credential) and served by `sbx node` over mutual TLS on
// 127.0.0.1, on the local engine (src/testing/remote-node.ts).
import { after } from 'node:test';
import { runtimeConformance } from '../../testing/conformance.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { startJoinedNode, startTestHub, unreachableRemote } from '../../testing/remote-node.js';

const hub = await startTestHub();
const node = await startJoinedNode(hub.hub, { name: `conformance-${process.pid}` });
const dead = await unreachableRemote();
after(async () => {
  dead.close();
  await node.close();
  await hub.close();
});

runtimeConformance('remote node', {
  open: () => node.runtime(),
  openUnreachable: () => dead.runtime,
  baseImage: testEnv.baseImage,
  pull: {
    ref: testEnv.pullImage,
    authRef: testEnv.pullImage.replace(testEnv.registry, testEnv.authRegistry),
    auth: { username: testEnv.registryUser, password: testEnv.registryPass, server: testEnv.authRegistry },
  },
  runId: testRunId('remote-conformance'),
});
