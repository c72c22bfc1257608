/**
 * Box commands against a server: `create`, `ls`, `info`, `stats`, `exec`, `shell`, `start`, `stop`,
 * `rm`, and `login`, which saves the server and key they use.
 */
import { createInterface } from 'node:readline';
import type { Command } from 'commander';
import { CommanderError, Option } from 'commander';
import { SbxError } from '../errors.js';
import type { BoxInfo, BoxStats, CreateOptions, NetworkPolicy } from '../client/index.js';
import type { Box } from '../client/index.js';
import type { ExecTarget, PortSpec } from './remote.js';
import { resolveWorkspace } from './names.js';
import { PULL_POLICIES, createPulling } from './pull-progress.js';
import type { PullPolicy } from './pull-progress.js';
import { EXIT, SIGNAL_EXIT } from './exit.js';
import { fields, formatBytes, formatDuration, paint, printJson, relativeTime, table } from './output.js';
import {
  CONNECTION_HELP,
  DEFAULT_PROFILE,
  REMOTE_EXIT,
  client,
  duration,
  envVar,
  explain,
  keyValue,
  positiveInt,
  publish,
  readProfiles,
  remoteAction,
  resolveConnection,
  connectionFlags,
  connectedAction,
  execTarget,
  forEachId,
  size,
  withConnection,
  writeProfiles,
} from './remote.js';

function statusText(status: string): string {
  return paint(status, status === 'running' ? 'green' : status === 'stopped' ? 'yellow' : 'cyan');
}

export function boxRows(boxes: Array<Pick<BoxInfo, 'id' | 'image' | 'status' | 'pool' | 'owner' | 'workspaceId' | 'createdAt'>>): string {
  return table(
    ['ID', 'IMAGE', 'STATUS', 'POOL', 'OWNER', 'WORKSPACE', 'CREATED'],
    boxes.map((b) => [b.id, b.image, statusText(b.status), b.pool, b.owner, b.workspaceId ?? '-', relativeTime(b.createdAt)]),
  );
}

export function boxFields(b: BoxInfo): string {
  const labels = Object.entries(b.labels).map(([k, v]) => `${k}=${v}`);
  return fields([
    ['ID', b.id],
    [
      'Status',
      statusText(b.status) +
        (b.oomKilled
          ? ' (OOM-killed)'
          : b.exitCode !== null
            ? ` (exit ${b.exitCode})`
            : b.pausedMemory === 'released'
              ? ' (memory released: checkpointed to disk)'
              : ''),
    ],
    ['Image', b.image],
    ['Pool', b.pool],
    ['Owner', b.owner],
    ['Policy', b.policy],
    ['Created', `${b.createdAt} (${relativeTime(b.createdAt)})`],
    ['Last active', `${b.lastActive} (${relativeTime(b.lastActive)})`],
    ['Processes', String(b.processCount)],
    ['Workspace', b.workspaceId ? `${b.workspaceId} at ${b.mountPath}` : '-'],
    ['Idle timeout', formatDuration(b.idleTimeoutMs)],
    ['Idle pause', formatDuration(b.idlePauseMs)],
    ['Idle archive', formatDuration(b.idleArchiveMs)],
    ['Max lifetime', formatDuration(b.maxLifetimeMs) + (b.maxLifetimeAction === 'pause' ? ', then paused' : '')],
    ['Egress', egressText(b.networkPolicy)],
    ['Ports', b.ports.length ? b.ports.map((p) => `${p.hostIp}:${p.hostPort}->${p.containerPort}/${p.protocol}`).join(', ') : '-'],
    ['Labels', labels.length ? labels.join(', ') : '-'],
    ['Exec path', b.execPath],
    ['Container', b.containerId],
  ]);
}

/** `sbx stats`: a dash for what the runtime does not measure or a box that is not running. */
export function statsFields(s: BoxStats): string {
  const bytes = (n: number | null) => (n === null ? '-' : formatBytes(n));
  return fields([
    ['Status', statusText(s.status)],
    ['CPU', s.cpuPercent === null ? '-' : `${s.cpuPercent.toFixed(1)}%`],
    ['Memory', s.memoryLimitBytes === null ? bytes(s.memoryBytes) : `${bytes(s.memoryBytes)} / ${bytes(s.memoryLimitBytes)}`],
    ['Processes', s.pids === null ? '-' : String(s.pids)],
    ['Page cache', bytes(s.memoryCacheBytes)],
    ['Disk written', bytes(s.diskUsedBytes)],
    ['Sampled', s.sampledAt],
  ]);
}

