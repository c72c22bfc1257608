import type { Machine } from './machine.js';
import type { RowResult } from './result.js';

const round = (v: number, digits = 2): number => (Number.isFinite(v) ? Number(v.toFixed(digits)) : Number.NaN);

function ms(v: number | undefined): string {
  if (v === undefined || !Number.isFinite(v)) return '-';
  return v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0);
}

function num(v: number | undefined, digits = 1): string {
  return v === undefined || !Number.isFinite(v) ? '-' : v.toFixed(digits);
}

/** The row as one flat JSON object, keys named after the two subjects (`sbx_p50_ms`, `raw_p50_ms`, ...). */
export function flatRow(r: RowResult, names: [string, string]): Record<string, unknown> {
  const [a, b] = r.sides.length === 2 ? [r.sides[0].subject, r.sides[1].subject] : names;
  const side = (name: string) => r.sides.find((s) => s.subject === name);
  const o: Record<string, unknown> = { name: r.name, group: r.group, status: r.status };
  o[`${a}_p50_ms`] = side(a) ? round(side(a)!.stats.p50) : null;
  o[`${b}_p50_ms`] = side(b) ? round(side(b)!.stats.p50) : null;
  o['ratio'] = r.ratio === null ? null : round(r.ratio);
  o[`${a}_p95_ms`] = side(a) ? round(side(a)!.stats.p95) : null;
  o[`${b}_p95_ms`] = side(b) ? round(side(b)!.stats.p95) : null;
  o[`${a}_p99_ms`] = side(a) ? round(side(a)!.stats.p99) : null;
  o[`${b}_p99_ms`] = side(b) ? round(side(b)!.stats.p99) : null;
  o[`${a}_ops_s`] = side(a) ? round(side(a)!.stats.opsPerSec) : null;
  o[`${b}_ops_s`] = side(b) ? round(side(b)!.stats.opsPerSec) : null;
  o[`${a}_cpu_ms`] = side(a) ? round(side(a)!.cpuMsPerOp) : null;
  o[`${b}_cpu_ms`] = side(b) ? round(side(b)!.cpuMsPerOp) : null;
  o['n'] = side(a)?.stats.n ?? 0;
  for (const s of r.sides) if (s.mibPerSec !== undefined) o[`${s.subject}_mib_s`] = round(s.mibPerSec, 1);
  if (r.memory) {
    o[`${a}_rss_mib`] = round(r.memory.rssMiB, 1);
    o['baseline_rss_mib'] = round(r.memory.baselineMiB, 1);
    o[`${a}_heap_mib`] = round(r.memory.heapMiB, 1);
    o['boxes'] = r.memory.boxes;
    if (r.memory.firstBoxesKiB !== undefined) o['first_wave_kib'] = round(r.memory.firstBoxesKiB, 0);
    if (r.memory.perBoxKiB !== undefined) o['per_box_kib'] = round(r.memory.perBoxKiB, 0);
    if (r.memory.perBoxHeapKiB !== undefined) o['per_box_heap_kib'] = round(r.memory.perBoxHeapKiB, 1);
  }
  if (r.figures) Object.assign(o, r.figures);
  if (r.density) o['density'] = r.density;
  if (r.seedMs !== undefined) o[`seed_${r.seedColumn ?? 'local'}_ms`] = r.seedMs;
  if (r.note) o['note'] = r.note;
  if (r.reason) o['reason'] = r.reason;
  o['wall_ms'] = Math.round(r.wallMs);
  return o;
}

/** The seed's number; `R` when it is from the seed's Remote column (the footnote says so). */
function seedCell(r: RowResult): string {
  if (r.seedMs === undefined) return '';
  return `~${r.seedMs}${r.seedColumn === 'remote' ? ' R' : ''}`;
}

/** Columns padded to their widest cell, two spaces apart. */
export function pad(cells: string[][], rightAligned: (col: number) => boolean): string[] {
  const widths = cells[0]!.map((_, c) => Math.max(...cells.map((row) => row[c]?.length ?? 0)));
  return cells.map((row) =>
    row
      .map((cell, c) => (rightAligned(c) ? cell.padStart(widths[c]!) : cell.padEnd(widths[c]!)))
      .join('  ')
      .trimEnd(),
  );
}

