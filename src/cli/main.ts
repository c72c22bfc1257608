#!/usr/bin/env node
/**
 * The `sbx` command line. `run`, `pools` (alone) and `serve` work on the library directly (this
 * machine's config); every other command talks to a running server through the SDK
 * (src/cli/remote.ts says where the server and key come from).
 */
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { Manager } from '../sandbox/manager.js';
import type { Box } from '../sandbox/box.js';
import { loadConfig } from '../sandbox/config.js';
import { SbxError, isSbxError } from '../errors.js';
import { parseDuration } from '../util/duration.js';
import { serveCommand } from './serve.js';
import { adminCommands } from './admin.js';
import { boxCommands } from './boxes.js';
import { fileCommands } from './files.js';
import { withConnection } from './remote.js';

/**
 * Exit statuses of `run`, as `docker run` gives them; `run` otherwise exits with the command's
 * own status. The commands that talk to a server exit 1 for sbx errors instead (REMOTE_EXIT).
 */
export const EXIT = { usage: 2, timeout: 124, sbx: 125, cannotRun: 126, notFound: 127 } as const;
const SIGNAL_EXIT: Record<string, number> = { SIGINT: 130, SIGTERM: 143, SIGPIPE: 141 };

// A reader that went away (`sbx --help | head -2`, `sbx ls --json | head`): exit quietly with a
// shell's SIGPIPE status instead of an unhandled EPIPE's stack trace. `run` and `exec` add their own
// listener, which kills the command and removes what it must first; then this one stands aside.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
    if (stream.listenerCount('error') === 1) process.exit(SIGNAL_EXIT['SIGPIPE']);
  });
}

const CONFIG_HELP = 'YAML config file (default: $SBX_CONFIG, else one pool `local` on the local Docker Engine)';

const program = withConnection(
  new Command().name('sbx').description('Isolated execution environments ("boxes") on pools of container runtimes.').option('-c, --config <file>', CONFIG_HELP),
)
  .enablePositionalOptions()
  .exitOverride()
  .showHelpAfterError("(run 'sbx help' or 'sbx <command> --help' for usage)")
  .addHelpText(
    'after',
    `
run, pools (without a subcommand) and serve use this machine's Docker Engine and config (-c).
The other commands talk to an sbx server: --url/--api-key, $SBX_URL/$SBX_API_KEY, or \`sbx login\`.

Examples:
  sbx serve                                   # prints an admin key on its first start
  sbx login http://127.0.0.1:7070 --api-key sbxk_…
  ID=$(sbx create sbx-base:latest)
  sbx exec $ID -- uname -a
  sbx cp ./src $ID:/tmp/
  sbx shell $ID
  sbx rm $ID
  sbx run sbx-base:latest echo hello          # one command in a fresh box, no server

Exit status: the command's own for run and exec; 1 when sbx fails (run: 125, as docker run);
2 for usage errors. See docs/cli.md.`,
  );

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

const pools = program
  .command('pools')
  .description(
    "Without a subcommand: this machine's configured pools (name, address, whether the runtime answers, boxes of this instance), tab-separated. With ls|add|rm: the server's pools.",
  )
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

boxCommands(program);
fileCommands(program);
(await import('./logs.js')).logsCommand(program);
adminCommands(program, pools);

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
