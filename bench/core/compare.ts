/**
 * `npm run bench -- --compare OLD.json [--against NEW.json]`: each row's change against an earlier
 * results file, so a slower commit is visible. Pure: reads parsed files, returns text.
 */
import { selectNames } from './cli.js';
import { pad } from './report.js';
import type { FlatRow, ResultsFile } from './results-file.js';

/**
 * A row's ratio moving by more than this is flagged. Both sides of a row run interleaved in one
 * process, so the machine's load hits them alike and cancels in the ratio; between runs on this
 * shared machine the engine-bound rows' ratios move by about ±5% (docs/benchmarks.md): twice that.
 */
export const RATIO_NOISE = 0.1;
/**
 * For a row without a ratio in both files, its p50 moving by more than this is flagged. Absolute
 * numbers move by about ±15% between runs here with nothing changed: a margin above that.
 */
export const P50_NOISE = 0.2;
/** A memory row's RSS (a fresh process after a full GC; load does not enter it) moving by more than this is flagged. */
export const RSS_NOISE = 0.1;

export type Verdict = 'slower' | 'faster' | 'same';

export interface RowChange {
  name: string;
  /** The first side (`sbx`, `agent`, `warm`...): the one the row is about. */
  subject: string;
  /** `p50` in ms for timed rows, `rss` in MiB for memory rows. */
  measure: 'p50' | 'rss';
  old: number;
  now: number;
  /** now / old - 1. */
  change: number;
  oldRatio: number | null;
  nowRatio: number | null;
  ratioChange: number | null;
  verdict: Verdict;
  /** What the verdict was judged on, and the threshold. */
  judgedBy: 'ratio' | 'p50' | 'rss';
}

export interface Comparison {
  rows: RowChange[];
  onlyOld: string[];
  onlyNew: string[];
  /** In both files, nothing to compare (failed, unavailable, or a row of figures only). */
  notCompared: { name: string; why: string }[];
}

const finite = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** The row's own measure: its first side's p50 (key order is flatRow's: first side first), else a memory row's RSS. */
function measureOf(row: FlatRow): { subject: string; measure: 'p50' | 'rss'; value: number } | null {
  for (const [key, v] of Object.entries(row)) {
    const m = /^(.+)_(p50_ms|rss_mib)$/.exec(key);
    if (!m || m[1] === 'baseline') continue;
    const value = finite(v);
    // A memory row carries its sides' p50 keys too, as null: its measure is the RSS after them.
    if (value === null || value <= 0) continue;
    return { subject: m[1]!, measure: m[2] === 'p50_ms' ? 'p50' : 'rss', value };
  }
  return null;
}

function verdictOf(change: number, noise: number): Verdict {
  return change > noise ? 'slower' : change < -noise ? 'faster' : 'same';
}

function whyNot(row: FlatRow, side: 'old' | 'new'): string {
  const status = typeof row['status'] === 'string' ? row['status'] : 'ok';
  if (status !== 'ok') return `${status} in the ${side} file${typeof row['reason'] === 'string' ? `: ${row['reason']}` : ''}`;
  return `no p50 or RSS in the ${side} file`;
}

/**
 * `only`: the row filter of `--only` (as the bench picks rows); a run of a few rows is compared
 * with those rows of the old file, not told that every other row is missing.
 */
export function compareResults(old: ResultsFile, now: ResultsFile, only?: string): Comparison {
  const pick = (rows: FlatRow[]) => {
    const names = selectNames(
      rows.map((r) => r.name),
      only,
    );
    return rows.filter((r) => names.has(r.name));
  };
  const oldRows = new Map(pick(old.rows).map((r) => [r.name, r]));
  const nowRows = pick(now.rows);
  const out: Comparison = { rows: [], onlyOld: [], onlyNew: [], notCompared: [] };
  for (const row of nowRows) {
    const before = oldRows.get(row.name);
    if (!before) {
      out.onlyNew.push(row.name);
      continue;
    }
    const a = measureOf(before);
    const b = measureOf(row);
    if (!a || !b || a.measure !== b.measure) {
      out.notCompared.push({ name: row.name, why: !b ? whyNot(row, 'new') : !a ? whyNot(before, 'old') : 'measured differently in the two files' });
      continue;
    }
    const change = b.value / a.value - 1;
    const oldRatio = finite(before['ratio']);
    const nowRatio = finite(row['ratio']);
    const ratioChange = oldRatio && nowRatio ? nowRatio / oldRatio - 1 : null;
    const judgedBy = b.measure === 'rss' ? 'rss' : ratioChange !== null ? 'ratio' : 'p50';
    const verdict = judgedBy === 'ratio' ? verdictOf(ratioChange!, RATIO_NOISE) : verdictOf(change, judgedBy === 'rss' ? RSS_NOISE : P50_NOISE);
    out.rows.push({
      name: row.name,
      subject: b.subject,
      measure: b.measure,
      old: a.value,
      now: b.value,
      change,
      oldRatio,
      nowRatio,
      ratioChange,
      verdict,
      judgedBy,
    });
  }
  const seen = new Set(nowRows.map((r) => r.name));
  out.onlyOld = [...oldRows.keys()].filter((n) => !seen.has(n));
  return out;
}

function fmt(v: number): string {
  return v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0);
}

