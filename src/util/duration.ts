import { invalidArgument } from '../errors.js';

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** The forms a written duration takes, for messages. */
export const DURATION_FORMS = 'e.g. 500ms, 30s, 5m, 2h, 1d, 1h30m';

/**
 * Parses a duration: a number of milliseconds (the library's `…Ms` fields), or a string with a
 * unit like `500ms`, `30s`, `30m`, `2h`, `1d`, `1h30m` (flags, variables, config files). A string
 * that is a bare number other than `0` is invalid_argument: `--idle-timeout 5` must not mean 5 ms,
 * nor 5 s to some readers and 5 ms to others. Returns milliseconds.
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
  if (/^0+$/.test(text)) return 0;
  if (/^\d+(\.\d+)?$/.test(text)) throw invalidArgument('duration', `'${value}' has no unit: write ${text}s, ${text}m or ${text}ms (${DURATION_FORMS})`);
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) {
    throw invalidArgument('duration', `'${value}' is not a duration (${DURATION_FORMS})`);
  }
  return Math.round(parts.reduce((sum, p) => sum + Number(p[1]) * (UNITS[p[2] ?? 'ms'] ?? 1), 0));
}
