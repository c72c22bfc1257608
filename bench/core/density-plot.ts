/**
 * The density curve as an SVG, hand-written (no plotting dependency): `npm run bench -- --plot
 * RESULTS.json [--out FILE.svg]` reads the `density` field of a results file's rows.
 */
import { ResultsFileError } from './results-file.js';
import type { ResultsFile } from './results-file.js';

/**
 * One step of a density row: what was measured with `boxes` idle boxes alive. A density row's
 * RowResult carries its steps as `density` (ascending `boxes`); report() writes them as the row's
 * `density` field, which is what the plot reads. Per-box figures are averages over all `boxes`.
 */
export interface DensityPoint {
  /** Idle boxes alive when the step was measured (N). */
  boxes: number;
  /** Host memory per box, MiB: MemAvailable before the first box minus MemAvailable at N, over N. */
  hostMiBPerBox: number;
  /** The Manager process's RSS at N, MiB. */
  managerMiB: number;
  /** Mean RSS of one box's agent, MiB (shared pages counted in each). */
  agentRssMiB?: number;
  /** Mean RSS of one box's containerd shim, MiB (shared pages counted in each). */
  shimRssMiB?: number;
  /** Creates per second over the batch that brought the count to N. */
  createsPerSec?: number;
  /** `list()` p50 at N, ms. */
  listP50Ms?: number;
}

type Field = Exclude<keyof DensityPoint, 'boxes'>;

interface Series {
  field: Field;
  label: string;
  color: string;
}

interface Panel {
  title: string;
  series: Series[];
  /** A dashed line: issue 30's goal for this measure. */
  goal?: { value: number; label: string };
}

/** Okabe–Ito colours: told apart with the common colour-vision deficiencies. */
const PANELS: Panel[] = [
  {
    title: 'Memory per idle box (MiB)',
    series: [
      { field: 'hostMiBPerBox', label: 'host (MemAvailable)', color: '#0072B2' },
      { field: 'shimRssMiB', label: 'containerd shim RSS', color: '#E69F00' },
      { field: 'agentRssMiB', label: 'agent RSS', color: '#009E73' },
    ],
    goal: { value: 4, label: 'goal ≤ 4 MiB host' },
  },
  {
    title: 'Manager RSS (MiB)',
    series: [{ field: 'managerMiB', label: 'Manager RSS', color: '#CC79A7' }],
    goal: { value: 300, label: 'goal ≤ 300 MiB at 1,000' },
  },
  { title: 'Create rate (creates/s)', series: [{ field: 'createsPerSec', label: 'creates/s', color: '#D55E00' }], goal: { value: 10, label: 'goal ≥ 10/s' } },
  { title: 'list() p50 (ms)', series: [{ field: 'listP50Ms', label: 'list() p50', color: '#56B4E9' }], goal: { value: 5, label: 'goal ≤ 5 ms' } },
];

const PANEL_W = 460;
const PANEL_H = 300;
const MARGIN = { left: 58, right: 28, top: 54, bottom: 46 };

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const n2 = (v: number) => String(Math.round(v * 100) / 100);