const pct = (v: number | null): string => (v === null ? '' : `${v >= 0 ? '+' : ''}${(v * 100).toFixed(1)}%`);

function describe(f: ResultsFile): string {
  return `${f.file} (${[f.startedAt, f.mode, f.only ? `--only ${f.only}` : ''].filter(Boolean).join(', ')})`;
}

export function renderComparison(c: Comparison, old: ResultsFile, now: ResultsFile): string {
  const header = ['row', 'side', 'measure', 'old → new', 'change', 'ratio old → new', 'ratio change', ''];
  const body = c.rows.map((r) => [
    r.name,
    r.subject,
    r.measure === 'p50' ? 'p50 ms' : 'RSS MiB',
    `${fmt(r.old)} → ${fmt(r.now)}`,
    pct(r.change),
    r.oldRatio !== null && r.nowRatio !== null ? `${r.oldRatio.toFixed(2)}x → ${r.nowRatio.toFixed(2)}x` : '-',
    pct(r.ratioChange),
    r.verdict === 'same' ? '' : `${r.verdict.toUpperCase()} (${r.judgedBy})`,
  ]);
  const count = (v: Verdict) => c.rows.filter((r) => r.verdict === v).length;
  const lines = [`Compared with ${describe(old)}`, `         now ${describe(now)}`];
  if (old.mode && now.mode && old.mode !== now.mode) lines.push(`note: a ${old.mode} run against a ${now.mode} run: fewer samples move the percentiles more`);
  if (old.machine && now.machine && old.machine !== now.machine) lines.push(`note: another machine (${old.machine}, now ${now.machine}): only ratios compare`);
  lines.push(...(body.length > 0 ? pad([header, ...body], (c) => c >= 3 && c <= 6) : ['(no row in both files to compare)']));
  for (const n of c.notCompared) lines.push(`not compared: ${n.name}: ${n.why}`);
  if (c.onlyOld.length > 0) lines.push(`only in the old file: ${c.onlyOld.join(', ')}`);
  if (c.onlyNew.length > 0) lines.push(`only in the new file: ${c.onlyNew.join(', ')}`);
  lines.push(
    `${count('slower')} slower, ${count('faster')} faster, ${count('same')} within noise.`,
    `Flagged: a ratio that moved more than ${RATIO_NOISE * 100}% (both sides run interleaved, so the load cancels; ratios move ±5% between runs);`,
    `without a ratio, a p50 that moved more than ${P50_NOISE * 100}% (absolute numbers move ±15%); a memory row's RSS that moved more than ${RSS_NOISE * 100}%.`,
  );
  return lines.join('\n');
}
