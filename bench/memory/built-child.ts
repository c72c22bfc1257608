/**
 * Memory0BoxesBuilt's child. Plain node runs it from the tsc output of src/ and of this file
 * (memory/built.ts builds both), so its reading is a started Manager as the built package runs:
 * without tsx's loader and the sources it compiled, which Memory0Boxes (from source) counts.
 */
import { settle } from '../core/gc.js';
import type { BuiltMemoryArgs, BuiltMemoryReport } from './protocol.js';

const args = JSON.parse(process.argv[2] ?? '{}') as BuiltMemoryArgs;
const baseline = await settle();
// The same module and pool as Memory0Boxes' child, for a like-for-like reading.
const { Manager } = await import('../../src/sandbox/manager.js');
const manager = new Manager({ name: args.managerName, pools: [{ name: 'local', addr: 'local', maxPerUser: 0 }], dataDir: args.dataDir, cleanupIntervalMs: 0 });
await manager.start();
const started = await settle();
try {
  const report: BuiltMemoryReport = {
    baselineRss: baseline.rss,
    managerRss: started.rss,
    managerHeapUsed: started.heapUsed,
    gc: (globalThis as { gc?: () => void }).gc !== undefined,
  };
  process.send?.(report);
} finally {
  await manager.close();
}
