import { readFile } from 'node:fs/promises';

/** A row as report() writes it (flatRow): `name`, then fields named after its two subjects (`sbx_p50_ms`, ...). */
export type FlatRow = { name: string } & Record<string, unknown>;

/** What the comparison and the plot read of a bench/results/*.json file. */
export interface ResultsFile {
  file: string;
  rows: FlatRow[];
  startedAt: string | undefined;
  mode: string | undefined;
  /** The run's --only, if it had one. */
  only: string | undefined;
  machine: string | undefined;
}

/** A results file that cannot be read or is not one: the CLI says so and exits 2. */
export class ResultsFileError extends Error {}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

export function parseResultsFile(content: string, file: string): ResultsFile {
  let data: unknown;
  try {
    data = JSON.parse(content);
  } catch (err) {
    throw new ResultsFileError(`${file}: not JSON (${(err as Error).message})`);
  }
  return toResultsFile(data, file);
}

/** A parsed results file (or the summary report() is about to write) as the comparison and the plot read it. */
export function toResultsFile(data: unknown, file: string): ResultsFile {
  if (!isObject(data) || !Array.isArray(data['rows'])) throw new ResultsFileError(`${file}: not a bench results file (no "rows" array)`);
  const rows = data['rows'] as unknown[];
  rows.forEach((r, i) => {
    if (!isObject(r) || typeof r['name'] !== 'string') throw new ResultsFileError(`${file}: rows[${i}] has no "name"`);
  });
  const run = isObject(data['run']) ? data['run'] : {};
  const m = isObject(data['machine']) ? data['machine'] : undefined;
  return {
    file,
    rows: rows as FlatRow[],
    startedAt: text(run['startedAt']),
    mode: text(run['mode']),
    only: text(run['only']),
    // What makes two runs' absolute numbers comparable at all.
    machine: m ? `${String(m['cpus'])} × ${String(m['cpuModel'])}, ${String(m['memGiB'])} GiB` : undefined,
  };
}

export async function readResultsFile(file: string): Promise<ResultsFile> {
  let content: string;
  try {
    content = await readFile(file, 'utf8');
  } catch (err) {
    throw new ResultsFileError(`${file}: cannot read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return parseResultsFile(content, file);
}
