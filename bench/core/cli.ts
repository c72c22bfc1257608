import type { Mode } from './row.js';

export interface BenchArgs {
  mode: Mode;
  json: boolean;
  /** Row filter: comma-separated; each an exact (case-insensitive) row name, else a substring of row names. */
  only: string | undefined;
  setup: boolean;
}

export const USAGE = `usage: npm run bench -- [--quick] [--json] [--only NAME] [--no-setup]
  --quick      fewer iterations (under 2 minutes)
  --json       also print one JSON object as the last line of stdout
  --only NAME  run only the row named NAME, or (if none is) the rows whose name contains it;
               several: --only Pause,Resume,Restore
  --no-setup   do not run scripts/engine.sh, images.sh and agent.sh first`;

export function parseArgs(argv: readonly string[]): BenchArgs {
  const args: BenchArgs = { mode: 'full', json: false, only: undefined, setup: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--quick') args.mode = 'quick';
    else if (a === '--json') args.json = true;
    else if (a === '--no-setup') args.setup = false;
    else if (a === '--only' || a.startsWith('--only=')) {
      const value = a === '--only' ? argv[++i] : a.slice('--only='.length);
      if (!value) throw new UsageError('--only needs a row name');
      args.only = value;
    } else if (a === '--help' || a === '-h') throw new UsageError('');
    else throw new UsageError(`unknown argument ${a}`);
  }
  return args;
}

export class UsageError extends Error {}

/**
 * Exact match wins, so `--only Exec` is the Exec row, not every row with Exec in its name. A comma
 * list is the union of its names' picks (row names have no commas), for rows with no common substring.
 */
export function selectNames(all: readonly string[], only: string | undefined): Set<string> {
  if (only === undefined) return new Set(all);
  const picked = new Set<string>();
  for (const name of only.split(',')) {
    const want = name.trim().toLowerCase();
    if (!want) continue;
    const exact = all.filter((n) => n.toLowerCase() === want);
    for (const n of exact.length > 0 ? exact : all.filter((n) => n.toLowerCase().includes(want))) picked.add(n);
  }
  return picked;
}
