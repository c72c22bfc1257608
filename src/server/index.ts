/**
 * `sbx serve`: the HTTP API (and, when configured, the gRPC heartbeat) over a Manager.
 *
 * @example
 * const server = await serve({ port: 7070, dataDir: '/var/lib/sbx' });
 * console.log(server.url); // http://127.0.0.1:7070
 * await server.close();    // in-flight work gets shutdownGraceMs, boxes keep running
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import type { Logger } from 'pino';
import { SbxError } from '../errors.js';
import { Manager } from '../sandbox/index.js';
import type { ManagerConfig } from '../sandbox/index.js';
import { resolveConfig } from '../sandbox/config.js';
import { buildApp } from './app.js';
import { FailureLimiter } from './auth.js';
import { StreamRegistry } from './context.js';
import type { ServerContext } from './context.js';
import { startGrpc } from './grpc.js';
import type { GrpcServerHandle } from './grpc.js';
import { KeyStore } from './keys.js';
import { DEFAULT_EXEC_OUTPUT_BUDGET_BYTES, ExecOutputBudget } from './output-budget.js';
import { ServerMetrics } from './metrics.js';
import { e2bPlugin } from './e2b/index.js';
import type { E2bApiOptions } from './e2b/index.js';
import { checkPort } from '../runtime/ports.js';

export { mapError, STATUS_BY_CODE } from './errors.js';
export type { ErrorBody } from './errors.js';
export { KeyStore } from './keys.js';
export type { ApiKeyInfo, Role } from './keys.js';
export { CHANNEL } from './ws-exec.js';

export interface TlsFiles {
  /** PEM text or bytes, or read from certFile/keyFile. */
  cert?: string | Buffer;
  key?: string | Buffer;
  certFile?: string;
  keyFile?: string;
}

export interface ServeOptions {
  /** Default 127.0.0.1. Another address needs `tls` unless `allowInsecure`. */
  host?: string;
  /** Default 7070; 0 = any free port. */
  port?: number;
  /** A Manager the caller made (and will close); otherwise one is made from `config` and started. */
  manager?: Manager;
  config?: ManagerConfig;
  /** Where keys live (and the Manager's data, when serve makes it). Default the Manager's dataDir. */
  dataDir?: string;
  tls?: TlsFiles;
  /** Serve plain HTTP on a non-loopback address (behind a TLS proxy). */
  allowInsecure?: boolean;
  /** Largest JSON body; default 1 MiB. File uploads are streamed and bounded by the workspace quota instead. */
  bodyLimitBytes?: number;
  /**
   * Buffered exec output held at once, across all requests (POST /v1/boxes/:id/exec); default
   * 256 MiB. An exec whose maxOutputBytes is more than is free is refused (429 limit_exceeded).
   */
  execOutputBudgetBytes?: number;
  /**
   * A request body with no byte for this long is answered 408 (code `timeout`) and its connection
   * closed; default 30 s, 0 = never. Idle time, not total: a long upload that keeps sending is fine.
   */
  bodyTimeoutMs?: number;
  /** Largest WebSocket message a client may send (exec, VNC); a larger one closes with 1009. Default 16 MiB. */
  wsMaxPayloadBytes?: number;
  /** How long close() waits for in-flight requests and streams before ending them; default 10 s. */
  shutdownGraceMs?: number;
  /** How often GET /v1/metrics/history samples the metrics; default 10 s (it keeps the last hour). */
  metricsHistoryIntervalMs?: number;
  /** Failed authentications per client address in `windowMs` before 429; default 20 per minute. */
  authFailures?: { max: number; windowMs: number };
  /**
   * The gRPC heartbeat server; off unless given. New boxes get `SBX_GRPC_ADDR`: `advertise` if
   * given, else the bound `host:port` (none for a loopback or wildcard bind, which a box cannot
   * dial; give `advertise`, e.g. the bridge gateway `172.17.0.1:7071`).
   */
  grpc?: { host?: string; port: number; advertise?: string };
  logger?: Logger;
  /**
   * The base URL clients reach this server at: box.proxy() URLs start with it. Default the
   * listening URL (right on one machine; behind a TLS proxy or NAT give the outside one).
   */
  publicUrl?: string;
  /** Host-based proxy: `<port>-<id>.<proxyDomain>` (wildcard DNS to this server) reaches that port of that box at `/`. */
  proxyDomain?: string;
  /** Where the first admin key is printed; default stdout. */
  print?: (text: string) => void;
  /** The e2b-compatible API under /e2b/api: template name → image; default `{ base: 'sbx-e2b:latest' }` (docs/e2b.md). */
  e2b?: E2bApiOptions;
}

