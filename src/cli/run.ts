/**
 * The commands that work on this machine's engine through the library, with no server: `run`
 * and `pools` without a subcommand. main.ts loads this file only when one of them runs (the
 * Manager and the engine clients are most of sbx's modules).
 */
import { Manager } from '../sandbox/manager.js';
import type { Box } from '../sandbox/box.js';
import { loadConfig } from '../sandbox/config.js';
import { SbxError, isSbxError } from '../errors.js';
import { EXIT, SIGNAL_EXIT } from './exit.js';

export interface RunOptions {
  config?: string;
  pool?: string;
  timeout?: number;
  env?: Record<string, string>;
  interactive?: boolean;
}

/** The Manager for a command: its `-c` first, then the global one, then $SBX_CONFIG and SBX_* variables. */
function manager(file: string | undefined): Manager {
  return new Manager(loadConfig(file ? { file } : {}));
}

function formatMs(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms} ms`;
}

/** `sbx run`: a oneshot box, one command with live output, the box removed; the exit status to leave with is set. */
export async function runCommand(image: string, cmd: string[], opts: RunOptions, configFile: string | undefined): Promise<void> {
  const m = manager(configFile);
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => stop.abort(signal);
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal);
  let box: Box | undefined;
  try {
    box = await m.create({ image, env: opts.env ?? {}, policy: 'oneshot', ...(opts.pool ? { pool: opts.pool } : {}) });
    if (stop.signal.aborted) return;
    const timer = opts.timeout ? setTimeout(() => stop.abort('timeout'), opts.timeout) : undefined;
    let s;
    try {
      s = await box.stream(cmd, { signal: stop.signal });
    } catch (err) {
      // The command could not start: a shell's statuses, as `docker run` gives them.
      if (!(err instanceof SbxError) || typeof err.details?.['cmd'] !== 'string') throw err;
      clearTimeout(timer);
      console.error(`sbx: ${err.code}: ${err.message}`);
      process.exitCode = err.code === 'not_found' ? EXIT.notFound : EXIT.cannotRun;
      return;
    }
    for (const [from, to] of [
      [s.stdout, process.stdout],
      [s.stderr, process.stderr],
    ] as const) {
      from.pipe(to);
      // A reader that went away (`sbx run … | head -1`): stop the command as a shell's SIGPIPE would.
      to.on('error', () => {
        from.unpipe(to).resume();
        stop.abort('SIGPIPE');
      });
    }
    if (opts.interactive) process.stdin.pipe(s.stdin);
    else s.stdin.end();
    const code = await s.wait();
    clearTimeout(timer);
    if (opts.interactive) process.stdin.unpipe(s.stdin).destroy();
    if (stop.signal.reason === 'timeout') {
      process.stderr.write(`sbx: timed out after ${formatMs(opts.timeout!)}; the command was killed\n`);
      process.exitCode = EXIT.timeout;
    } else process.exitCode = code;
  } finally {
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
    // A oneshot box removes itself after its exec; this covers a command that never started.
    await box?.remove().catch((err: unknown) => {
      if (!isSbxError(err, 'not_found')) throw err;
    });
    await m.close();
    if (stop.signal.aborted && stop.signal.reason !== 'timeout') process.exitCode = SIGNAL_EXIT[String(stop.signal.reason)] ?? 1;
  }
}

/** `sbx pools` alone: this machine's configured pools. */
export async function localPools(configFile: string | undefined): Promise<void> {
  const m = manager(configFile);
  try {
    await m.start();
    for (const p of await m.pools()) console.log(`${p.name}\t${p.addr}\t${p.connected ? 'connected' : 'unreachable'}\tboxes=${p.boxes}`);
  } finally {
    await m.close();
  }
}
