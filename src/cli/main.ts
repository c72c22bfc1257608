#!/usr/bin/env node
/**
 * The `sbx` command line. `run`, `pools` (alone) and `serve` work on the library directly (this
 * machine's config); every other command talks to a running server through the SDK
 * (src/cli/remote.ts says where the server and key come from).
 *
 * Start-up is lazy: this file and the command definitions load commander and small helpers only;
 * an action imports what it needs when it runs (the Manager for `run`, the server for `serve`,
 * the SDK for the rest), so `sbx --help` and `sbx exec` never load fastify, dockerode or the
 * Kubernetes client (cli-startup.test.ts proves it on the module graph).
 */
import { Command, CommanderError, Option } from 'commander';
import { SbxError } from '../errors.js';
import { serveCommand } from './serve-command.js';
import { createRequire } from 'node:module';
import { accessCommands } from './access.js';
import { adminCommands } from './admin.js';
import { boxCommands } from './boxes.js';
import { completionCommand } from './completion.js';
import { EXIT, SIGNAL_EXIT } from './exit.js';
import { fileCommands } from './files.js';
import { nodeCommands } from './nodes.js';
import { snapshotCommands } from './snapshots.js';
import type { RunOptions } from './run.js';
import { PULL_POLICIES } from './pull-progress.js';
import { duration, envVar, publish, withConnection } from './remote.js';

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
  new Command()
    .name('sbx')
    .description('Isolated execution environments ("boxes") on pools of container runtimes.')
    // The package's own version (package.json is two levels up from src/cli and from dist/cli).
    .version((createRequire(import.meta.url)('../../package.json') as { version: string }).version, '-v, --version', 'print the version of sbx')
    .option('-c, --config <file>', CONFIG_HELP),
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

/** The config file for a local command: its `-c` first, then the global one (else $SBX_CONFIG and SBX_* variables). */
function configFile(opts: { config?: string }): string | undefined {
  return opts.config ?? program.opts<{ config?: string }>().config;
}

program
  .command('run')
  .description("Create a box, run one command in it with live output, remove the box; exits with the command's exit status.")
  .argument('<image>', 'image to create the box from, e.g. sbx-base:latest')
  .argument('<cmd...>', 'command and arguments; everything after the image goes to the command')
  .option('-c, --config <file>', CONFIG_HELP)
  .option('-i, --interactive', "pass this process's stdin to the command (default: the command reads EOF)")
  .option('-t, --tty', 'give the command a terminal (raw mode here with -i, window size followed); stderr is merged into stdout')
  .option('--rm', 'remove the box when the command ends (always so: accepted as docker run takes it)')
  .option('-e, --env <KEY[=VALUE]>', "set a variable in the box; KEY alone passes the caller's value (repeatable)", envVar)
  .option('-p, --publish <[IP:][HOSTPORT:]PORT[/PROTO]>', "publish a port of the box on this machine's loopback (repeatable)", publish)
  .option('-w, --workdir <dir>', 'working directory of the command inside the box')
  .option('-u, --user <user>', 'user to run the command as (name or uid[:gid])')
  .option('--name <id>', 'the box id (default: generated, sb-…)')
  .option('--pool <name>', 'pool to create the box on (default: the first pool)')
  .addOption(new Option('--pull <when>', 'pull the image: missing (from the pool), always, never').choices(PULL_POLICIES).default('missing'))
  .option('--timeout <duration>', 'kill the command after this long (500ms, 30s, 2m, 1h30m); sbx then exits 124; 0 = no limit', duration)
  .passThroughOptions()
  .addHelpText(
    'after',
    `
Options go before the image (as with docker run); everything after it is the command's.

Exit status:
  the command's own     when it ran (137 if it was killed in the box)
  ${EXIT.timeout}                   the command ran past --timeout and was killed (a line on stderr says so, as timeout(1))
  ${EXIT.sbx}                   sbx failed: config, pool, image, engine (the message says which)
  ${EXIT.cannotRun}, ${EXIT.notFound}              the command could not be started / was not found in the box
  ${EXIT.usage}                     usage error: unknown option, bad --timeout or --env
  ${SIGNAL_EXIT['SIGINT']}, ${SIGNAL_EXIT['SIGTERM']}              sbx got SIGINT / SIGTERM: the command was killed, the box removed
  ${SIGNAL_EXIT['SIGPIPE']}                   sbx's stdout or stderr was closed (e.g. | head): the command was killed, the box removed

Examples:
  sbx run sbx-base:latest echo hello
  sbx run -it sbx-base:latest sh
  sbx run --timeout 30s -e FOO=bar -e HOME sbx-base:latest sh -c 'echo $FOO $HOME'
  sbx run -p 8080:80 -w /srv sbx-base:latest httpd -f -p 80
  echo data | sbx run -i sbx-base:latest wc -c`,
  )
  .action(async (image: string, args: string[], opts: RunOptions) => {
    // `sbx run IMAGE -- CMD`, as earlier help texts asked for, still works.
    const cmd = args[0] === '--' ? args.slice(1) : args;
    if (cmd.length === 0) program.error("error: missing required argument 'cmd'", { exitCode: EXIT.usage, code: 'sbx.missingCommand' });
    const { runCommand } = await import('./run.js');
    await runCommand(image, cmd, opts, configFile(opts));
  });

const pools = program
  .command('pools')
  .summary("This machine's configured pools (read only); with ls|add|rm, the server's")
  .description(
    "Without a subcommand: this machine's configured pools (name, address, whether the runtime answers, boxes of this instance), tab-separated; it only reads, and never acts on the boxes of a server of the same instance name. With ls|add|rm: the server's pools.",
  )
  .option('-c, --config <file>', CONFIG_HELP)
  .action(async (opts: { config?: string }) => {
    const { localPools } = await import('./run.js');
    await localPools(configFile(opts));
  });

boxCommands(program);
// `sbx logs` (src/cli/logs.ts, a box's main process output) registers here, beside the box commands.
fileCommands(program);
accessCommands(program);
(await import('./logs.js')).logsCommand(program);
snapshotCommands(program);
adminCommands(program, pools);
nodeCommands(program);
completionCommand(program);

// Usage errors exit 2 here too: the settings above are copied, as .command() does for the others.
program.addCommand(serveCommand().copyInheritedSettings(program));

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