/** A box's egress policy on one line: `all`, `none`, `allow a, b; deny c`, `deny c`. */
export function egressText(p: NetworkPolicy): string {
  const e = p.egress;
  if (typeof e === 'string') return e;
  const deny = e.deny?.length ? `deny ${e.deny.join(', ')}` : '';
  if (e.allow === undefined) return deny || 'deny nothing (all)';
  const allow = e.allow.length ? `allow ${e.allow.join(', ')}` : 'allow nothing';
  return deny ? `${allow}; ${deny}` : allow;
}

/** `sbx create` and `sbx network`'s egress flags. */
interface EgressFlags {
  egress?: 'all' | 'none';
  allow?: string[];
  deny?: string[];
}

/** A repeatable flag's values, in order. */
function entries(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

function egressOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--egress <policy>', "where the box may connect: all (default: the pool's), or none (only sbx itself)").choices(['all', 'none']))
    .option(
      '--allow <entry>',
      'allow only these destinations (repeatable): example.com, *.example.com, 198.18.0.0/15, 2001:db8::/32, with :PORT[-PORT][/tcp|/udp]',
      entries,
    )
    .option('--deny <entry>', 'deny these destinations (repeatable; alone: everything else stays open); deny wins over allow', entries);
}

const EGRESS_HELP = `
Egress (docs/network.md): --egress all|none, or lists: --allow alone or with --deny is an allowlist
(only what it names, minus --deny; private ranges only when named), --deny alone a denylist. An
entry is a domain (example.com, *.example.com), an IPv4/IPv6 address or CIDR, optionally
:PORT or :LO-HI and /tcp or /udp ([2001:db8::1]:443 for IPv6 with a port). At most 1000 entries.`;

/** The policy egress flags give (undefined without any); --egress with a list is a usage error. */
function egressPolicy(f: EgressFlags, usage: (message: string) => never): NetworkPolicy | undefined {
  if (f.egress && (f.allow || f.deny)) usage('error: --egress all|none or --allow/--deny lists, not both');
  if (f.egress) return { egress: f.egress };
  if (f.allow) return { egress: { allow: f.allow, ...(f.deny ? { deny: f.deny } : {}) } };
  if (f.deny) return { egress: { deny: f.deny } };
  return undefined;
}

interface CreateFlags extends EgressFlags {
  id?: string;
  name?: string;
  publish?: PortSpec[];
  port?: PortSpec[];
  vnc?: boolean;
  pull: PullPolicy;
  pool?: string;
  owner?: string;
  label?: Record<string, string>;
  env?: Record<string, string>;
  memory?: number;
  cpus?: number;
  pidsLimit?: number;
  policy?: CreateOptions['policy'];
  idleTimeout?: number;
  idlePause?: number;
  idleArchive?: number;
  maxLifetime?: number;
  maxLifetimeAction?: 'remove' | 'pause';
  stopTimeout?: number;
  network?: string;
  workspace?: string;
  mountPath?: string;
  readOnly?: boolean;
  workdir?: string;
  user?: string;
  json?: boolean;
}

export interface ExecFlags {
  interactive?: boolean;
  tty?: boolean;
  env?: Record<string, string>;
  workdir?: string;
  user?: string;
  timeout?: number;
}

/**
 * Runs `cmd` in `box` with this process's terminal: live output, stdin with -i, a raw-mode TTY
 * that follows the window size with -t. Resolves with the exit status to leave with: the
 * command's own, or as timeout(1) and a shell give them (124 after --timeout, with a line on
 * stderr saying so; 130/143/141 for SIGINT/SIGTERM/a closed output; 126/127 for a command that
 * could not start). `sbx run` (a box of the library) and `sbx exec` (one of a server) share it.
 */
