import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';

/**
 * Yields each JSON object of a newline-delimited JSON body (pull progress, build output,
 * events). The engine may split an object across chunks (even inside a UTF-8 character) or
 * put several in one; lines end in `\n` or `\r\n`, blank lines are skipped, and a last line
 * without a newline still counts. A line that is not a JSON object comes back as
 * `{ status: <text> }`, so an engine's plain-text complaint is seen, not swallowed.
 */
export async function* jsonLines(body: Readable): AsyncGenerator<Record<string, unknown>> {
  const decoder = new StringDecoder('utf8');
  let buffered = '';
  for await (const chunk of body) {
    buffered += typeof chunk === 'string' ? chunk : decoder.write(chunk as Buffer);
    let start = 0;
    let nl: number;
    while ((nl = buffered.indexOf('\n', start)) >= 0) {
      const line = buffered.slice(start, nl).trim();
      start = nl + 1;
      if (line) yield parseLine(line);
    }
    buffered = buffered.slice(start);
  }
  const rest = (buffered + decoder.end()).trim();
  if (rest) yield parseLine(rest);
}

function parseLine(line: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(line);
    return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : { status: String(value) };
  } catch {
    return { status: line };
  }
}
