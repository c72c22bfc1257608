/**
 * What every command that talks to `sbx serve` shares: where the server and the key come from
 * (flags, then SBX_URL/SBX_API_KEY, then the profile file `sbx login` writes), the SDK client,
 * and errors turned into sentences that say what to do next.
 */
import { rewordOptionHint } from '../errors.js';
import { chmod, mkdir, open, readFile, rename } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Command } from 'commander';
import { CommanderError, InvalidArgumentError } from 'commander';
import type { Box, Sbx } from '../client/index.js';
import { SbxError } from '../errors.js';
import { parseDuration } from '../util/duration.js';
import { printJson } from './output.js';
import { isPort } from '../runtime/ports.js';

/**
 * The SDK's DEFAULT_URL, written out so that help texts need not load the SDK (the CLI loads
 * only what a command uses: docs/cli.md, "Start-up"); output.test.ts checks that they agree.
 */
export const DEFAULT_URL = 'http://127.0.0.1:7070';

/** Exit statuses of the commands that talk to a server (`run` keeps docker's 125 for its own errors). */
export const REMOTE_EXIT = { sbx: 1, usage: 2, cannotRun: 126, notFound: 127 } as const;

export interface ConnectionFlags {
  url?: string;
  apiKey?: string;
  profile?: string;
}

export interface Profile {
  url: string;
  apiKey?: string;
}

export interface ProfileFile {
  current?: string;
  profiles?: Record<string, Profile>;
}

/** Where a setting came from, so an error can say which one to fix. */
export type Source = 'flag' | 'env' | 'profile' | 'default';

export interface Connection {
  url: string;
  apiKey: string | undefined;
  urlFrom: Source;
  keyFrom: Source | undefined;
  profile: string | undefined;
  configFile: string;
}

export const DEFAULT_PROFILE = 'default';

/** `$XDG_CONFIG_HOME/sbx/config.yaml`, else `~/.config/sbx/config.yaml`. */
export function profilePath(env: NodeJS.ProcessEnv = process.env): string {
  const base = env['XDG_CONFIG_HOME'] || join(env['HOME'] || homedir(), '.config');
  return join(base, 'sbx', 'config.yaml');
}

export async function readProfiles(file: string): Promise<ProfileFile> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new SbxError('invalid_argument', `cannot read ${file}: ${(err as Error).message}`, { details: { field: 'profile' } });
  }
  let parsed: unknown;
  const { parse: parseYaml } = await import('yaml');
  try {
    parsed = parseYaml(text);
  } catch (err) {
    throw new SbxError('invalid_argument', `${file} is not valid YAML: ${(err as Error).message}; fix it or run \`sbx login URL\` again`, {
      details: { field: 'profile' },
    });
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) throw new SbxError('invalid_argument', `${file}: expected a mapping with \`profiles\``);
  return parsed as ProfileFile;
}

/**
 * Written to a temp file created with mode 0600 and renamed into place, so the key is never
 * readable by others, not even for a moment, and a crash leaves the old file whole.
 */
export async function writeProfiles(file: string, content: ProfileFile): Promise<void> {
  const { stringify: stringifyYaml } = await import('yaml');
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  const fh = await open(tmp, 'w', 0o600);
  try {
    await fh.writeFile('# Written by `sbx login`. Holds API keys: keep it private (mode 0600).\n' + stringifyYaml(content));
    await fh.sync();
  } finally {
    await fh.close();
  }
  await chmod(tmp, 0o600);
  await rename(tmp, file);
}

