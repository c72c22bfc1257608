import { invalidArgument } from '../errors.js';

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Parses a duration: a number of milliseconds, or a string like `500ms`, `30s`, `30m`, `2h`,
 * `1d`, `1h30m`. Returns milliseconds; anything else is invalid_argument.
 *
 * @example
 * parseDuration('1h30m') // 5400000
 */
export function parseDuration(value: number | string): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) throw invalidArgument('duration', 'must be a non-negative number of milliseconds');
    return Math.round(value);
  }
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) {
    throw invalidArgument('duration', `'${value}' is not a duration (use milliseconds or e.g. 500ms, 30s, 30m, 2h)`);
  }
  return Math.round(parts.reduce((sum, p) => sum + Number(p[1]) * (UNITS[p[2] ?? 'ms'] ?? 1), 0));
}
