import type { Mode } from './row.js';

export interface BenchArgs {
  mode: Mode;
  json: boolean;
  /** Row filter: comma-separated; each an exact (case-insensitive) row name, else a substring of row names. */
  only: string | undefined;
  setup: boolean;
  /** An earlier results file: each row's change against it is printed. */
  compare: string | undefined;
  /** With --compare: the newer results file, compared without running any row. */
  against: string | undefined;
  /** A results file whose density row is drawn as an SVG, without running any row. */
  plot: string | undefined;
  /** With --plot: where the SVG goes (stdout without it). */
  out: string | undefined;
}

export const USAGE = `usage: npm run bench -- [--quick] [--json] [--only NAME] [--no-setup] [--compare OLD.json]
       npm run bench -- --compare OLD.json --against NEW.json [--only NAME]
       npm run bench -- --plot RESULTS.json [--out FILE.svg] [--only NAME]
  --quick      fewer iterations (under 2 minutes)
  --json       also print one JSON object as the last line of stdout
  --only NAME  run only the row named NAME, or (if none is) the rows whose name contains it;
               several: --only Pause,Resume,Restore
  --no-setup   do not run scripts/engine.sh, images.sh and agent.sh first
  --compare F  after the table, each row's change against the earlier results file F (bench/results/*.json)
  --against G  with --compare: compare F with the results file G instead of running rows
  --plot F     draw the density row of the results file F as an SVG instead of running rows
  --out FILE   with --plot: write the SVG to FILE (default: stdout)`;

const VALUE_OPTIONS = { only: '--only', compare: '--compare', against: '--against', plot: '--plot', out: '--out' } as const;

export function parseArgs(argv: readonly string[]): BenchArgs {
  const args: BenchArgs = { mode: 'full', json: false, only: undefined, setup: true, compare: undefined, against: undefined, plot: undefined, out: undefined };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const option = Object.entries(VALUE_OPTIONS).find(([, flag]) => a === flag || a.startsWith(`${flag}=`));
    if (option) {
      const [key, flag] = option as [keyof typeof VALUE_OPTIONS, string];
      const value = a === flag ? argv[++i] : a.slice(flag.length + 1);
      if (!value) throw new UsageError(`${flag} needs ${key === 'only' ? 'a row name' : 'a file'}`);
      args[key] = value;
    } else if (a === '--quick') args.mode = 'quick';
    else if (a === '--json') args.json = true;
    else if (a === '--no-setup') args.setup = false;
    else if (a === '--help' || a === '-h') throw new UsageError('');
    else throw new UsageError(`unknown argument ${a}`);
  }
  if (args.against && !args.compare) throw new UsageError('--against needs --compare OLD.json (the file to compare it with)');
  if (args.out && !args.plot) throw new UsageError('--out goes with --plot');
  if (args.plot && args.compare) throw new UsageError('--plot and --compare are two separate commands: one at a time');
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