/** Flags win over SBX_URL/SBX_API_KEY, which win over the profile (`--profile`, SBX_PROFILE, the file's `current`). */
export async function resolveConnection(flags: ConnectionFlags, env: NodeJS.ProcessEnv = process.env): Promise<Connection> {
  const configFile = profilePath(env);
  const file = await readProfiles(configFile);
  const wanted = flags.profile ?? env['SBX_PROFILE'];
  const name = wanted ?? file.current ?? DEFAULT_PROFILE;
  const profile = file.profiles?.[name];
  if (wanted && !profile) {
    const known = Object.keys(file.profiles ?? {});
    throw new SbxError(
      'not_found',
      `profile '${wanted}' is not in ${configFile} (${known.length ? `known: ${known.join(', ')}` : 'it has none'}); run \`sbx login URL --profile ${wanted}\``,
      {
        details: { field: 'profile', profile: wanted },
      },
    );
  }
  // An explicit --profile is a flag: it beats the environment.
  const explicit = flags.profile !== undefined && profile !== undefined;
  const pick = <T>(flag: T | undefined, fromEnv: T | undefined, fromProfile: T | undefined): [T | undefined, Source | undefined] => {
    if (flag !== undefined && flag !== '') return [flag, 'flag'];
    if (explicit && fromProfile !== undefined) return [fromProfile, 'profile'];
    if (fromEnv !== undefined && fromEnv !== '') return [fromEnv, 'env'];
    if (fromProfile !== undefined) return [fromProfile, 'profile'];
    return [undefined, undefined];
  };
  const [url, urlFrom] = pick(flags.url, env['SBX_URL'], profile?.url);
  const [apiKey, keyFrom] = pick(flags.apiKey, env['SBX_API_KEY'], profile?.apiKey);
  return {
    url: url ?? DEFAULT_URL,
    urlFrom: urlFrom ?? 'default',
    apiKey,
    keyFrom,
    profile: profile ? name : undefined,
    configFile,
  };
}

/** The SDK client for a connection, loaded on first use; the env is not consulted again (the connection already did). */
export async function client(conn: Connection): Promise<Sbx> {
  const { Sbx } = await import('../client/index.js');
  return new Sbx({ url: conn.url, apiKey: conn.apiKey ?? '' });
}

function describeSource(conn: Connection, what: 'url' | 'key'): string {
  const from = what === 'url' ? conn.urlFrom : conn.keyFrom;
  if (from === 'flag') return what === 'url' ? '--url' : '--api-key';
  if (from === 'env') return what === 'url' ? 'SBX_URL' : 'SBX_API_KEY';
  if (from === 'profile') return `profile '${conn.profile}' in ${conn.configFile}`;
  return 'the default';
}

/**
 * The message for an error, with a line on what to do where one helps: the URL tried and
 * `sbx serve` for an unreachable server, how to get a key for a 401, which id for a not_found.
 */
export function explain(error: unknown, conn: Connection | undefined): string {
  if (!(error instanceof SbxError)) return `sbx: ${(error as Error)?.message ?? String(error)}`;
  const err = rewordOptionHint(error, cliOptionHint);
  const lines = [`sbx: ${err.code}: ${err.message}`];
  const hint = (text: string) => lines.push(`  ${text}`);
  const url = conn?.url ?? String(err.details?.['url'] ?? DEFAULT_URL);
  if (err.code === 'runtime_unavailable' && err.message.startsWith('cannot reach')) {
    lines[0] = `sbx: cannot reach the sbx server at ${url}${conn ? ` (from ${describeSource(conn, 'url')})` : ''}: ${String(err.details?.['errno'] ?? err.message)}`;
    hint('Start one on this machine with `sbx serve`, or point the CLI at yours: --url URL, SBX_URL=URL, or `sbx login URL`.');
  } else if (err.code === 'unauthorized') {
    const tried = conn?.apiKey ? `the API key from ${describeSource(conn, 'key')} was refused` : 'no API key was given';
    lines[0] = `sbx: unauthorized: the server at ${url} needs an API key, and ${tried} (${err.message})`;
    hint('Get a key from the server: `sbx serve` prints an admin key on its first start, and an admin makes more with `sbx keys create NAME`.');
    hint('Then save it with `sbx login ' + url + '`, or pass --api-key KEY, or set SBX_API_KEY.');
  } else if (err.code === 'forbidden') {
    hint('This needs an admin key (`sbx keys create NAME --role admin`, made with an admin key).');
  } else if (err.code === 'not_found') {
    const id = err.details?.['id'];
    if (typeof id === 'string' && !err.message.includes(id)) lines[0] += ` (id '${id}')`;
    if (/^box /.test(err.message)) hint('`sbx ls` lists the boxes you can see.');
    else if (/^workspace /.test(err.message)) hint('`sbx ws ls` lists the workspaces you can see.');
  }
  return lines.join('\n');
}

