/**
 * A Manager process that dies (SIGKILL, no clean-up) between a warm claim and its return: once
 * the claim is on disk, the refill's engine create of the replacement spare is the next thing it
 * does, synchronously inside the claim, and this runtime dies there. Before dying it prints the
 * spare it is about to claim, so the test can check the recovered box is that container.
 * Usage: tsx warm-claim-crash-child.ts <managerName> <dataDir> <boxId>
 */
import pino from 'pino';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { ContainerSpec } from '../runtime/types.js';
import { Manager } from '../sandbox/manager.js';
import { WARM_LABEL } from '../sandbox/warm.js';
import { managerSelector } from '../sandbox/labels.js';
import { testEnv } from './env.js';

const [name, dataDir, id] = process.argv.slice(2) as [string, string, string];
let armed = false;

class DyingRuntime extends DockerRuntime {
  override async create(spec: ContainerSpec): Promise<string> {
    if (armed) process.kill(process.pid, 'SIGKILL');
    return super.create(spec);
  }
}

const runtime = new DyingRuntime(testEnv.engineAddr);
const manager = new Manager({
  name,
  dataDir,
  cleanupIntervalMs: 0,
  pools: [{ name: 'local', runtime, warm: [{ image: testEnv.baseImage, size: 1 }] }],
  logger: pino({ level: 'silent' }),
});
await manager.start();
for (let i = 0; i < 300 && (await manager.warm())[0]?.ready !== 1; i++) await new Promise((r) => setTimeout(r, 100));
const spares = await runtime.list({ labels: managerSelector(name, 'local') });
const spare = spares.find((c) => c.labels[WARM_LABEL] !== undefined && c.running);
process.stdout.write(`${JSON.stringify({ spare: spare?.id })}\n`);
armed = true;
await manager.create({
  id,
  image: testEnv.baseImage,
  owner: 'crashed',
  labels: { from: 'child' },
  env: { FOO: 'bar' },
  policy: 'longrunning',
  idleTimeoutMs: 123_000,
});
// Not reached: the refill's create kills this process first.
process.exit(3);
