#!/usr/bin/env node
/**
 * The `sbx` command line: `run` one command in a fresh box, list the `pools`, and `serve` the
 * HTTP API. These work on the library directly (this machine's config); commands that talk to a
 * running server come with the SDK.
 */
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { Manager } from '../sandbox/manager.js';
import type { Box } from '../sandbox/box.js';
import { loadConfig } from '../sandbox/config.js';
import { SbxError, isSbxError } from '../errors.js';
import { parseDuration } from '../util/duration.js';
import { serveCommand } from './serve.js';

/** Exit statuses of sbx itself; `run` otherwise exits with the command's own status. */
export const EXIT = { usage: 2, timeout: 124, sbx: 125, cannotRun: 126, notFound: 127 } as const;
const SIGNAL_EXIT: Record<string, number> = { SIGINT: 130, SIGTERM: 143, SIGPIPE: 141 };

const CONFIG_HELP = 'YAML config file (default: $SBX_CONFIG, else one pool `local` on the local Docker Engine)';

const program = new Command()
  .name('sbx')
  .description('Isolated execution environments ("boxes") on pools of container runtimes.')
  .option('-c, --config <file>', CONFIG_HELP)
  .enablePositionalOptions()
  .exitOverride()
  .showHelpAfterError("(run 'sbx help' or 'sbx <command> --help' for usage)");

/** The Manager for a command: its `-c` first, then the global one, then $SBX_CONFIG and SBX_* variables. */
function manager(opts: { config?: string }): Manager {
  const file = opts.config ?? program.opts<{ config?: string }>().config;
  return new Manager(loadConfig(file ? { file } : {}));
}

function duration(value: string): number {
  try {
    return parseDuration(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message.replace(/^duration: /, ''));
  }
}

/** `KEY=VALUE`, or `KEY` alone for the caller's value of KEY (as `docker run -e` does). */
function envVar(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const eq = value.indexOf('=');
  const key = eq < 0 ? value : value.slice(0, eq);
  if (key === '') throw new InvalidArgumentError('expected KEY=VALUE or KEY');
  if (eq >= 0) return { ...previous, [key]: value.slice(eq + 1) };
  const inherited = process.env[key];
  if (inherited === undefined) throw new InvalidArgumentError(`${key} is not set in this environment; write ${key}=VALUE`);
  return { ...previous, [key]: inherited };
}

interface RunOptions {
  config?: string;
  pool?: string;
  timeout?: number;
  env?: Record<string, string>;
  interactive?: boolean;
}

program
  .command('run')
  .description("Create a box, run one command in it with live output, remove the box; exits with the command's exit status.")
  .argument('<image>', 'image to create the box from, e.g. sbx-base:latest')
  .argument('<cmd...>', 'command and arguments; everything after the image goes to the command')
  .option('-c, --config <file>', CONFIG_HELP)
  .option('-p, --pool <name>', 'pool to create the box on (default: the first pool)')
  .option('-t, --timeout <duration>', 'kill the command after this long: 500ms, 30s, 2m, 1h30m, or milliseconds; 0 = no limit', duration)
  .option('-e, --env <KEY[=VALUE]>', "set a variable in the box; KEY alone passes the caller's value (repeatable)", envVar)
  .option('-i, --interactive', "pass this process's stdin to the command (default: the command reads EOF)")
  .passThroughOptions()
  .addHelpText(
    'after',
    `
Exit status:
  the command's own     when it ran (137 if it was killed)
  ${EXIT.timeout}                   the command ran past --timeout and was killed
  ${EXIT.sbx}                   sbx failed: config, pool, image, engine (the message says which)
  ${EXIT.cannotRun}, ${EXIT.notFound}              the command could not be started / was not found in the box
  ${EXIT.usage}                     usage error: unknown option, bad --timeout or --env
  ${SIGNAL_EXIT['SIGINT']}, ${SIGNAL_EXIT['SIGTERM']}              sbx got SIGINT / SIGTERM: the command was killed, the box removed
  ${SIGNAL_EXIT['SIGPIPE']}                   sbx's stdout or stderr was closed (e.g. | head): the command was killed, the box removed

Examples:
  sbx run sbx-base:latest echo hello
  sbx run -t 30s -e FOO=bar -e HOME sbx-base:latest sh -c 'echo $FOO $HOME'
  echo data | sbx run -i sbx-base:latest wc -c`,
  )
  .action(async (image: string, args: string[], opts: RunOptions) => {
    // `sbx run IMAGE -- CMD`, as earlier help texts asked for, still works.
    const cmd = args[0] === '--' ? args.slice(1) : args;
    if (cmd.length === 0) program.error("error: missing required argument 'cmd'", { exitCode: EXIT.usage, code: 'sbx.missingCommand' });
    const m = manager(opts);
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
  });

program
  .command('pools')
  .description('List the configured pools (name, address, whether the runtime answers, boxes of this instance), tab-separated.')
  .option('-c, --config <file>', CONFIG_HELP)
  .action(async (opts: { config?: string }) => {
    const m = manager(opts);
    try {
      await m.start();
      for (const p of await m.pools()) console.log(`${p.name}\t${p.addr}\t${p.connected ? 'connected' : 'unreachable'}\tboxes=${p.boxes}`);
    } finally {
      await m.close();
    }
  });

// Usage errors exit 2 here too: the settings above are copied, as .command() does for the others.
program.addCommand(serveCommand().copyInheritedSettings(program));

function formatMs(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms} ms`;
}

program.parseAsync().catch((err: unknown) => {
  if (err instanceof CommanderError) {
    // Commander has printed the message (or the help); --help and --version are not errors.
    process.exitCode = err.exitCode === 0 ? 0 : EXIT.usage;
    return;
  }
  if (err instanceof SbxError) console.error(`sbx: ${err.code}: ${err.message}`);
  else console.error(`sbx: ${(err as Error).message ?? String(err)}`);
  process.exitCode = EXIT.sbx;
});
