import type { Readable } from 'node:stream';

/**
 * Yields each JSON object of a newline-delimited JSON body (pull progress, build output).
 * The engine may split an object across chunks or put several in one.
 */
export async function* jsonLines(body: Readable): AsyncGenerator<Record<string, unknown>> {
  let buffered = '';
  for await (const chunk of body) {
    buffered += typeof chunk === 'string' ? chunk : (chunk as Buffer).toString('utf8');
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl).trim();
      buffered = buffered.slice(nl + 1);
      if (line) yield parseLine(line);
    }
  }
  const rest = buffered.trim();
  if (rest) yield parseLine(rest);
}

function parseLine(line: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(line);
    return value && typeof value === 'object' ? (value as Record<string, unknown>) : { status: String(value) };
  } catch {
    return { status: line };
  }
}
