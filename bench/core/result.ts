import type { DensityPoint } from './density-plot.js';
import type { RowGroup, SeedColumn } from './row.js';
import type { Sample } from './sampler.js';
import { summarize } from './stats.js';
import type { Summary } from './stats.js';

export interface Side {
  subject: string;
  stats: Summary;
  /** Mean CPU of the bench process per op. */
  cpuMsPerOp: number;
  /** For rows that move bytes: throughput at the median. */
  mibPerSec?: number;
}

export interface MemoryFigures {
  /** RSS of the process before it imported sbx: `baselineOf` alone (default node+tsx). */
  baselineMiB: number;
  baselineOf?: string;
  rssMiB: number;
  heapMiB: number;
  boxes: number;
  /** RSS growth over the first wave of boxes: one-time costs their creates paid (lazy modules, secret, sockets). */
  firstBoxes?: number;
  firstBoxesKiB?: number;
  /** RSS and heap growth per box after the first wave. */
  perBoxKiB?: number;
  perBoxHeapKiB?: number;
}

export interface RowResult {
  name: string;
  group: RowGroup;
  note?: string;
  status: 'ok' | 'unavailable' | 'failed' | 'skipped';
  reason?: string;
  /** Subject first, baseline second; ratio is subject / baseline at p50. */
  sides: [Side, Side] | [];
  ratio: number | null;
  seedMs?: number;
  seedColumn?: SeedColumn;
  wallMs: number;
  memory?: MemoryFigures;
  /** A row that measures something other than latency (host memory, bytes on disk): named numbers, in the JSON as they are; its note says them. */
  figures?: Record<string, number>;
  /** A density row's steps, one per count of idle boxes: the results file's `density` field, which `--plot` draws. */
  density?: DensityPoint[];
  /** Milliseconds per op in the order measured, per subject (results file only). */
  samples?: Record<string, number[]>;
}

export function pairResult(
  row: { name: string; group: RowGroup; note?: string; seedMs?: number; seedColumn?: SeedColumn; bytesPerOp?: number },
  order: [string, string],
  samples: Record<string, Sample[]>,
  wallMs: number,
): RowResult {
  const sides = order.map((subject) => {
    const mine = samples[subject] ?? [];
    const stats = summarize(mine.map((x) => x.ms));
    const side: Side = { subject, stats, cpuMsPerOp: mine.reduce((t, x) => t + x.cpuMs, 0) / (mine.length || 1) };
    if (row.bytesPerOp && stats.p50 > 0) side.mibPerSec = row.bytesPerOp / 2 ** 20 / (stats.p50 / 1000);
    return side;
  }) as [Side, Side];
  const [a, b] = sides;
  return {
    name: row.name,
    group: row.group,
    ...(row.note ? { note: row.note } : {}),
    status: 'ok',
    sides,
    ratio: b.stats.p50 > 0 ? a.stats.p50 / b.stats.p50 : null,
    ...(row.seedMs !== undefined ? { seedMs: row.seedMs } : {}),
    ...(row.seedColumn ? { seedColumn: row.seedColumn } : {}),
    wallMs,
    samples: Object.fromEntries(order.map((subject) => [subject, (samples[subject] ?? []).map((x) => Math.round(x.ms * 1000) / 1000)])),
  };
}

export function notRun(row: { name: string; group: RowGroup; note?: string }, status: RowResult['status'], reason: string): RowResult {
  return { name: row.name, group: row.group, ...(row.note ? { note: row.note } : {}), status, reason, sides: [], ratio: null, wallMs: 0 };
}
