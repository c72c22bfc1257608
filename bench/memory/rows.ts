import type { RowResult } from '../core/result.js';
import { notRun } from '../core/result.js';
import type { ExecMemoryReport, MemoryReport } from './protocol.js';

export const IDLE_BOXES = 50;
export const MEMORY_ROWS = { empty: 'Memory0Boxes', full: `Memory${IDLE_BOXES}Boxes` } as const;
/** Memory0Boxes on the built package (memory/built.ts). */
export const MEMORY_BUILT_ROW = 'Memory0BoxesBuilt';

/** One buffered exec printing EXEC_OUTPUT_BYTES against the default 64 MiB output cap. */
export const EXEC_OUTPUT_BYTES = 200_000_000;
export const EXEC_CAP_BYTES = 64 * 2 ** 20;
export const EXEC_MEMORY_ROW = 'MemoryExec200M';

const MiB = 2 ** 20;

/** The memory child's report as two rows: the empty Manager, and the one holding idle boxes. */
export function memoryRows(report: MemoryReport, wallMs: number): RowResult[] {
  const base = report.baselineRss / MiB;
  const empty: RowResult = {
    name: MEMORY_ROWS.empty,
    group: 'memory',
    note: 'started Manager, no boxes',
    status: 'ok',
    sides: [],
    ratio: null,
    wallMs,
    memory: { baselineMiB: base, rssMiB: report.managerRss / MiB, boxes: 0, heapMiB: report.managerHeapUsed / MiB },
  };
  const full: RowResult = {
    name: MEMORY_ROWS.full,
    group: 'memory',
    note: `${report.boxes} idle boxes (created in ${(report.createWallMs / 1000).toFixed(1)}s)${report.gc ? '' : '; no --expose-gc, RSS includes garbage'}`,
    status: 'ok',
    sides: [],
    ratio: null,
    wallMs,
    memory: {
      baselineMiB: base,
      rssMiB: report.boxesRss / MiB,
      heapMiB: report.boxesHeapUsed / MiB,
      boxes: report.boxes,
      firstBoxes: report.firstBoxes,
      firstBoxesKiB: (report.firstRss - report.managerRss) / 1024,
      ...(report.boxes > report.firstBoxes ? perBox(report) : {}),
    },
  };
  return [empty, full];
}

function perBox(r: MemoryReport): { perBoxKiB: number; perBoxHeapKiB: number } {
  const n = r.boxes - r.firstBoxes;
  return { perBoxKiB: (r.boxesRss - r.firstRss) / 1024 / n, perBoxHeapKiB: (r.boxesHeapUsed - r.firstHeapUsed) / 1024 / n };
}

export function memoryFailed(reason: string): RowResult[] {
  return [notRun({ name: MEMORY_ROWS.empty, group: 'memory' }, 'failed', reason), notRun({ name: MEMORY_ROWS.full, group: 'memory' }, 'failed', reason)];
}

/** The exec memory child's report as a row: RSS is the peak during the exec. */
export function execMemoryRow(r: ExecMemoryReport, wallMs: number): RowResult {
  const growth = (r.peakRss - r.beforeRss) / MiB;
  const cap = r.capBytes / MiB;
  const note = [
    `peak RSS of one buffered exec printing ${r.bytes / 1e6} MB, cap ${cap} MiB: +${growth.toFixed(1)} MiB over the ${(r.beforeRss / MiB).toFixed(1)} MiB before it = ${(growth / cap).toFixed(2)}x the cap`,
    `kept ${(r.stdoutChars / MiB).toFixed(1)} MiB${r.truncated ? ' (truncated)' : ''}, exit ${r.exitCode}, ${(r.execMs / 1000).toFixed(1)}s`,
    `after GC holding the result +${((r.heldRss - r.beforeRss) / MiB).toFixed(1)} MiB`,
    ...(r.exactPeak ? [] : ['peak sampled every 5 ms (no clear_refs)']),
    ...(r.gc ? [] : ['no --expose-gc, RSS includes garbage']),
  ].join('; ');
  return {
    name: EXEC_MEMORY_ROW,
    group: 'memory',
    note,
    status: 'ok',
    sides: [],
    ratio: null,
    wallMs,
    memory: { baselineMiB: r.aloneRss / MiB, rssMiB: r.peakRss / MiB, heapMiB: r.heldHeapUsed / MiB, boxes: 1 },
  };
}