/** An option that would let a refused call through, as the CLI's flag: `force` is `-f/--force` on every command that has it. */
function cliOptionHint(option: string): string {
  return option === 'force' ? 'use -f/--force' : `use --${option}`;
}

export const CONNECTION_HELP = `
Server: --url, else $SBX_URL, else the profile saved by \`sbx login\` (${'$XDG_CONFIG_HOME'}/sbx/config.yaml
or ~/.config/sbx/config.yaml), else ${DEFAULT_URL}. Key: --api-key, else $SBX_API_KEY, else the profile.`;

/** Adds the connection flags (also accepted before the command: `sbx --url URL ls`). */
export function withConnection(cmd: Command): Command {
  return cmd
    .option('--url <url>', 'the sbx server (default: $SBX_URL, the login profile, or ' + DEFAULT_URL + ')')
    .option('--api-key <key>', 'API key (default: $SBX_API_KEY or the login profile)')
    .option('--profile <name>', 'profile of the config file to use (default: $SBX_PROFILE or the one `sbx login` saved last)');
}

/** The flags of a command merged over the ones given before it. */
export function connectionFlags(cmd: Command): ConnectionFlags {
  const merged: ConnectionFlags = {};
  const chain: Command[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) chain.unshift(c);
  for (const c of chain) {
    const o = c.opts<ConnectionFlags>();
    if (o.url !== undefined) merged.url = o.url;
    if (o.apiKey !== undefined) merged.apiKey = o.apiKey;
    if (o.profile !== undefined) merged.profile = o.profile;
  }
  return merged;
}

export interface RemoteContext {
  sbx: Sbx;
  conn: Connection;
}

/**
 * An action that talks to the server: it gets a client, and any error it throws is printed
 * with its hint and exits 1 (not `run`'s 125).
 */
export function remoteAction<A extends unknown[]>(fn: (ctx: RemoteContext, ...args: A) => Promise<void>): (...args: unknown[]) => Promise<void> {
  return connectedAction(async (conn, ...args: A) => fn({ sbx: await client(conn), conn }, ...args));
}

/**
 * Runs `act` for each id of a command over several (`sbx rm`, `sbx snapshots rm`): an id that fails
 * with the server's refusal is reported (stderr, exit 1) and the rest still run; a broken connection
 * or key ends them all. Prints each id done, or with `json` the results per id.
 */
export async function forEachId(
  ids: string[],
  conn: Connection,
  json: boolean | undefined,
  act: (id: string) => Promise<Record<string, unknown> | void>,
): Promise<void> {
  const results: Array<{ id: string; ok: boolean; error?: { code: string; message: string } }> = [];
  for (const id of ids) {
    try {
      results.push({ id, ok: true, ...((await act(id)) ?? {}) });
      if (!json) process.stdout.write(id + '\n');
    } catch (err) {
      // The first of several ids failing must not leave the rest undone.
      if (!(err instanceof SbxError) || err.code === 'runtime_unavailable' || err.code === 'unauthorized') throw err;
      results.push({ id, ok: false, error: { code: err.code, message: err.message } });
      process.stderr.write(explain(err, conn) + '\n');
      process.exitCode = REMOTE_EXIT.sbx;
    }
  }
  if (json) printJson(results);
}

/** remoteAction without the SDK client: for the commands that need only the connection (exec, shell). */
export function connectedAction<A extends unknown[]>(fn: (conn: Connection, ...args: A) => Promise<void>): (...args: unknown[]) => Promise<void> {
  return async (...args: unknown[]) => {
    const cmd = args[args.length - 1] as Command;
    let conn: Connection | undefined;
    try {
      conn = await resolveConnection(connectionFlags(cmd));
      await fn(conn, ...(args.slice(0, -1) as A));
    } catch (err) {
      if (err instanceof CommanderError) throw err;
      process.stderr.write(explain(err, conn) + '\n');
      process.exitCode = REMOTE_EXIT.sbx;
    }
  };
}

