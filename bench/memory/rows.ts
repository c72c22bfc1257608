import type { RowResult } from '../core/result.js';
import { notRun } from '../core/result.js';
import type { MemoryReport } from './protocol.js';

export const IDLE_BOXES = 50;
export const MEMORY_ROWS = { empty: 'Memory0Boxes', full: `Memory${IDLE_BOXES}Boxes` } as const;

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
