/**
 * A Manager process that dies (SIGKILL, no clean-up) in the middle of a create, for the crash
 * tests: `after-create` dies once the engine made the container and before it is started,
 * `after-start` once it runs but before the Manager registered it.
 * Usage: tsx crash-create-child.ts <managerName> <dataDir> <boxId> <after-create|after-start>
 */
import pino from 'pino';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { ContainerSpec } from '../runtime/types.js';
import { Manager } from '../sandbox/manager.js';
import { testEnv } from './env.js';

const [name, dataDir, id, mode] = process.argv.slice(2) as [string, string, string, string];

class DyingRuntime extends DockerRuntime {
  override async create(spec: ContainerSpec): Promise<string> {
    const containerId = await super.create(spec);
    if (mode === 'after-create') process.kill(process.pid, 'SIGKILL');
    return containerId;
  }
  override async start(containerId: string): Promise<void> {
    await super.start(containerId);
    if (mode === 'after-start') process.kill(process.pid, 'SIGKILL');
  }
}

const manager = new Manager({
  name,
  dataDir,
  cleanupIntervalMs: 0,
  pools: [{ name: 'local', runtime: new DyingRuntime(testEnv.engineAddr) }],
  logger: pino({ level: 'silent' }),
});
await manager.create({ id, image: testEnv.baseImage, owner: 'crashed', labels: { from: 'child' } });
// Not reached: the runtime kills this process first.
process.exit(3);
