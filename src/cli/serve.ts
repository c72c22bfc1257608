/**
 * `sbx serve`: the HTTP API (and optionally the gRPC heartbeat) until SIGINT/SIGTERM.
 * src/cli/main.ts adds it with `program.addCommand(serveCommand())`.
 *
 * Flags win over `SBX_*` variables, which win over the config file's `server:` section, which
 * wins over defaults. The Manager's own settings (pools, data dir, timeouts) come from the rest
 * of the config file and its `SBX_*` variables, as for every other command.
 */
import { Command, InvalidArgumentError } from 'commander';
import { loadConfig } from '../sandbox/config.js';
import { SbxError } from '../errors.js';
import { parseDuration } from '../util/duration.js';
import { readServerSection } from '../server/config-file.js';
import { serve } from '../server/index.js';
import { logUncaughtErrors } from '../server/process-errors.js';
import pino from 'pino';
import type { ServeOptions } from '../server/index.js';
import { MAX_PORT, isPort } from '../runtime/ports.js';

interface ServeFlags {
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
}

function port(value: string): number {
  const n = Number(value);
  if (!isPort(n, { bind: true })) throw new InvalidArgumentError(`expected a port number 0-${MAX_PORT}`);
  return n;
}

function bytes(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('expected a number of bytes');
  return n;
}

function duration(value: string): number {
  try {
    return parseDuration(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message.replace(/^duration: /, ''));
  }
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

export function serveCommand(): Command {
  return new Command('serve')
    .description(
      'Serve the HTTP API (boxes, exec, files, workspaces, pools, keys) and the e2b-compatible endpoints (/e2b/api, /e2b/envd; templates under server.e2b in the config file) until SIGINT/SIGTERM; the first start prints an admin key',
    )
    .option('--host <addr>', 'address to bind (default $SBX_HOST or 127.0.0.1; other addresses need TLS)')
    .option('--port <n>', 'port (default $SBX_PORT or 7070)', port)
    .option('-c, --config <file>', 'YAML config file (default $SBX_CONFIG)')
    .option('--data-dir <dir>', 'data directory: keys, box-token secret, workspaces (default $SBX_DATA_DIR or ~/.sbx)')
    .option('--tls-cert <file>', 'PEM certificate (or $SBX_TLS_CERT)')
    .option('--tls-key <file>', 'PEM private key (or $SBX_TLS_KEY)')
    .option('--allow-insecure', 'plain HTTP on a non-loopback address (behind a TLS proxy)')
    .option('--grpc-port <n>', 'serve the gRPC heartbeat on this port (or $SBX_GRPC_PORT; off by default)', port)
    .option('--grpc-host <addr>', 'address for the gRPC heartbeat (default the --host; boxes reach the host on the bridge gateway)')
    .option('--grpc-advertise <host:port>', 'what boxes get as SBX_GRPC_ADDR (or $SBX_GRPC_ADVERTISE; default the gRPC address when a box can dial it)')
    .option('--shutdown-grace <duration>', 'grace for in-flight work on shutdown, e.g. 10s (or $SBX_SHUTDOWN_GRACE)', duration)
    .option('--body-limit <bytes>', 'largest JSON body (or $SBX_BODY_LIMIT; default 1048576)', bytes)
    .option('--exec-output-budget <bytes>', 'buffered exec output held at once, all requests together (or $SBX_EXEC_OUTPUT_BUDGET; default 268435456)', bytes)
    .option('--public-url <url>', 'base URL clients reach this server at, for box.proxy() URLs (or $SBX_PUBLIC_URL; default the listening URL)')
    .option('--proxy-domain <domain>', 'host-based proxy: <port>-<id>.<domain> reaches that port of that box at / (or $SBX_PROXY_DOMAIN; needs wildcard DNS)')
    .action(async (flags: ServeFlags, cmd: Command) => {
      const parentConfig = cmd.parent?.opts<{ config?: string }>().config;
      const opts = serveOptions({ ...flags, ...(flags.config === undefined && parentConfig ? { config: parentConfig } : {}) });
      const log = pino({ name: 'sbx-server', level: process.env['SBX_LOG_LEVEL'] ?? 'info' });
      // Logged, never fatal: one request that reaches a bug must not take every box's API down.
      const restore = logUncaughtErrors(log);
      const server = await serve({ ...opts, logger: log });
      const dial = server.boxGrpcAddr ? `, boxes dial ${server.boxGrpcAddr}` : '';
      process.stderr.write(`sbx: serving ${server.url}${server.grpc ? ` (gRPC heartbeat on ${server.grpc.address}${dial})` : ''}\n`);
      await new Promise<void>((resolve) => {
        const stop = (signal: NodeJS.Signals) => {
          process.stderr.write(`sbx: ${signal}, shutting down\n`);
          resolve();
        };
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
      });
      await server.close();
      restore();
    });
}