export interface ServerHandle {
  url: string;
  port: number;
  host: string;
  manager: Manager;
  app: FastifyInstance;
  keys: KeyStore;
  /** The admin key made on this start (a fresh data dir only); shown once. */
  adminKey: string | undefined;
  grpc: GrpcServerHandle | undefined;
  /** What boxes created from now on get as SBX_GRPC_ADDR; undefined when none (see ServeOptions.grpc). */
  boxGrpcAddr: string | undefined;
  close(): Promise<void>;
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

function isWildcard(host: string): boolean {
  return host === '' || host === '0.0.0.0' || host === '::' || host === '[::]';
}

/** The address boxes are told to dial for the gRPC heartbeat, or undefined (with the reason). */
export function grpcAdvertised(bound: { host: string; port: number }, advertise: string | undefined): { addr?: string; why?: string } {
  if (advertise) return { addr: advertise };
  if (isLoopback(bound.host) || isWildcard(bound.host)) {
    return { why: `boxes cannot dial ${bound.host}; bind the bridge gateway (e.g. --grpc-host 172.17.0.1) or give --grpc-advertise` };
  }
  return { addr: bound.host.includes(':') ? `[${bound.host}]:${bound.port}` : `${bound.host}:${bound.port}` };
}

function pem(v: string | Buffer | undefined, file: string | undefined, what: string): string | Buffer {
  if (v !== undefined) return v;
  if (!file) throw new SbxError('invalid_argument', `tls.${what}: give the PEM or ${what}File`, { details: { field: `tls.${what}` } });
  try {
    return readFileSync(file);
  } catch (cause) {
    throw new SbxError('invalid_argument', `tls.${what}File: cannot read ${file}`, { cause, details: { field: `tls.${what}File` } });
  }
}

export async function serve(options: ServeOptions = {}): Promise<ServerHandle> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 7070;
  const proxy = resolveConfig({
    ...(options.publicUrl !== undefined ? { publicUrl: options.publicUrl } : {}),
    ...(options.proxyDomain !== undefined ? { proxyDomain: options.proxyDomain } : {}),
  });

  checkPort(port, 'port', { bind: true });
  const budget = options.execOutputBudgetBytes;
  if (budget !== undefined && (!Number.isSafeInteger(budget) || budget < 1))
    throw new SbxError('invalid_argument', 'execOutputBudgetBytes: must be a whole number of bytes, at least 1', {
      details: { field: 'execOutputBudgetBytes' },
    });
  const https = options.tls ? { cert: pem(options.tls.cert, options.tls.certFile, 'cert'), key: pem(options.tls.key, options.tls.keyFile, 'key') } : undefined;
  if (!https && !isLoopback(host) && !options.allowInsecure) {
    throw new SbxError('invalid_argument', `host: ${host} is not a loopback address; give tls (cert and key) or allowInsecure behind a TLS proxy`, {
      details: { field: 'host' },
    });
  }
  const log = options.logger ?? pino({ name: 'sbx-server', level: process.env['SBX_LOG_LEVEL'] ?? 'info' });
  const ownManager = !options.manager;
  const manager =
    options.manager ?? new Manager({ ...options.config, ...(options.dataDir ? { dataDir: options.dataDir } : {}), logger: options.config?.logger ?? log });
  const dataDir = options.dataDir ?? manager.config.dataDir;
  const keys = new KeyStore(dataDir);
  await keys.load();
  let adminKey: string | undefined;
  if (keys.size === 0) {
    const created = await keys.create({ name: 'admin', role: 'admin' });
    adminKey = created.key;
    (options.print ?? ((t) => process.stdout.write(t)))(
      `sbx: created the first admin API key; it is shown this once (only its hash is kept, in ${keys.file}):\n${created.key}\n`,
    );
  }
  if (ownManager) await manager.start();

