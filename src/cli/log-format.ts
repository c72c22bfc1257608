/**
 * `sbx serve`'s log lines for people: pino writes one JSON object a line, which is what a log
 * collector wants and what `sbx serve` prints when its output is not a terminal; on a terminal
 * (or with --log-format pretty) each becomes `HH:MM:SS.mmm LEVEL message key=value …` in local
 * time, an error's stack under it.
 */
import { paint, useColor } from './output.js';
import type { Style } from './output.js';
import type { LogFormat } from '../util/log-settings.js';

const LEVELS: Record<number, [string, Style | undefined]> = {
  10: ['TRACE', 'dim'],
  20: ['DEBUG', 'dim'],
  30: ['INFO', 'green'],
  40: ['WARN', 'yellow'],
  50: ['ERROR', 'red'],
  60: ['FATAL', 'red'],
};
/** pino's own fields, said by the line's layout instead. */
const OWN = new Set(['level', 'time', 'pid', 'hostname', 'name', 'msg', 'err', 'v']);

function value(v: unknown): string {
  if (typeof v === 'string') return /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v);
  return JSON.stringify(v);
}

/** One pino JSON line as a person reads it; a line that is not JSON passes unchanged. */
export function formatLogLine(line: string, stream: { isTTY?: boolean } = process.stdout): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith('\n') ? line : `${line}\n`;
  }
  const t = new Date(typeof o['time'] === 'number' ? o['time'] : Date.now());
  const time = `${String(t.getHours()).padStart(2, '0')}:${String(t.getMinutes()).padStart(2, '0')}:${String(t.getSeconds()).padStart(2, '0')}.${String(t.getMilliseconds()).padStart(3, '0')}`;
  const [label, style] = LEVELS[Number(o['level'])] ?? [String(o['level']), undefined];
  const level = style ? paint(label.padEnd(5), style, stream) : label.padEnd(5);
  const extras = Object.entries(o)
    .filter(([k]) => !OWN.has(k))
    .map(([k, v]) => `${k}=${value(v)}`);
  const err = o['err'] as { message?: string; stack?: string } | undefined;
  const head = [time, level, String(o['msg'] ?? ''), ...extras].filter((s) => s !== '').join(' ');
  const tail = err ? `\n    ${(err.stack ?? err.message ?? JSON.stringify(err)).split('\n').join('\n    ')}` : '';
  return `${head}${tail}\n`;
}

/** Where pino writes: `stream` as it is (JSON), or through formatLogLine. */
export function logDestination(format: LogFormat, stream: NodeJS.WriteStream = process.stdout): { write(line: string): void } {
  const pretty = format === 'pretty' || (format === 'auto' && stream.isTTY === true);
  if (!pretty) return stream;
  return { write: (line: string) => void stream.write(formatLogLine(line, useColor(stream) ? stream : {})) };
}
