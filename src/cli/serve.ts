/**
 * `sbx serve`: the HTTP API (and optionally the gRPC heartbeat) until SIGINT/SIGTERM. Its flags
 * and help are in serve-command.ts, which loads this file only when the command runs.
 *
 * Flags win over `SBX_*` variables, which win over the config file's `server:` section, which
 * wins over defaults. The Manager's own settings (pools, data dir, timeouts) come from the rest
 * of the config file and its `SBX_*` variables, as for every other command.
 */
import type { Command } from 'commander';
import { loadConfig } from '../sandbox/config.js';
import { SbxError } from '../errors.js';
import { bytes, duration, port } from './serve-command.js';
import { readServerSection } from '../server/config-file.js';
import { serve } from '../server/index.js';
import { logUncaughtErrors } from '../server/process-errors.js';
import pino from 'pino';
import type { ServeOptions } from '../server/index.js';
import { LOG_FORMATS, LOG_LEVELS } from '../util/log-settings.js';
import type { LogFormat, LogLevel } from '../util/log-settings.js';
import { logDestination } from './log-format.js';

export { serveCommand } from './serve-command.js';

export interface ServeFlags {
  host?: string;
  port?: number;
  config?: string;
  dataDir?: string;
  tlsCert?: string;
  tlsKey?: string;
  allowInsecure?: boolean;
  grpcPort?: number;
  grpcHost?: string;
  grpcAdvertise?: string;
  shutdownGrace?: number;
  bodyLimit?: number;
  execOutputBudget?: number;
  publicUrl?: string;
  proxyDomain?: string;
  logLevel?: LogLevel;
  logFormat?: LogFormat;
}

/**
 * Options for serve(): flags, then `SBX_*` variables, then the config file's `server:` section,
 * then defaults, each setting on its own. Exported for tests.
 */
export function serveOptions(flags: ServeFlags, env: NodeJS.ProcessEnv = process.env): ServeOptions {
  const fromEnv = <T>(key: string, parse: (v: string) => T): T | undefined => (env[key] !== undefined && env[key] !== '' ? parse(env[key]!) : undefined);
  const file = flags.config ?? (env['SBX_CONFIG'] || undefined);
  const config = loadConfig({ ...(file ? { file } : {}), env });
  const fromFile = file ? readServerSection(file) : {};
  const grpcPort = flags.grpcPort ?? fromEnv('SBX_GRPC_PORT', port) ?? fromFile.grpc?.port;
  const certFile = flags.tlsCert ?? env['SBX_TLS_CERT'] ?? fromFile.tls?.certFile;
  const keyFile = flags.tlsKey ?? env['SBX_TLS_KEY'] ?? fromFile.tls?.keyFile;
  if ((certFile === undefined) !== (keyFile === undefined))
    throw new SbxError('invalid_argument', 'tls: give both --tls-cert and --tls-key', { details: { field: 'tls' } });
  const dataDir = flags.dataDir ?? config.dataDir;
  const grace = flags.shutdownGrace ?? fromEnv('SBX_SHUTDOWN_GRACE', duration) ?? fromFile.shutdownGraceMs;
  const bodyLimit = flags.bodyLimit ?? fromEnv('SBX_BODY_LIMIT', bytes) ?? fromFile.bodyLimitBytes;
  const execOutputBudget = flags.execOutputBudget ?? fromEnv('SBX_EXEC_OUTPUT_BUDGET', bytes) ?? fromFile.execOutputBudgetBytes;
  const bodyTimeout = fromEnv('SBX_BODY_TIMEOUT', duration) ?? fromFile.bodyTimeoutMs;
  const wsMaxPayload = fromEnv('SBX_WS_MAX_PAYLOAD', bytes) ?? fromFile.wsMaxPayloadBytes;
  const grpcHost = flags.grpcHost ?? env['SBX_GRPC_HOST'] ?? fromFile.grpc?.host;
  const publicUrl = flags.publicUrl ?? (env['SBX_PUBLIC_URL'] || undefined) ?? fromFile.publicUrl;
  const proxyDomain = flags.proxyDomain ?? (env['SBX_PROXY_DOMAIN'] || undefined) ?? fromFile.proxyDomain;
  const grpcAdvertise = flags.grpcAdvertise ?? env['SBX_GRPC_ADVERTISE'] ?? fromFile.grpc?.advertise;
  return {
    host: flags.host ?? env['SBX_HOST'] ?? fromFile.host ?? '127.0.0.1',
    port: flags.port ?? fromEnv('SBX_PORT', port) ?? fromFile.port ?? 7070,
    config: { ...config, ...(dataDir ? { dataDir } : {}) },
    ...(dataDir ? { dataDir } : {}),
    ...(certFile && keyFile ? { tls: { certFile, keyFile } } : {}),
    ...((flags.allowInsecure ?? fromFile.allowInsecure) ? { allowInsecure: true } : {}),
    ...(grpcPort !== undefined
      ? { grpc: { port: grpcPort, ...(grpcHost ? { host: grpcHost } : {}), ...(grpcAdvertise ? { advertise: grpcAdvertise } : {}) } }
      : {}),
    ...(grace !== undefined ? { shutdownGraceMs: grace } : {}),
    ...(bodyLimit !== undefined ? { bodyLimitBytes: bodyLimit } : {}),
    ...(execOutputBudget !== undefined ? { execOutputBudgetBytes: execOutputBudget } : {}),
    ...(bodyTimeout !== undefined ? { bodyTimeoutMs: bodyTimeout } : {}),
    ...(wsMaxPayload !== undefined ? { wsMaxPayloadBytes: wsMaxPayload } : {}),
    ...(publicUrl !== undefined ? { publicUrl } : {}),
    ...(proxyDomain !== undefined ? { proxyDomain } : {}),
    ...(fromFile.e2b ? { e2b: fromFile.e2b } : {}),
  };
}

