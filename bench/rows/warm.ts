/**
 * Warm-pool rows: a create that claims a spare against a cold create, both through the library on
 * agent pools, as ratios in one run. WarmCreate is create → first exec result; WarmLifecycle is
 * create + exec + remove. Before each warm op (untimed) the row waits until a spare is ready, so
 * it measures the claim, not the refill; the refill's own cost is reported beside it (the CPU this
 * process spent making spares, per spare, and the spares made). Goal of issue #13: WarmCreate
 * p50 ≤ 20 ms on this machine.
 *
 * Run alone: `npx tsx bench/rows/warm.ts [--quick]`, or as part of `npm run bench` (`--only Warm`).
 */
import { fileURLToPath } from 'node:url';
import { BASE_IMAGE } from '../core/identity.js';
import type { RowResult } from '../core/result.js';
import { defineRow } from '../core/row.js';
import type { AnyRow } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import { runStandalone } from '../core/standalone.js';
import type { RunContext } from '../core/run-rows.js';
import { PoolSubject } from '../subjects/pool.js';
import type { PoolRef } from '../subjects/pool.js';

const SPARES = 2;

function expectHi(r: { exitCode: number; stdoutBytes: number }): void {
  if (r.exitCode !== 0 || r.stdoutBytes !== 3) throw new Error(`echo hi: exit ${r.exitCode}, ${r.stdoutBytes} bytes`);
}

/**
 * What the warm rows use of a side: a PoolSubject, or any side whose "spare" is a box made ready
 * untimed (the Lifecycle rows' paused and archived boxes), so their op is the same create → first exec.
 */
export type WarmSide = Pick<PoolSubject, 'name' | 'untilSpare' | 'create' | 'exec' | 'remove'>;

const waitForSpare = async (s: WarmSide) => s.untilSpare();

export const WARM_ROWS: AnyRow<WarmSide>[] = [
  defineRow<WarmSide, undefined, { made?: PoolRef }>({
    name: 'WarmCreate',
    group: 'latency',
    note: 'create → first exec result (warm claim vs cold create)',
    iterations: { quick: 8, full: 40 },
    warmup: 1,
    before: async (s) => {
      await waitForSpare(s);
      return {};
    },
    async op(s, _shared, item) {
      item.made = await s.create();
      expectHi(await s.exec(item.made, ['echo', 'hi']));
    },
    async after(s, _shared, item) {
      if (item.made) await s.remove(item.made);
    },
  }),
  defineRow<WarmSide, undefined, undefined>({
    name: 'WarmLifecycle',
    group: 'latency',
    note: 'create+exec+remove (warm claim vs cold create)',
    iterations: { quick: 8, full: 40 },
    warmup: 1,
    before: async (s) => {
      await waitForSpare(s);
      return undefined;
    },
    async op(s) {
      const box = await s.create();
      try {
        expectHi(await s.exec(box, ['echo', 'hi']));
      } finally {
        await s.remove(box);
      }
    },
  }),
];

export function warmRowNames(): string[] {
  return WARM_ROWS.map((r) => r.name);
}

export async function runWarmRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  const cpuBefore = process.cpuUsage();
  const warm = await PoolSubject.open('warm', { warm: [{ image: BASE_IMAGE, size: SPARES }] }, opts);
  const cold = await PoolSubject.open('cold', {}, opts);
  try {
    const rows = WARM_ROWS.filter((r) => !opts.only || opts.only.has(r.name));
    const results = await runPairRows(rows, warm, cold, ctx);
    const [info] = await warm.warm();
    const cpu = process.cpuUsage(cpuBefore);
    if (info) {
      const made = info.hits + info.ready + info.replaced;
      const note = `hits ${info.hits}, misses ${info.misses}, spares made ${made}; this process's CPU for the whole run incl. refills ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms`;
      ctx.log(`warm pool: ${note}`);
      for (const r of results) r.note = `${r.note ?? ''}; ${note}`;
    }
    return results;
  } finally {
    // Spares outlive their Manager on purpose (the next one adopts them); a benchmark's must go.
    await warm.manager.removePool('local', { force: true }).catch((err: unknown) => ctx.log(`could not remove the warm spares: ${String(err)}`));
    await warm.close();
    await cold.close();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await runStandalone('wm', ['warm', 'cold'], runWarmRows);
