import { collectGarbage } from './gc.js';
import type { AnyRow, Mode, Named } from './row.js';

export interface SampleOptions {
  mode: Mode;
  /** Stop adding pairs after this long (the minimum still runs): the run never overstays on a slow machine. */
  budgetMs: number;
  signal: AbortSignal;
}

export interface Sample {
  ms: number;
  /**
   * CPU this process spent during the op (user + system). On a two-core machine the client's
   * CPU is taken from the engine, so it is the cleanest measure of what sbx itself costs.
   */
  cpuMs: number;
}

export interface PairSamples {
  /** Keyed by subject name. */
  samples: Record<string, Sample[]>;
  wallMs: number;
}

/** Pairs that always run, whatever the budget says: fewer would not give a p95 worth printing. */
const MIN_PAIRS = 3;

/**
 * Runs one row against two subjects: warm-up on both, then measured ops interleaved, with the
 * order of each pair alternating (a b, b a, a b, ...) so neither side always runs right after
 * the other and slow drift of the engine hits both alike.
 */
export async function samplePair<S extends Named>(row: AnyRow<S>, a: S, b: S, opts: SampleOptions): Promise<PairSamples> {
  const started = performance.now();
  const samples: Record<string, Sample[]> = { [a.name]: [], [b.name]: [] };
  const shared = new Map<S, unknown>();
  try {
    for (const s of [a, b]) shared.set(s, await row.setup?.(s));
    for (let w = 0; w < (row.warmup ?? 2); w++) {
      for (const s of [a, b]) await once(row, s, shared.get(s), opts.signal);
    }
    const wanted = row.iterations[opts.mode];
    const deadline = performance.now() + opts.budgetMs;
    for (let i = 0; i < wanted; i++) {
      if (i >= MIN_PAIRS && performance.now() > deadline) break;
      for (const s of i % 2 === 0 ? [a, b] : [b, a]) samples[s.name]!.push(await once(row, s, shared.get(s), opts.signal));
    }
  } finally {
    // A failed teardown must not hide the row's own error; the final sweep removes what it left.
    for (const [s, value] of shared) await row.teardown?.(s, value)?.catch(() => undefined);
  }
  return { samples, wallMs: performance.now() - started };
}

async function once<S extends Named>(row: AnyRow<S>, s: S, shared: unknown, signal: AbortSignal): Promise<Sample> {
  signal.throwIfAborted();
  const item = await row.before?.(s, shared);
  if (row.collectGarbage) collectGarbage();
  let sample: Sample;
  try {
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await row.op(s, shared, item);
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    sample = { ms, cpuMs: (cpu.user + cpu.system) / 1000 };
  } finally {
    await row.after?.(s, shared, item);
  }
  return sample;
}