/** A log setting: the flag, else the variable (checked against the same list), else the file's, else the default. */
function logSetting<T extends string>(variable: string, allowed: readonly T[], flag: T | undefined, fromFile: T | undefined, fallback: T): T {
  const env = process.env[variable];
  if (flag !== undefined) return flag;
  if (env !== undefined && env !== '') {
    if (!(allowed as readonly string[]).includes(env))
      throw new SbxError('invalid_argument', `${variable}: '${env}' is not one of ${allowed.join(', ')}`, { details: { field: variable } });
    return env as T;
  }
  return fromFile ?? fallback;
}

/** The serve command's action: loaded only when `sbx serve` runs (the server's modules are most of sbx's). */
export async function runServe(flags: ServeFlags, cmd: Command): Promise<void> {
  const parentConfig = cmd.parent?.opts<{ config?: string }>().config;
  const opts = serveOptions({ ...flags, ...(flags.config === undefined && parentConfig ? { config: parentConfig } : {}) });
  const configFile = flags.config ?? parentConfig ?? (process.env['SBX_CONFIG'] || undefined);
  const file = configFile ? readServerSection(configFile) : {};
  const level = logSetting('SBX_LOG_LEVEL', LOG_LEVELS, flags.logLevel, file.logLevel, 'info');
  const log = pino({ name: 'sbx-server', level }, logDestination(logSetting('SBX_LOG_FORMAT', LOG_FORMATS, flags.logFormat, file.logFormat, 'auto')));
  // Logged, never fatal: one request that reaches a bug must not take every box's API down.
  const restore = logUncaughtErrors(log);
  const server = await serve({ ...opts, logger: log });
  const dial = server.boxGrpcAddr ? `, boxes dial ${server.boxGrpcAddr}` : '';
  // The handlers first, the line after: a supervisor that signals as soon as it reads the line
  // must find them (the other order lost that race: the default action killed the process).
  const stopped = new Promise<void>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      process.stderr.write(`sbx: ${signal}, shutting down\n`);
      resolve();
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  process.stderr.write(`sbx: serving ${server.url}${server.grpc ? ` (gRPC heartbeat on ${server.grpc.address}${dial})` : ''}\n`);
  process.stderr.write(`sbx: web console at ${server.url}/console/ (sign in with an API key)\n`);
  await stopped;
  await server.close();
  restore();
}