  let closing = false;
  const streams = new StreamRegistry();
  const execOutput = new ExecOutputBudget(options.execOutputBudgetBytes ?? DEFAULT_EXEC_OUTPUT_BUDGET_BYTES);
  const metrics = new ServerMetrics({
    boxes: async () => (await manager.list()).map((b) => ({ pool: b.pool, status: b.status })),
    pools: async () => manager.pools(),
    cleanupStats: () => ({ ...manager.cleanupStats }),
    warm: () => manager.warm(),
    execOutput: () => execOutput,
  });
  const proxyDomain = proxy.proxyDomain ?? manager.config.proxyDomain;
  // Known once listening (port 0 binds any): until then nothing issues URLs.
  let publicUrl = proxy.publicUrl ?? manager.config.publicUrl ?? '';
  const ctx: ServerContext = {
    manager,
    keys,
    metrics,
    streams,
    log,
    shuttingDown: () => closing,
    execOutput,
    publicUrl: () => publicUrl,
    proxyDomain,
    ...(options.metricsHistoryIntervalMs !== undefined ? { metricsHistoryIntervalMs: options.metricsHistoryIntervalMs } : {}),
  };
  // One failure count per address for every credential the server checks, HTTP and gRPC.
  const authFailures = options.authFailures ?? { max: 20, windowMs: 60_000 };
  const limiter = new FailureLimiter(authFailures.max, authFailures.windowMs);
  const app = await buildApp(ctx, {
    bodyLimitBytes: options.bodyLimitBytes ?? 1024 * 1024,
    limiter,
    ...(options.bodyTimeoutMs !== undefined ? { bodyTimeoutMs: options.bodyTimeoutMs } : {}),
    ...(options.wsMaxPayloadBytes !== undefined ? { wsMaxPayloadBytes: options.wsMaxPayloadBytes } : {}),
    https,
    proxyDomain,
    plugins: [e2bPlugin(options.e2b)],
  });
  let grpcHandle: GrpcServerHandle | undefined;
  let grpcAddr: string | undefined;
  const stopObserving = manager.observeEngineCalls((c) => metrics.engineCalls.observe({ op: c.op, outcome: c.outcome }, c.ms / 1000));
  try {
    await app.listen({ host, port });
    if (options.grpc) grpcHandle = await startGrpc({ host: options.grpc.host ?? host, port: options.grpc.port, manager, metrics, limiter });
    if (grpcHandle) {
      const { addr, why } = grpcAdvertised({ host: options.grpc?.host ?? host, port: grpcHandle.port }, options.grpc?.advertise);
      if (addr) grpcAddr = addr;
      else log.warn({ grpc: grpcHandle.address }, `new boxes get no SBX_GRPC_ADDR: ${why}`);
    }
  } catch (err) {
    stopObserving();
    await grpcHandle?.close().catch(() => undefined);
    await app.close().catch(() => undefined);
    if (ownManager) await manager.close().catch(() => undefined);
    throw err;
  }
  const bound = (app.server.address() as AddressInfo).port;
  const url = `${https ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${bound}`;
  publicUrl ||= url;
  // box.proxy() on this Manager now points at this server (unless its config names a public URL),
  // and boxes created from now on dial its gRPC heartbeat; close() withdraws just this server.
  const unregister = manager.registerServer({ publicUrl, proxyDomain, grpcAddr });
  log.info({ url, publicUrl, proxyDomain, grpc: grpcHandle?.address, boxesDial: grpcAddr }, 'sbx serving');

  const grace = options.shutdownGraceMs ?? 10_000;
  let closed: Promise<void> | undefined;
  const close = () =>
    (closed ??= (async () => {
      closing = true;
      // New work is refused (503 not_available) from now on; requests and streams in flight get
      // the grace period, then open streams are told why they close. Only then does fastify
      // close (its websocket plugin would otherwise cut every socket at once).
      const deadline = Date.now() + grace;
      while (streams.size > 0 && Date.now() < deadline) {
        await Promise.race([
          Promise.all(streams.all().map((s) => s.done)),
          new Promise((r) => setTimeout(r, Math.min(100, Math.max(1, deadline - Date.now())))),
        ]);
      }
      const reason = new SbxError('not_available', `the server is shutting down (grace of ${grace} ms passed); the box keeps running, reconnect later`);
      for (const s of streams.all()) s.abort(reason);
      await new Promise((r) => setTimeout(r, 50));
      await Promise.race([app.close(), new Promise((r) => setTimeout(r, Math.max(2000, deadline - Date.now())))]);
      await grpcHandle?.close();
      unregister();
      stopObserving();
      if (ownManager) await manager.close();
      log.info('sbx server closed');
    })());

  return { url, port: bound, host, manager, app, keys, adminKey, grpc: grpcHandle, boxGrpcAddr: grpcAddr, close };
}
