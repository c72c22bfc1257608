/**
 * Runs in its own process (forked by memory/probe.ts) so that what it measures is a Manager's
 * footprint and nothing of the benchmark around it.
 */
import { settle } from '../core/gc.js';
import type { MemoryChildArgs, MemoryReport } from './protocol.js';

const args = JSON.parse(process.argv[2] ?? '{}') as MemoryChildArgs;
const gc = (globalThis as { gc?: () => void }).gc;

const baseline = await settle();
const { Manager } = await import('../../src/sandbox/manager.js');
const { forEachLimited } = await import('../core/pool.js');
const { BASE_IMAGE, BENCH_LABEL } = await import('../core/identity.js');

const manager = new Manager({ name: args.managerName, pools: [{ name: 'local', addr: 'local', maxPerUser: 0 }], dataDir: args.dataDir, cleanupIntervalMs: 0 });
await manager.start();
const withManager = await settle();

const create = async (): Promise<void> => {
  await manager.create({ image: BASE_IMAGE, labels: { [BENCH_LABEL]: args.runId } });
};
// Same cap as the Manager's own cleanup: two cores queue anything wider.
const PARALLEL = 5;
const t0 = performance.now();
// The first wave pays the one-time costs (token secret, lazily built schemas, the pooled
// sockets of PARALLEL calls), so growth after it is what boxes themselves cost.
await forEachLimited(Array.from({ length: Math.min(PARALLEL, args.boxes) }), PARALLEL, create);
const withFirst = await settle();
await forEachLimited(Array.from({ length: Math.max(0, args.boxes - PARALLEL) }), PARALLEL, create);
const createWallMs = performance.now() - t0;
const withBoxes = await settle();

try {
  const report: MemoryReport = {
    baselineRss: baseline.rss,
    managerRss: withManager.rss,
    managerHeapUsed: withManager.heapUsed,
    firstBoxes: (await manager.list()).length >= PARALLEL ? PARALLEL : args.boxes,
    firstRss: withFirst.rss,
    firstHeapUsed: withFirst.heapUsed,
    boxesRss: withBoxes.rss,
    boxesHeapUsed: withBoxes.heapUsed,
    boxes: (await manager.list()).length,
    gc: gc !== undefined,
    createWallMs,
  };
  process.send?.(report);
} finally {
  await forEachLimited(await manager.list(), 5, (b) => b.remove());
  await manager.close();
}
