/**
 * `sbx logs [-f] [-n N] [--since 10m|TIME] [-t] BOX`: the output of a box's command, as
 * `docker logs` prints a container's (stdout to stdout, stderr to stderr). Loads the SDK only
 * when it runs.
 */
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import type { LogOptions } from '../client/index.js';
import { parseDuration } from '../util/duration.js';
import { CONNECTION_HELP, remoteAction, withConnection } from './remote.js';

/** `--tail`: `all` or a number of lines. */
export function tailLines(value: string): number | undefined {
  if (value === 'all') return undefined;
  if (!/^\d{1,7}$/.test(value)) throw new InvalidArgumentError("expected a number of lines or 'all'");
  return Number(value);
}

/** `--since`: a duration with its unit (10m, 1h30m, 45s) back from now, or a time (ISO 8601). */
export function sinceOption(value: string): Pick<LogOptions, 'since' | 'sinceMs'> {
  if (/^\d+(\.\d+)?$/.test(value)) throw new InvalidArgumentError('give a unit (45s, 10m, 2h) or an ISO 8601 time (2026-12-04T21:00:00Z)');
  if (/^\d{4}-\d\d-\d\d/.test(value)) {
    const at = Date.parse(value);
    if (Number.isNaN(at)) throw new InvalidArgumentError(`'${value}' is not an ISO 8601 time`);
    // A time with its zone is passed as written (to the nanosecond); one without is this machine's local time.
    return { since: /(Z|[+-]\d\d:?\d\d)$/i.test(value) ? value : new Date(at).toISOString() };
  }
  try {
    return { sinceMs: parseDuration(value) };
  } catch {
    throw new InvalidArgumentError(`'${value}' is neither a duration (10m, 1h30m) nor an ISO 8601 time`);
  }
}

interface LogsFlags {
  follow?: boolean;
  tail?: number;
  since?: Pick<LogOptions, 'since' | 'sinceMs'>;
  timestamps?: boolean;
}

export function logsCommand(program: Command): void {
  withConnection(
    program.command('logs').description("Print the output of a box's command (its stdout to stdout, its stderr to stderr)").argument('<id>', 'box id'),
  )
    .option('-f, --follow', 'keep printing until the command ends (Ctrl-C stops)')
    .option('-n, --tail <lines>', "only the last N lines, or 'all'", tailLines)
    .option('--since <when>', 'only output since a duration ago (10m, 1h30m) or an ISO 8601 time', sinceOption)
    .option('-t, --timestamps', "prefix each chunk with the engine's time")
    .addHelpText(
      'after',
      `${CONNECTION_HELP}

Examples:
  sbx logs sb-1a2b3c
  sbx logs -f --tail 20 sb-1a2b3c
  sbx logs --since 10m sb-1a2b3c

On a Kubernetes pool stdout and stderr are one log: everything is printed to stdout.`,
    )
    .action(
      remoteAction(async ({ sbx }, id: string, f: LogsFlags) => {
        const box = await sbx.get(id);
        const logs = await box.logs({
          ...(f.follow ? { follow: true } : {}),
          ...(f.tail !== undefined ? { tail: f.tail } : {}),
          ...(f.since ?? {}),
        });
        for await (const c of logs) {
          const out = c.stream === 'stderr' ? process.stderr : process.stdout;
          const text = f.timestamps ? `${c.time} ${c.data}` : c.data;
          if (!out.write(text)) await new Promise((resolve) => out.once('drain', resolve));
        }
      }),
    );
}
