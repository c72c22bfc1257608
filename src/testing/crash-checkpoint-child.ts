/**
 * A Manager process that dies (SIGKILL, no clean-up) in the middle of a memory-releasing pause or
 * its restore, for the crash tests of src/sandbox/checkpoint.test.ts: `checkpoint:before|after`
 * pause the box with its memory released and die just before the engine's checkpoint call (its
 * record on disk already) or just after it returned; `restore:before|after` resume a released box
 * and die around the engine's restore.
 * Usage: tsx crash-checkpoint-child.ts <managerName> <dataDir> <boxId> <step>
 */
import pino from 'pino';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { Manager } from '../sandbox/manager.js';
import { testEnv } from './env.js';

const [name, dataDir, id, step] = process.argv.slice(2) as [string, string, string, string];
const [phase, when] = step.split(':') as ['checkpoint' | 'restore', 'before' | 'after'];
const die = (at: 'before' | 'after'): void => {
  if (at === when) process.kill(process.pid, 'SIGKILL');
};

class DyingRuntime extends DockerRuntime {
  override async checkpoint(containerId: string, checkpoint: string): Promise<void> {
    die('before');
    await super.checkpoint(containerId, checkpoint);
    die('after');
  }
  override async restoreCheckpoint(containerId: string, checkpoint: string): Promise<void> {
    die('before');
    await super.restoreCheckpoint(containerId, checkpoint);
    die('after');
  }
}

const manager = new Manager({
  name,
  dataDir,
  cleanupIntervalMs: 0,
  pools: [{ name: 'gvisor', runtime: new DyingRuntime(testEnv.engineAddr), ociRuntime: testEnv.gvisorRuntime }],
  logger: pino({ level: 'silent' }),
});
await manager.start();
const box = await manager.get(id);
if (phase === 'checkpoint') await box.pause({ memory: 'release' });
else await box.resume();
// Not reached: the runtime kills this process first.
process.exit(3);
