/**
 * A Manager process that dies (SIGKILL, no clean-up) in the middle of an archive or a restore,
 * right after one engine call returned, for the crash tests of src/sandbox/archive.test.ts:
 * `archive:stop|commit|remove` archive the box and die after that call, `restore:create|start`
 * resume an archived box and die after that one.
 * Usage: tsx crash-archive-child.ts <managerName> <dataDir> <boxId> <step>
 */
import pino from 'pino';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { ContainerSpec } from '../runtime/types.js';
import { Manager } from '../sandbox/manager.js';
import { testEnv } from './env.js';

const [name, dataDir, id, step] = process.argv.slice(2) as [string, string, string, string];
const [phase, call] = step.split(':') as ['archive' | 'restore', string];
const die = (at: string): void => {
  if (at === call) process.kill(process.pid, 'SIGKILL');
};

class DyingRuntime extends DockerRuntime {
  override async stop(containerId: string, opts?: { timeoutMs?: number }): Promise<void> {
    await super.stop(containerId, opts);
    die('stop');
  }
  override async commit(containerId: string, ref: string, opts?: { labels?: Record<string, string> }): Promise<void> {
    await super.commit(containerId, ref, opts);
    die('commit');
  }
  override async remove(containerId: string, opts?: { force?: boolean }): Promise<void> {
    await super.remove(containerId, opts);
    die('remove');
  }
  override async create(spec: ContainerSpec): Promise<string> {
    const made = await super.create(spec);
    die('create');
    return made;
  }
  override async start(containerId: string): Promise<void> {
    await super.start(containerId);
    die('start');
  }
}

const manager = new Manager({
  name,
  dataDir,
  cleanupIntervalMs: 0,
  pools: [{ name: 'local', runtime: new DyingRuntime(testEnv.engineAddr) }],
  logger: pino({ level: 'silent' }),
});
await manager.start();
const box = await manager.get(id);
if (phase === 'archive') await box.archive();
else await box.resume();
// Not reached: the runtime kills this process first.
process.exit(3);