/** The human table: timing rows, then memory, then the footnote on the seed's numbers. */
export function renderTable(rows: RowResult[], names: [string, string]): string {
  const [a, b] = names;
  const header = [
    'row',
    'n',
    `${a} p50`,
    `${b} p50`,
    `${a}/${b}`,
    `${a} p95`,
    `${b} p95`,
    `${a} p99`,
    `${b} p99`,
    `${a} cpu`,
    `${b} cpu`,
    'seed p50*',
    'what / notes',
  ];
  const timed = rows.filter((r) => r.group !== 'memory');
  const body = timed.map((r) => {
    if (r.sides.length !== 2) {
      const what = r.status === 'ok' ? (r.note ?? '') : `${r.status === 'unavailable' ? 'not available yet' : r.status}: ${r.reason ?? ''}`;
      return [r.name, ...Array<string>(10).fill(''), seedCell(r), what];
    }
    const [x, y] = r.sides;
    const notes = [
      r.note ?? '',
      x.mibPerSec !== undefined && y.mibPerSec !== undefined ? `${a} ${num(x.mibPerSec, 0)} / ${b} ${num(y.mibPerSec, 0)} MiB/s` : '',
    ]
      .filter(Boolean)
      .join('; ');
    return [
      r.name,
      String(x.stats.n),
      ms(x.stats.p50),
      ms(y.stats.p50),
      r.ratio === null ? '-' : `${r.ratio.toFixed(2)}x`,
      ms(x.stats.p95),
      ms(y.stats.p95),
      ms(x.stats.p99),
      ms(y.stats.p99),
      ms(x.cpuMsPerOp),
      ms(y.cpuMsPerOp),
      seedCell(r),
      notes,
    ];
  });
  const lines = [
    'Latency in ms: p50/p95/p99 over interleaved ops; cpu = mean CPU ms of the bench process per op (op/s, 1000/mean, is in the JSON)',
    ...pad([header, ...body], (c) => c > 0 && c < 12),
  ];
  const memory = rows.filter((r) => r.group === 'memory');
  if (memory.length > 0) {
    lines.push('', `Memory (${a} only; RSS of a separate process after GC)`);
    const mem = memory.map((r) =>
      r.memory ? [r.name, `${num(r.memory.rssMiB)} MiB`, `${num(r.memory.heapMiB)} MiB`, memoryNotes(r)] : [r.name, '-', '-', `${r.status}: ${r.reason ?? ''}`],
    );
    lines.push(...pad([['row', 'RSS', 'heap', 'notes'], ...mem], (c) => c === 1 || c === 2));
  }
  lines.push(
    '',
    '* seed p50: the seed design\'s "Benchmark Results (Reference)", Local column (R: its Remote column): another machine and the Go implementation. Context only, not a target.',
  );
  return lines.join('\n');
}

function memoryNotes(r: RowResult): string {
  const m = r.memory!;
  const parts = [r.note ?? '', `${m.baselineOf ?? 'node+tsx'} alone ${num(m.baselineMiB)} MiB`];
  if (m.firstBoxesKiB !== undefined) parts.push(`first ${m.firstBoxes} boxes +${num(m.firstBoxesKiB, 0)} KiB`);
  if (m.perBoxKiB !== undefined) parts.push(`then per box +${num(m.perBoxKiB, 0)} KiB RSS, +${num(m.perBoxHeapKiB, 1)} KiB heap`);
  return parts.filter(Boolean).join('; ');
}

export function renderMachine(m: Machine): string {
  return `machine: ${m.cpus} × ${m.cpuModel}, ${m.memGiB} GiB, ${m.platform} ${m.kernel}, node ${m.node}, Docker Engine ${m.engineVersion} (API ${m.apiVersion}, ${m.storageDriver}, cgroup v${m.cgroupVersion} ${m.cgroupDriver}), tmp on ${m.tmpFs}`;
}