export async function execInBox(box: ExecTarget, cmd: string[], opts: ExecFlags): Promise<number> {
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => stop.abort(signal);
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal);
  // Timed here, not in the box (ExecStreamOptions.timeoutMs), so that the CLI knows a timeout
  // from a command killed otherwise: both end with 137.
  const timer = opts.timeout ? setTimeout(() => stop.abort('timeout'), opts.timeout) : undefined;
  const ended = (): number => {
    if (stop.signal.reason !== 'timeout') return SIGNAL_EXIT[String(stop.signal.reason)] ?? 1;
    process.stderr.write(`sbx: timed out after ${formatDuration(opts.timeout!)}; the command was killed\n`);
    return EXIT.timeout;
  };
  const stdin = process.stdin;
  const stdout = process.stdout;
  const rawMode = opts.tty === true && opts.interactive === true && stdin.isTTY === true;
  // A terminal may report 0×0 (script(1) with no size of its own): 80×24, as a VT100.
  const termSize = () => ({ cols: (stdout.isTTY && stdout.columns) || 80, rows: (stdout.isTTY && stdout.rows) || 24 });
  const onResize = () => void s?.resize(termSize()).catch(() => undefined);
  let s: Awaited<ReturnType<Box['stream']>> | undefined;
  try {
    s = await box.stream(cmd, {
      signal: stop.signal,
      ...(opts.tty ? { tty: true, size: termSize() } : {}),
      ...(opts.env ? { env: opts.env } : {}),
      ...(opts.workdir ? { workDir: opts.workdir } : {}),
      ...(opts.user ? { user: opts.user } : {}),
    });
    for (const [from, to] of [
      [s.stdout, process.stdout],
      [s.stderr, process.stderr],
    ] as const) {
      from.pipe(to);
      // A reader that went away (`sbx exec … | head -1`): stop the command as a shell's SIGPIPE would.
      to.on('error', () => {
        from.unpipe(to).resume();
        stop.abort('SIGPIPE');
      });
    }
    s.stdin.on('error', () => undefined);
    if (rawMode) stdin.setRawMode(true);
    if (opts.tty && stdout.isTTY) stdout.on('resize', onResize);
    if (opts.interactive) stdin.pipe(s.stdin);
    // A TTY without -i keeps its input open: ending it would type ^D at the command.
    else if (!opts.tty) s.stdin.end();
    const code = await s.wait();
    return stop.signal.aborted ? ended() : code;
  } catch (err) {
    // The command could not start: a shell's statuses, as `docker exec` gives them.
    if (err instanceof SbxError && typeof err.details?.['cmd'] === 'string') {
      process.stderr.write(`sbx: ${err.code}: ${err.message}\n`);
      return err.code === 'not_found' ? REMOTE_EXIT.notFound : REMOTE_EXIT.cannotRun;
    }
    if (stop.signal.aborted) return ended();
    throw err;
  } finally {
    clearTimeout(timer);
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
    stdout.off('resize', onResize);
    if (rawMode) stdin.setRawMode(false);
    if (opts.interactive) {
      if (s) stdin.unpipe(s.stdin);
      stdin.destroy();
    }
  }
}

function execOptions(cmd: Command): Command {
  return cmd
    .option('-e, --env <KEY[=VALUE]>', "set a variable for the command; KEY alone passes the caller's value (repeatable)", envVar)
    .option('-w, --workdir <dir>', 'working directory inside the box')
    .option('-u, --user <user>', 'user to run as (name or uid[:gid])')
    .option('--timeout <duration>', 'kill the command after this long (500ms, 30s, 2m, 1h); sbx then exits 124, as timeout(1) does', duration);
}

/** `sbx exec ID -- CMD`: commander hands the `--` through with the command when options precede it. */
function commandArgs(args: string[]): string[] {
  return args[0] === '--' ? args.slice(1) : args;
}

const EXEC_EXIT_HELP = `
Exit status:
  the command's own   when it ran (137 if it was killed in the box)
  124                 the command ran past --timeout and was killed (a line on stderr says so)
  126, 127            the command could not be run / was not found in the box
  1                   sbx failed: server unreachable, bad key, no such box (the message says which)
  2                   usage error
  130, 143, 141       sbx got SIGINT / SIGTERM / its output was closed: the command was killed`;

