import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { EngineClient } from '../engine/client.js';
import { Interrupted, abortOnSignals } from './interrupt.js';
import type { RowResult } from './result.js';
import type { RunContext } from './run-rows.js';
import { sweep } from './sweep.js';

type PairRows = (ctx: RunContext, opts: { managerName: string; dataDir: string; runId: string }) => Promise<RowResult[]>;

/**
 * Runs one file's pair rows outside `npm run bench` (`npx tsx bench/rows/<file>.ts [--quick]`) and
 * prints them as a small table of the two sides' p50/p95/p99 and their ratio; sweeps what the run left.
 */
export async function runStandalone(tag: string, sides: readonly [string, string], rows: PairRows): Promise<void> {
  const mode = process.argv.includes('--quick') ? 'quick' : 'full';
  const runId = String(process.pid);
  const tmp = await mkdtemp(join(os.tmpdir(), `sbx-bench-${tag}-`));
  const log = (line: string) => process.stderr.write(`bench: ${line}\n`);
  const engine = new EngineClient();
  try {
    // Ctrl-C stops after the op in progress and still cleans up (rows that start processes or engines stop them).
    const signal = abortOnSignals(log, () => undefined);
    let results: RowResult[];
    try {
      results = await rows({ mode, log, signal }, { managerName: `bench-${tag}-${process.pid}`, dataDir: tmp, runId });
    } catch (err) {
      if (!(err instanceof Interrupted)) throw err;
      log('interrupted: no results');
      process.exitCode = 130;
      return;
    }
    const [a, b] = sides;
    const out = [`${'row'.padEnd(24)}${`${a} p50 ms`.padStart(14)}  p95 ms  p99 ms  ${`${b} p50 ms`.padStart(14)}  p95 ms  p99 ms   ratio (${a}/${b} p50)`];
    for (const r of results) {
      const [x, y] = r.sides;
      if (!x || !y) {
        out.push(`${r.name.padEnd(24)}${r.status === 'ok' ? (r.note ?? '') : `${r.status}: ${r.reason ?? ''}`}`);
        continue;
      }
      out.push(
        `${r.name.padEnd(24)}${x.stats.p50.toFixed(2).padStart(14)}${x.stats.p95.toFixed(1).padStart(8)}${x.stats.p99.toFixed(1).padStart(8)}  ${y.stats.p50.toFixed(2).padStart(14)}${y.stats.p95.toFixed(1).padStart(8)}${y.stats.p99.toFixed(1).padStart(8)}   ${(r.ratio ?? 0).toFixed(3).padStart(7)}x   (n=${x.stats.n})`,
      );
    }
    const notes = [
      ...new Set(
        results
          .filter((r) => r.sides.length === 2)
          .map((r) => r.note)
          .filter(Boolean),
      ),
    ];
    process.stdout.write(`${[...out, ...notes.map((n) => `  ${n}`)].join('\n')}\n`);
  } finally {
    await sweep(engine, runId).catch(() => 0);
    engine.close();
    await rm(tmp, { recursive: true, force: true });
  }
}