/** Ticks at 1, 2 or 5 × 10^k up to a top at or above `max`: round numbers a reader can interpolate. */
export function niceTicks(max: number, target = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / target;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw)!;
  const ticks: number[] = [];
  for (let v = 0; v < max + step - 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

const tickLabel = (v: number) => (v >= 1000 ? v.toLocaleString('en-US') : String(v));

function renderPanel(panel: Panel, points: readonly DensityPoint[], x0: number, y0: number): string {
  const series = panel.series.filter((s) => points.some((p) => p[s.field] !== undefined));
  const w = PANEL_W - MARGIN.left - MARGIN.right;
  const h = PANEL_H - MARGIN.top - MARGIN.bottom;
  const xTicks = niceTicks(Math.max(...points.map((p) => p.boxes)));
  const values = series.flatMap((s) => points.map((p) => p[s.field]).filter((v): v is number => v !== undefined));
  const yTicks = niceTicks(Math.max(...values, panel.goal?.value ?? 0) * 1.05);
  const xMax = xTicks[xTicks.length - 1]!;
  const yMax = yTicks[yTicks.length - 1]!;
  const px = (v: number) => x0 + MARGIN.left + (v / xMax) * w;
  const py = (v: number) => y0 + MARGIN.top + h - (v / yMax) * h;
  const left = x0 + MARGIN.left;
  const bottom = y0 + MARGIN.top + h;
  const out: string[] = [`<g class="panel">`, `<text x="${left}" y="${y0 + 18}" class="title">${esc(panel.title)}</text>`];
  for (const t of yTicks) {
    out.push(`<line x1="${left}" x2="${n2(left + w)}" y1="${n2(py(t))}" y2="${n2(py(t))}" class="grid"/>`);
    out.push(`<text x="${left - 6}" y="${n2(py(t) + 4)}" class="tick" text-anchor="end">${tickLabel(t)}</text>`);
  }
  for (const t of xTicks) {
    out.push(`<line x1="${n2(px(t))}" x2="${n2(px(t))}" y1="${bottom}" y2="${bottom + 4}" class="axis"/>`);
    out.push(`<text x="${n2(px(t))}" y="${bottom + 17}" class="tick" text-anchor="middle">${tickLabel(t)}</text>`);
  }
  out.push(`<line x1="${left}" x2="${n2(left + w)}" y1="${bottom}" y2="${bottom}" class="axis"/>`);
  out.push(`<line x1="${left}" x2="${left}" y1="${y0 + MARGIN.top}" y2="${bottom}" class="axis"/>`);
  out.push(`<text x="${n2(left + w / 2)}" y="${bottom + 36}" class="label" text-anchor="middle">idle boxes</text>`);
  if (panel.goal && panel.goal.value <= yMax) {
    const gy = n2(py(panel.goal.value));
    out.push(`<line x1="${left}" x2="${n2(left + w)}" y1="${gy}" y2="${gy}" class="goal"/>`);
    out.push(`<text x="${n2(left + w - 4)}" y="${n2(py(panel.goal.value) - 5)}" class="goal-label" text-anchor="end">${esc(panel.goal.label)}</text>`);
  }
  let legendX = 0;
  series.forEach((s) => {
    const pts = points.filter((p) => p[s.field] !== undefined).map((p) => ({ boxes: p.boxes, v: p[s.field]! }));
    const path = pts.map((p) => `${n2(px(p.boxes))},${n2(py(p.v))}`).join(' ');
    out.push(`<polyline points="${path}" fill="none" stroke="${s.color}" stroke-width="2.2" stroke-linejoin="round"/>`);
    for (const p of pts) {
      out.push(
        `<circle class="point ${s.field}" cx="${n2(px(p.boxes))}" cy="${n2(py(p.v))}" r="3.5" fill="${s.color}"><title>${esc(`${s.label}: ${n2(p.v)} at ${p.boxes} boxes`)}</title></circle>`,
      );
    }
    // Legend in a line under the title, outside the plot: no curve runs under it.
    const lx = left + legendX;
    const ly = y0 + 38;
    legendX += 40 + s.label.length * 6.4;
    out.push(`<line x1="${n2(lx)}" x2="${n2(lx + 20)}" y1="${ly}" y2="${ly}" stroke="${s.color}" stroke-width="2.2"/>`);
    out.push(`<circle cx="${n2(lx + 10)}" cy="${ly}" r="3.5" fill="${s.color}"/>`);
    out.push(`<text x="${n2(lx + 26)}" y="${ly + 4}" class="legend">${esc(s.label)}</text>`);
  });
  out.push('</g>');
  return out.join('\n');
}

/**
 * Panels in two columns, each drawn when a point has its measure: memory per box (host, shim,
 * agent), the Manager's RSS, the create rate, list() p50. `points` need not be sorted.
 */
export function renderDensitySvg(points: readonly DensityPoint[], title = 'Idle boxes on one machine'): string {
  if (points.length === 0) throw new RangeError('renderDensitySvg: no points');
  const sorted = [...points].sort((a, b) => a.boxes - b.boxes);
  const panels = PANELS.filter((p) => p.series.some((s) => sorted.some((pt) => pt[s.field] !== undefined)));
  const cols = Math.min(2, panels.length);
  const rows = Math.ceil(panels.length / 2);
  const top = 36;
  const width = cols * PANEL_W;
  const height = top + rows * PANEL_H;
  const body = panels.map((p, i) => renderPanel(p, sorted, (i % 2) * PANEL_W, top + Math.floor(i / 2) * PANEL_H));
  return [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif">`,
    `<style>.title{font-size:14px;font-weight:600;fill:#222}.tick{font-size:11px;fill:#555}.label{font-size:12px;fill:#333}.legend{font-size:11.5px;fill:#222}` +
      `.grid{stroke:#e4e4e4;stroke-width:1}.axis{stroke:#777;stroke-width:1}.goal{stroke:#888;stroke-width:1.2;stroke-dasharray:5 4}.goal-label{font-size:11px;fill:#666;font-style:italic}</style>`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="${width / 2}" y="24" text-anchor="middle" font-size="16" font-weight="600" fill="#111">${esc(title)}</text>`,
    ...body,
    '</svg>',
    '',
  ].join('\n');
}

const OPTIONAL: Field[] = ['agentRssMiB', 'shimRssMiB', 'createsPerSec', 'listP50Ms'];

/** A row's `density` field checked as DensityPoint[]; `where` names it in the error. */
export function parseDensity(value: unknown, where: string): DensityPoint[] {
  if (!Array.isArray(value) || value.length === 0) throw new ResultsFileError(`${where}: "density" is not a non-empty array`);
  return value.map((p: unknown, i) => {
    const bad = (why: string) => new ResultsFileError(`${where}: density[${i}] ${why}`);
    if (typeof p !== 'object' || p === null) throw bad('is not an object');
    const o = p as Record<string, unknown>;
    const num = (k: string) => typeof o[k] === 'number' && Number.isFinite(o[k]) && (o[k] as number) >= 0;
    for (const k of ['boxes', 'hostMiBPerBox', 'managerMiB']) if (!num(k)) throw bad(`has no number "${k}"`);
    const point: DensityPoint = { boxes: o['boxes'] as number, hostMiBPerBox: o['hostMiBPerBox'] as number, managerMiB: o['managerMiB'] as number };
    for (const k of OPTIONAL) {
      if (o[k] === undefined || o[k] === null) continue;
      if (!num(k)) throw bad(`has a "${k}" that is not a number`);
      point[k] = o[k] as number;
    }
    return point;
  });
}

/** The first row of the file with a `density` field (of those `--only` picks, when given) and its points. */
export function densityOf(results: ResultsFile, pick: (names: string[]) => Set<string>): { row: string; points: DensityPoint[]; others: string[] } {
  const names = results.rows.filter((r) => r['density'] !== undefined).map((r) => r.name);
  const picked = pick(names);
  const rows = names.filter((n) => picked.has(n));
  if (rows.length === 0) {
    throw new ResultsFileError(
      names.length === 0
        ? `${results.file}: no row has a "density" field (the density rows write it)`
        : `${results.file}: --only picks none of the density rows ${names.join(', ')}`,
    );
  }
  const row = results.rows.find((r) => r.name === rows[0])!;
  return { row: row.name, points: parseDensity(row['density'], `${results.file}: row ${row.name}`), others: rows.slice(1) };
}