/** What `sbx exec` needs of a box: its id and a stream. */
export type ExecTarget = Pick<Box, 'id' | 'stream'>;

/**
 * A box to run commands in over the WebSocket exec, with no GET first and without the rest of
 * the SDK: the exec route answers for an unknown box (not_found) as the GET would, and `sbx
 * exec`'s start-up is half of what the SDK's index and the first fetch would make it.
 */
export async function execTarget(conn: Connection, id: string): Promise<ExecTarget> {
  const [{ Transport }, { openStream }] = await Promise.all([import('../client/http.js'), import('../client/stream.js')]);
  let url: URL;
  try {
    url = new URL(conn.url);
  } catch {
    throw new SbxError('invalid_argument', `url: is not a URL: ${JSON.stringify(conn.url)}`, { details: { field: 'url' } });
  }
  const transport = new Transport({ url: url.href, apiKey: conn.apiKey, retries: 0, retryDelayMs: 0 });
  return { id, stream: (cmd, opts) => openStream(transport, id, cmd, opts) };
}

export function duration(value: string): number {
  try {
    return parseDuration(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message.replace(/^duration: /, ''));
  }
}

const SIZE_UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1024,
  kb: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1024 ** 3,
  gib: 1024 ** 3,
};

/** `512m`, `1g`, `1.5GiB` or bytes (binary units, as docker's `--memory`). */
export function size(value: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(value.trim());
  const unit = m ? SIZE_UNITS[m[2]!.toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new InvalidArgumentError(`'${value}' is not a size (use bytes or e.g. 512m, 1g)`);
  return Math.round(Number(m[1]) * unit);
}

export function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('expected a whole number ≥ 0');
  return n;
}

/** `KEY=VALUE` into a record (labels). */
export function keyValue(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError('expected KEY=VALUE');
  return { ...previous, [value.slice(0, eq)]: value.slice(eq + 1) };
}

/** `KEY=VALUE`, or `KEY` alone for the caller's value of KEY (as `docker run -e` does). */
export function envVar(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const eq = value.indexOf('=');
  const key = eq < 0 ? value : value.slice(0, eq);
  if (key === '') throw new InvalidArgumentError('expected KEY=VALUE or KEY');
  if (eq >= 0) return { ...previous, [key]: value.slice(eq + 1) };
  const inherited = process.env[key];
  if (inherited === undefined) throw new InvalidArgumentError(`${key} is not set in this environment; write ${key}=VALUE`);
  return { ...previous, [key]: inherited };
}

/** A published port as CreateOptions takes it. */
export interface PortSpec {
  containerPort: number;
  hostPort?: number;
  hostIp?: string;
  protocol?: 'tcp' | 'udp';
}

/**
 * docker's `-p`: `PORT`, `HOSTPORT:PORT` or `IP:HOSTPORT:PORT` (IP may be empty: `IP::PORT` takes
 * any free host port), each with an optional `/tcp` or `/udp` (repeatable).
 */
export function publish(value: string, previous: PortSpec[] = []): PortSpec[] {
  const m = /^(?:(?:(\[[0-9a-fA-F:]+\]|[0-9.]+|localhost):)?(\d*):)?(\d+)(?:\/(tcp|udp))?$/.exec(value.trim());
  const toPort = (s: string) => (s === '' ? undefined : Number(s));
  const containerPort = m ? Number(m[3]) : NaN;
  const hostPort = m ? toPort(m[2] ?? '') : undefined;
  if (!m || !isPort(containerPort) || (hostPort !== undefined && !isPort(hostPort, { bind: true })))
    throw new InvalidArgumentError(`'${value}' is not a port to publish (use PORT, HOSTPORT:PORT or IP:HOSTPORT:PORT, each optionally /tcp or /udp)`);
  const hostIp = m[1] === 'localhost' ? '127.0.0.1' : m[1]?.replace(/^\[|\]$/g, '');
  return [
    ...previous,
    { containerPort, ...(hostPort !== undefined ? { hostPort } : {}), ...(hostIp ? { hostIp } : {}), ...(m[4] ? { protocol: m[4] as 'tcp' | 'udp' } : {}) },
  ];
}
