import { notRun, pairResult } from './result.js';
import type { RowResult } from './result.js';
import type { AnyRow, Mode, Named } from './row.js';
import { samplePair } from './sampler.js';

export interface RunContext {
  mode: Mode;
  signal: AbortSignal;
  log: (line: string) => void;
}

/**
 * Per-row time budget. The iteration counts fit well inside it on the machine docs/benchmarks.md
 * describes; on a slower one the budget cuts rows short so the whole run still ends in time
 * (14 rows: quick under 2 minutes, full under 10).
 */
const BUDGET_MS: Record<Mode, number> = { quick: 6_000, full: 40_000 };

/**
 * Runs each row against `subject` and `baseline`. A failing row is reported as failed and the
 * run goes on; an interrupt stops everything.
 */
export async function runPairRows<S extends Named>(rows: readonly AnyRow<S>[], subject: S, baseline: S, ctx: RunContext): Promise<RowResult[]> {
  const results: RowResult[] = [];
  for (const row of rows) {
    ctx.signal.throwIfAborted();
    ctx.log(`${row.name}: running (${subject.name} vs ${baseline.name})`);
    try {
      const { samples, wallMs } = await samplePair(row, subject, baseline, { mode: ctx.mode, budgetMs: BUDGET_MS[ctx.mode], signal: ctx.signal });
      const r = pairResult(row, [subject.name, baseline.name], samples, wallMs);
      ctx.log(`${row.name}: ${r.sides[0]?.stats.n ?? 0} pairs in ${(wallMs / 1000).toFixed(1)}s, ratio ${r.ratio?.toFixed(2) ?? '-'}`);
      results.push(r);
    } catch (err) {
      if (ctx.signal.aborted) throw ctx.signal.reason;
      ctx.log(`${row.name}: FAILED: ${(err as Error).stack ?? String(err)}`);
      results.push(notRun(row, 'failed', (err as Error).message ?? String(err)));
    }
  }
  return results;
}
