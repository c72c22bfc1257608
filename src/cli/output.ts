/**
 * How the CLI prints for people: aligned tables, relative times, byte sizes, and colour only
 * when the stream is a terminal and NO_COLOR is not set (https://no-color.org).
 */

type Stream = { isTTY?: boolean };

export function useColor(stream: Stream = process.stdout, env: NodeJS.ProcessEnv = process.env): boolean {
  if (env['NO_COLOR'] !== undefined && env['NO_COLOR'] !== '') return false;
  if (env['TERM'] === 'dumb') return false;
  return stream.isTTY === true;
}

const CODES = { bold: [1, 22], dim: [2, 22], red: [31, 39], green: [32, 39], yellow: [33, 39], cyan: [36, 39] } as const;
export type Style = keyof typeof CODES;

export function paint(text: string, style: Style, stream: Stream = process.stdout): string {
  if (!useColor(stream)) return text;
  const [on, off] = CODES[style];
  return `\x1b[${on}m${text}\x1b[${off}m`;
}

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;

export function visibleLength(text: string): number {
  return [...text.replace(ANSI, '')].length;
}

/**
 * Rows under a header, columns padded to the widest cell; the last column is not padded, so
 * lines carry no trailing blanks. Cells may hold colour codes: widths count visible characters.
 */
export function table(header: string[], rows: string[][], stream: Stream = process.stdout): string {
  const widths = header.map((h, i) => Math.max(visibleLength(h), ...rows.map((r) => visibleLength(r[i] ?? ''))));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c + ' '.repeat(widths[i]! - visibleLength(c))))
      .join('   ')
      .trimEnd();
  return [paint(line(header), 'bold', stream), ...rows.map(line)].join('\n') + '\n';
}

/** `key: value` lines with the keys aligned. */
export function fields(pairs: Array<[string, string]>, stream: Stream = process.stdout): string {
  const width = Math.max(...pairs.map(([k]) => k.length)) + 1;
  return pairs.map(([k, v]) => `${paint(`${k}:`.padEnd(width), 'dim', stream)} ${v}`).join('\n') + '\n';
}

/** "3 minutes ago", "in 2 hours", "just now". */
export function relativeTime(iso: string, now: number = Date.now()): string {
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) return iso || '-';
  const diff = now - t;
  const abs = Math.abs(diff);
  if (abs < 5_000) return 'just now';
  const steps: Array<[number, string]> = [
    [60_000, 'second'],
    [3_600_000, 'minute'],
    [86_400_000, 'hour'],
    [30 * 86_400_000, 'day'],
    [365 * 86_400_000, 'month'],
    [Infinity, 'year'],
  ];
  const units: Record<string, number> = { second: 1000, minute: 60_000, hour: 3_600_000, day: 86_400_000, month: 30 * 86_400_000, year: 365 * 86_400_000 };
  const [, unit] = steps.find(([limit]) => abs < limit)!;
  const n = Math.floor(abs / units[unit]!);
  const phrase = `${n} ${unit}${n === 1 ? '' : 's'}`;
  return diff >= 0 ? `${phrase} ago` : `in ${phrase}`;
}

/** 1536 → "1.5 KiB". */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n)) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

/** 90000 → "1m30s"; 0 → "none". */
export function formatDuration(ms: number): string {
  if (!ms) return 'none';
  if (ms < 1000) return `${ms}ms`;
  let s = Math.round(ms / 1000);
  const parts: string[] = [];
  for (const [unit, size] of [
    ['d', 86400],
    ['h', 3600],
    ['m', 60],
  ] as const) {
    if (s >= size) {
      parts.push(`${Math.floor(s / size)}${unit}`);
      s %= size;
    }
  }
  if (s > 0 || parts.length === 0) parts.push(`${s}s`);
  return parts.join('');
}

/** `-rw-r--r--` for a mode's permission bits. */
export function formatMode(mode: number, isDir: boolean, isSymlink = false): string {
  const kind = isSymlink ? 'l' : isDir ? 'd' : '-';
  let bits = '';
  for (let shift = 6; shift >= 0; shift -= 3) {
    const b = (mode >> shift) & 7;
    bits += (b & 4 ? 'r' : '-') + (b & 2 ? 'w' : '-') + (b & 1 ? 'x' : '-');
  }
  return kind + bits;
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}