export function boxCommands(program: Command): void {
  withConnection(
    program
      .command('login')
      .description('Check an API key against a server and save both in the profile file (mode 0600) for the other commands')
      .argument('<url>', 'the server, e.g. http://127.0.0.1:7070'),
  )
    .option('--api-key-stdin', 'read the key from stdin (default: --api-key, $SBX_API_KEY, else asked for on a terminal)')
    .addHelpText(
      'after',
      `
The profile file is $XDG_CONFIG_HOME/sbx/config.yaml (default ~/.config/sbx/config.yaml); --profile
names the profile (default: "${DEFAULT_PROFILE}"), and the last login becomes the current one.

Examples:
  sbx login http://127.0.0.1:7070 --api-key sbxk_…
  echo "$KEY" | sbx login https://sbx.example.com --api-key-stdin --profile prod`,
    )
    .action(async (url: string, flags: { apiKeyStdin?: boolean; apiKey?: string; profile?: string }, cmd: Command) => {
      let conn;
      try {
        const merged = connectionFlags(cmd);
        let key = merged.apiKey ?? (flags.apiKeyStdin ? undefined : process.env['SBX_API_KEY']);
        if (flags.apiKeyStdin) key = (await readAll(process.stdin)).trim();
        else if (!key && process.stdin.isTTY) key = await ask('API key: ');
        if (!key) {
          cmd.error('error: no API key: give --api-key KEY, --api-key-stdin, or set SBX_API_KEY', { exitCode: REMOTE_EXIT.usage });
        }
        conn = { ...(await resolveConnection({ url, apiKey: key })), urlFrom: 'flag' as const, keyFrom: 'flag' as const };
        const sbx = await client(conn);
        // Any key may list boxes: the cheapest call that proves the key works.
        await sbx.list();
        const name = merged.profile ?? DEFAULT_PROFILE;
        const file = await readProfiles(conn.configFile);
        await writeProfiles(conn.configFile, { ...file, current: name, profiles: { ...(file.profiles ?? {}), [name]: { url: sbx.url, apiKey: key } } });
        process.stderr.write(`sbx: logged in to ${sbx.url}; saved as profile '${name}' in ${conn.configFile}\n`);
      } catch (err) {
        if (err instanceof CommanderError) throw err;
        process.stderr.write(explain(err, conn) + '\n');
        process.exitCode = REMOTE_EXIT.sbx;
      }
    });

  const usage = (message: string): never => program.error(message, { exitCode: REMOTE_EXIT.usage });
  egressOptions(
    withConnection(
      program
        .command('create')
        .description('Create and start a box on the server; prints its id (or its info with --json)')
        .argument('<image>', 'image, e.g. sbx-base:latest, or one of your snapshots (snap-…)')
        .argument('[cmd...]', "command replacing the image's (default: a sleep that stops gracefully)"),
    ),
  )
    .option('--name <id>', 'the box id (default: generated, sb-…)')
    .addOption(new Option('--id <id>').hideHelp())
    .option('--pool <name>', 'pool (default: the first, or the workspace’s node)')
    .option('--owner <name>', 'owner (admin keys only; default: the key’s)')
    .option('-l, --label <KEY=VALUE>', 'label (repeatable)', keyValue)
    .option('-e, --env <KEY[=VALUE]>', "variable for the box; KEY alone passes the caller's value (repeatable)", envVar)
    .option('-p, --publish <[IP:][HOSTPORT:]PORT[/PROTO]>', "publish a port on the server machine's loopback (repeatable; see also `sbx url`)", publish)
    .addOption(new Option('--port <spec>').hideHelp().argParser(publish))
    .option('--vnc', 'start a desktop with a VNC server in the box (an image with one, e.g. sbx-desktop); `sbx vnc ID` prints its viewer URL')
    .option('-m, --memory <size>', 'memory limit: 512m, 2g, or bytes', size)
    .option('--cpus <n>', 'CPU cores', Number)
    .option('--pids-limit <n>', 'most processes', positiveInt)
    .addOption(new Option('--policy <policy>', 'lifecycle policy').choices(['oneshot', 'session', 'longrunning', 'persistent']))
    .option('--idle-timeout <duration>', 'stop after this long idle: 30m, 2h; 0 = never', duration)
    .option(
      '--idle-archive <duration>',
      'archive (filesystem kept, container removed) after this long idle, before the idle timeout; the next use restores it: 2h; 0 = never',
      duration,
    )
    .option(
      '--idle-pause <duration>',
      'pause (freeze, memory kept) after this long idle, before the idle timeout; the next use resumes it: 5m; 0 = never',
      duration,
    )
    .option('--max-lifetime <duration>', 'remove after this long: 8h; 0 = no limit (`sbx renew` extends it)', duration)
    .addOption(
      new Option(
        '--max-lifetime-action <action>',
        'what the end of the max lifetime does: remove, or pause (memory and files kept; `sbx renew` or a use brings it back)',
      ).choices(['remove', 'pause']),
    )
    .option('--stop-timeout <duration>', 'SIGTERM grace before SIGKILL: 2s', duration)
    .option('--network <name>', "'none', or an engine network the pool lists (its networks); default sbx's isolated network")
    .option('--workspace <id|name>', 'mount this workspace (see `sbx ws create`)')
    .option('--mount-path <path>', 'where the workspace is mounted (default /workspace)')
    .option('--read-only', 'mount the workspace read-only')
    .option('-w, --workdir <dir>', 'working directory of the box’s command')
    .option('-u, --user <user>', 'user of the box’s command')
    .addOption(
      new Option('--pull <when>', 'pull the image: missing (from the pool; needs an admin key), always, never').choices(PULL_POLICIES).default('missing'),
    )
    .option('--json', 'print the box as JSON')
    .passThroughOptions()
    .addHelpText(
      'after',
      `
Options go before the image (as with docker create); everything after it is the command's.
${EGRESS_HELP}
${CONNECTION_HELP}

Examples:
  sbx create sbx-base:latest
  ID=$(sbx create --label team=ml -m 1g --idle-timeout 10m sbx-base:latest)
  sbx create --name web -p 8080 sbx-base:latest sh -c 'httpd -f -p 8080'
  sbx create --vnc sbx-desktop:latest
  sbx create --workspace my-project --json sbx-base:latest | jq .id
  sbx create --allow pypi.org:443 --allow '*.pythonhosted.org:443' sbx-base:latest`,
    )
    .action(
      remoteAction(async ({ sbx }, image: string, cmd: string[], f: CreateFlags) => {
        const ports = [...(f.publish ?? []), ...(f.port ?? [])];
        const workspaceId = f.workspace ? await resolveWorkspace(sbx, f.workspace) : undefined;
        const networkPolicy = egressPolicy(f, usage);
        const opts: CreateOptions = {
          image,
          ...(cmd.length ? { cmd: commandArgs(cmd) } : {}),
          ...((f.name ?? f.id) ? { id: f.name ?? f.id } : {}),
          ...(f.pool ? { pool: f.pool } : {}),
          ...(f.owner ? { owner: f.owner } : {}),
          ...(f.label ? { labels: f.label } : {}),
          ...(f.env ? { env: f.env } : {}),
          ...(ports.length ? { ports } : {}),
          ...(f.vnc ? { vnc: true } : {}),
          ...(f.memory !== undefined ? { memory: f.memory } : {}),
          ...(f.cpus !== undefined ? { cpus: f.cpus } : {}),
          ...(f.pidsLimit !== undefined ? { pidsLimit: f.pidsLimit } : {}),
          ...(f.policy ? { policy: f.policy } : {}),
          ...(f.idleTimeout !== undefined ? { idleTimeoutMs: f.idleTimeout } : {}),
          ...(f.idlePause !== undefined ? { idlePauseMs: f.idlePause } : {}),
          ...(f.idleArchive !== undefined ? { idleArchiveMs: f.idleArchive } : {}),
          ...(f.maxLifetime !== undefined ? { maxLifetimeMs: f.maxLifetime } : {}),
          ...(f.maxLifetimeAction !== undefined ? { maxLifetimeAction: f.maxLifetimeAction } : {}),
          ...(f.stopTimeout !== undefined ? { stopTimeoutMs: f.stopTimeout } : {}),
          ...(f.network ? { network: f.network } : {}),
          ...(networkPolicy ? { networkPolicy } : {}),
          ...(workspaceId ? { workspaceId } : {}),
          ...(f.mountPath ? { mountPath: f.mountPath } : {}),
          ...(f.readOnly ? { mountMode: 'ro' as const } : {}),
          ...(f.workdir ? { workDir: f.workdir } : {}),
          ...(f.user ? { user: f.user } : {}),
        };
        const box = await createPulling(
          image,
          f.pull,
          () => sbx.create(opts),
          () => sbx.images.pull(image, f.pool ? { pool: f.pool } : {}),
        );
        if (f.json) printJson(await box.info());
        else process.stdout.write(box.id + '\n');
      }),
    );

  withConnection(program.command('ls').alias('list').description('List the boxes you can see (all of them with an admin key)'))
    .option('--owner <name>', 'only this owner’s boxes')
    .option('-p, --pool <name>', 'only boxes on this pool')
    .option('-l, --label <KEY=VALUE>', 'only boxes with this label (repeatable)', keyValue)
    .option('-q, --quiet', 'print the ids only')
    .option('--json', 'print the boxes as a JSON array')
    .addHelpText(
      'after',
      `${CONNECTION_HELP}

Examples:
  sbx ls
  sbx ls -l team=ml --json | jq '.[].id'
  sbx ls -q | xargs sbx rm`,
    )
    .action(
      remoteAction(async ({ sbx }, f: { owner?: string; pool?: string; label?: Record<string, string>; quiet?: boolean; json?: boolean }) => {
        const boxes = await sbx.list({ ...(f.owner ? { owner: f.owner } : {}), ...(f.pool ? { pool: f.pool } : {}), ...(f.label ? { labels: f.label } : {}) });
        if (f.json) {
          // The SDK's Box keeps the listed BoxInfo private: the whole record costs one GET a box
          // (a box removed meanwhile is left out).
          const infos = await Promise.all(boxes.map((b) => b.info().catch(() => null)));
          printJson(infos.filter((i): i is BoxInfo => i !== null));
        } else if (f.quiet) process.stdout.write(boxes.map((b) => b.id + '\n').join(''));
        else if (boxes.length === 0) process.stderr.write('sbx: no boxes (create one with `sbx create IMAGE`)\n');
        else process.stdout.write(boxRows(boxes));
      }),
    );

  withConnection(program.command('info').alias('inspect').description('Show one box').argument('<id>', 'box id'))
    .option('--json', 'print the box as JSON')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx info sb-1a2b3c\n  sbx info sb-1a2b3c --json | jq .status`)
    .action(
      remoteAction(async ({ sbx }, id: string, f: { json?: boolean }) => {
        const info = await sbx.info(id);
        if (f.json) printJson(info);
        else process.stdout.write(boxFields(info));
      }),
    );

  withConnection(program.command('stats').description("Show a box's CPU and memory use now (reading it is not use of the box)").argument('<id>', 'box id'))
    .option('--json', 'print the numbers as JSON (null: not measured, or the box is not running or paused)')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx stats sb-1a2b3c\n  sbx stats sb-1a2b3c --json | jq .cpuPercent`)
    .action(
      remoteAction(async ({ sbx }, id: string, f: { json?: boolean }) => {
        const stats = await sbx.stats(id);
        if (f.json) printJson(stats);
        else process.stdout.write(statsFields(stats));
      }),
    );

  egressOptions(
    withConnection(
      program
        .command('network')
        .description("Show a box's egress policy, or replace it with --egress, --allow, --deny (open connections to what it then denies are cut)")
        .argument('<id>', 'box id'),
    ),
  )
    .option('--json', 'print the policy as JSON')
    .addHelpText(
      'after',
      `${EGRESS_HELP}
The new policy replaces the old one whole.
${CONNECTION_HELP}

Examples:
  sbx network sb-1a2b3c
  sbx network sb-1a2b3c --egress none
  sbx network sb-1a2b3c --allow api.openai.com:443 --deny 10.0.0.0/8
  sbx network sb-1a2b3c --deny 169.254.169.254 --json`,
    )
    .action(
      remoteAction(async ({ sbx }, id: string, f: EgressFlags & { json?: boolean }) => {
        const policy = egressPolicy(f, usage);
        const box = await sbx.get(id);
        if (policy) await box.setNetwork(policy);
        const now = (await box.info()).networkPolicy;
        if (f.json) printJson(now);
        else process.stdout.write(`${egressText(now)}\n`);
      }),
    );

  execOptions(
    withConnection(
      program
        .command('exec')
        .description("Run a command in a box with live output; exits with the command's exit status")
        .argument('<id>', 'box id')
        .argument('<cmd...>', 'command and arguments (after --, or after the id)'),
    ),
  )
    .option('-i, --interactive', "pass this process's stdin to the command, EOF included (default: the command reads EOF)")
    .option('-t, --tty', 'give the command a terminal (raw mode here, window size followed); stderr is merged into stdout')
    .passThroughOptions()
    .addHelpText(
      'after',
      `${EXEC_EXIT_HELP}
${CONNECTION_HELP}

Examples:
  sbx exec sb-1a2b3c -- ls -la /
  echo data | sbx exec -i sb-1a2b3c -- wc -c
  sbx exec -it sb-1a2b3c -- vi /etc/motd
  sbx exec -e DEBUG=1 -w /tmp --timeout 30s sb-1a2b3c -- sh -c 'make test'`,
    )
    .action(
      connectedAction(async (conn, id: string, args: string[], f: ExecFlags) => {
        const cmd = commandArgs(args);
        if (cmd.length === 0) program.error("error: missing required argument 'cmd'", { exitCode: REMOTE_EXIT.usage });
        process.exitCode = await execInBox(await execTarget(conn, id), cmd, f);
      }),
    );

  execOptions(
    withConnection(program.command('shell').description('An interactive login shell in a box (= sbx exec -it ID -- sh -l)').argument('<id>', 'box id')),
  )
    .option('-s, --shell <path>', 'the shell to run', 'sh')
    .addHelpText('after', `${EXEC_EXIT_HELP}\n${CONNECTION_HELP}\n\nExamples:\n  sbx shell sb-1a2b3c\n  sbx shell -u root -s bash sb-1a2b3c`)
    .action(
      connectedAction(async (conn, id: string, f: ExecFlags & { shell: string }) => {
        process.exitCode = await execInBox(await execTarget(conn, id), [f.shell, '-l'], { ...f, interactive: true, tty: true });
      }),
    );

  for (const [name, verb, call] of [
    ['start', 'Start stopped boxes', (b: Box) => b.start()],
    ['stop', 'Stop boxes (they stay registered; `sbx start` brings them back)', (b: Box) => b.stop()],
    [
      'pause',
      'Pause boxes: freeze their processes in place (memory and files kept, no CPU), or with --release-memory checkpoint them to disk (gVisor pools); any use resumes them',
      (b: Box, f: LifecycleFlags) => b.pause(f.releaseMemory ? { memory: 'release' } : undefined),
    ],
    ['resume', 'Resume boxes: thaw paused ones, restore archived ones, start stopped ones', (b: Box) => b.resume()],
    [
      'archive',
      'Archive boxes: save the filesystem and record, remove the container (processes end; costs only disk); any use or `sbx resume` restores them',
      (b: Box) => b.archive(),
    ],
    ['rm', 'Remove boxes: the process is killed, the container deleted (a workspace stays)', null],
  ] as const) {
    const c = withConnection(program.command(name).description(verb).argument('<ids...>', 'box ids'));
    if (name === 'rm') c.alias('remove');
    if (name === 'pause') {
      c.option(
        '--release-memory',
        'checkpoint the box to disk with its processes and memory and free its memory on the host (pools with ociRuntime: runsc); a use restores it where it was, in about a second',
      );
    }
    c.option('--json', 'print the result per id as JSON')
      .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx ${name} sb-1a2b3c\n  sbx ls -q | xargs sbx ${name}`)
      .action(
        remoteAction(async ({ sbx, conn }, ids: string[], f: LifecycleFlags) => {
          await forEachId(ids, conn, f.json, async (id) => {
            if (call === null) return sbx.remove(id);
            const box = await sbx.get(id);
            await call(box, f);
            return { status: box.status };
          });
        }),
      );
  }
}

/** The flags of the lifecycle commands (`--release-memory` is pause's only). */
interface LifecycleFlags {
  json?: boolean;
  releaseMemory?: boolean;
}

function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    stream.setEncoding('utf8');
    stream.on('data', (d: string) => (text += d));
    stream.on('end', () => resolve(text));
    stream.on('error', reject);
  });
}

/** Asks on the terminal without echoing what is typed (an API key is a secret). */
function ask(prompt: string): Promise<string> {
  return new Promise((resolve) => {
    const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
    const out = rl as unknown as { _writeToOutput: (s: string) => void };
    process.stderr.write(prompt);
    out._writeToOutput = () => undefined;
    rl.question('', (answer) => {
      rl.close();
      process.stderr.write('\n');
      resolve(answer.trim());
    });
  });
}
