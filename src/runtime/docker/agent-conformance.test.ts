/**
 * The unchanged Runtime conformance suite on both exec paths of the Docker runtime: through
 * the in-box agent (the default) and through the engine's exec (the agent turned off).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import { runtimeConformance } from '../../testing/conformance.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { DockerRuntime } from './runtime.js';

const stateDir = mkdtempSync(join(tmpdir(), 'sbx-agent-conf-'));
after(() => rmSync(stateDir, { recursive: true, force: true }));

for (const agent of [true, false]) {
  runtimeConformance(agent ? 'docker, exec through the in-box agent' : 'docker, exec through the engine (agent off)', {
    open: () => new DockerRuntime(testEnv.engineAddr, { agent, stateDir }),
    openUnreachable: () => new DockerRuntime('unix:///tmp/sbx-no-engine-here.sock', { agent, stateDir }),
    baseImage: testEnv.baseImage,
    runId: testRunId(agent ? 'agent-conformance' : 'engine-conformance'),
  });
}
