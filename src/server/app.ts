/**
 * The fastify application: authentication, owner scoping, validation with the library's zod
 * schemas, one error mapping, one log line per request, metrics, /openapi.json.
 */
import { randomBytes } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import swagger from '@fastify/swagger';
import websocket from '@fastify/websocket';
import Fastify, { LogController } from 'fastify';
import type { FastifyBaseLogger, FastifyInstance, FastifyReply } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SbxError } from '../errors.js';
import { WS_PROTOCOL } from './auth.js';
import type { Caller, FailureLimiter } from './auth.js';
import { authenticateRequest } from './request-auth.js';
import type { ServerContext, ServerPlugin } from './context.js';
import { boundBodyReads } from './body-timeout.js';
import { mapError, retryAfterSeconds } from './errors.js';
import { adminRoutes } from './routes-admin.js';
import { imageRoutes } from './routes-images.js';
import { nodeRoutes } from './routes-nodes.js';
import { whoamiRoutes } from './routes-whoami.js';
import { proxyRoutes, rewriteHostBased } from './routes-proxy.js';
import { authorizePortRequest } from './port-auth.js';
import { vncRoutes } from './vnc.js';
import { swaggerOptions } from './openapi.js';
import { replies } from './schemas.js';
import type { VncDeps } from './vnc.js';
import { boxRoutes } from './routes-boxes.js';
import { workspaceRoutes } from './routes-workspaces.js';
import { snapshotRoutes } from './routes-snapshots.js';
import { boxFileRoutes } from './routes-box-files.js';
import { wsExecRoutes } from './ws-exec.js';
import { SessionStore } from './sessions.js';
import { sessionRoutes } from './routes-session.js';
import { consoleRoutes } from './console.js';
import { metricsHistoryRoutes } from './routes-metrics-history.js';
import { boxStatsRoutes } from './routes-box-stats.js';

export interface AppOptions {
  bodyLimitBytes: number;
  /** The server's one auth-failure limiter (serve() gives the same to the gRPC heartbeat). */
  limiter: FailureLimiter;
  /** A request body with no byte for this long is answered 408 and its connection closed; 0 = never (body-timeout.ts). */
  bodyTimeoutMs?: number;
  https?: { cert: string | Buffer; key: string | Buffer } | undefined;
  /**
   * What the VNC routes use; default the real ones (port authorization, the box's own dial).
   * Tests give stand-ins to drive the bridge against a local TCP server.
   */
  vnc?: VncDeps;
  /** Largest WebSocket message accepted from a client; a larger one closes the socket with 1009. Default 16 MiB. */
  wsMaxPayloadBytes?: number;
  /** Host-based proxy: `<port>-<id>.<proxyDomain>` reaches that port of that box at `/`. */
  proxyDomain?: string | undefined;
  /** Route sets registered after sbx's own (serve() adds the e2b-compatible surface, src/server/e2b). */
  plugins?: ServerPlugin[];
}

/** Defaults of the server's own client-facing bounds (docs/api.md, "Limits"). */
export const DEFAULT_BODY_TIMEOUT_MS = 30_000;
export const DEFAULT_WS_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024;

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,64}$/;

function subjectOf(caller: Caller | undefined): string | undefined {
  if (!caller) return undefined;
  return caller.kind === 'box' ? `box:${caller.boxId}` : `${caller.role}:${caller.name}`;
}

export async function buildApp(ctx: ServerContext, opts: AppOptions): Promise<FastifyInstance> {
  const { limiter } = opts;
  const app = Fastify({
    loggerInstance: ctx.log as unknown as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: opts.bodyLimitBytes,
    requestIdHeader: false,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomBytes(8).toString('hex');
    },
    routerOptions: { maxParamLength: 4096, ignoreDuplicateSlashes: false },
    return503OnClosing: true,
    // Errors the router raises before any route runs (a malformed %-escape, a bad content type).
    frameworkErrors: (err, _req, reply) => {
      const mapped = mapError(err);
      ctx.metrics.errors.inc({ code: mapped.error.code });
      void (reply as unknown as FastifyReply).code(mapped.status).type('application/json').send(mapped.body);
    },
    // Requests node's parser refuses before fastify sees them (a request line and headers over
    // 16 KiB: a long path or query) are answered with sbx's error body, not fastify's own shape.
    clientErrorHandler: answerClientError,
    forceCloseConnections: 'idle',
    ...(opts.proxyDomain ? { rewriteUrl: rewriteHostBased(opts.proxyDomain)! } : {}),
    ...(opts.https ? { https: { cert: opts.https.cert, key: opts.https.key } } : {}),
  }) as unknown as FastifyInstance;
  boundBodyReads(app.server, opts.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS, ctx.log);
  // JSON only: a text/plain body is refused (415) rather than parsed as a string.
  app.removeContentTypeParser('text/plain');
  app.decorate('sbxAuth', { ctx, limiter, sessions: new SessionStore(ctx.keys) });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);

  await app.register(swagger, swaggerOptions);
  await app.register(websocket, {
    options: {
      maxPayload: opts.wsMaxPayloadBytes ?? DEFAULT_WS_MAX_PAYLOAD_BYTES,
      // Only ever sbx.v1: selecting the offered sbx.bearer.<credential> would send it back.
      handleProtocols: (protocols: Set<string>) => (protocols.has(WS_PROTOCOL) ? WS_PROTOCOL : false),
    },
  });

  app.addHook('onRequest', async (req, reply) => {
    reply.header('x-request-id', req.id);
    // sbx serves no service worker. A box's page on the path-based proxy shares this origin, and a
    // worker it registered would see (and could replay) the web console's requests: refused.
    if (req.headers['service-worker'] !== undefined) {
      throw new SbxError('forbidden', 'this server serves no service worker (a Service-Worker script request is refused on every path)');
    }
    const config = req.routeOptions.config;
    const auth = config?.auth ?? 'key';
    if (ctx.shuttingDown() && auth !== 'public') throw new SbxError('not_available', 'the server is shutting down; retry against the restarted server');
    // 'box' routes check their box-bound credential themselves, before they act (context.ts).
    if (auth !== 'key') return;
    if (!req.routeOptions.url) return; // unknown route: 404 below, no auth to reveal nothing
    const caller = await authenticateRequest(req);
    if (caller.kind === 'box') throw new SbxError('forbidden', 'a box token may only call its own box heartbeat route');
    req.caller = caller;
  });

  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? 'unknown';
    const ms = reply.elapsedTime;
    ctx.metrics.requests.observe({ method: req.method, route, status: String(reply.statusCode) }, ms / 1000);
    const line = {
      reqId: req.id,
      method: req.method,
      route,
      status: reply.statusCode,
      ms: Math.round(ms * 10) / 10,
      subject: subjectOf(req.caller),
      ip: req.ip,
    };
    if (reply.statusCode >= 500) ctx.log.error(line, 'request');
    else ctx.log.info(line, 'request');
  });

  app.setErrorHandler(async (err, req, reply) => {
    const mapped = mapError(err);
    ctx.metrics.errors.inc({ code: mapped.error.code });
    if (mapped.status >= 500 && mapped.error.code === 'internal') ctx.log.error({ reqId: req.id, err }, 'internal error');
    const retryAfter = retryAfterSeconds(mapped.error);
    if (retryAfter) reply.header('retry-after', retryAfter);
    return reply.code(mapped.status).type('application/json').send(mapped.body);
  });

  app.setNotFoundHandler(async (req, reply) => {
    ctx.metrics.errors.inc({ code: 'not_found' });
    return reply.code(404).send({ error: { code: 'not_found', message: `no route ${req.method} ${req.url.split('?')[0]}` } });
  });

  // --- public
  const r = app.withTypeProvider<ZodTypeProvider>();
  r.get(
    '/healthz',
    {
      config: { auth: 'public' },
      schema: { summary: 'The process is alive (no auth)', tags: ['health'], response: { 200: z.object({ ok: z.literal(true) }) } },
    },
    async () => ({ ok: true as const }),
  );
  const poolsReady = z.array(z.object({ name: z.string(), connected: z.boolean() }));
  r.get(
    '/readyz',
    {
      config: { auth: 'public' },
      schema: {
        summary: 'Every pool answered its last check (no auth)',
        tags: ['health'],
        response: replies({ 200: z.object({ ready: z.literal(true), pools: poolsReady }) }, [503]),
      },
    },
    async (_req, reply) => {
      const pools = (await ctx.manager.pools()).map((p) => ({ name: p.name, connected: p.connected }));
      const ready = !ctx.shuttingDown() && pools.length > 0 && pools.every((p) => p.connected);
      if (ready) return { ready: true as const, pools };
      return reply
        .code(503)
        .send({ error: { code: 'not_available', message: ctx.shuttingDown() ? 'shutting down' : 'a pool did not answer its last check', details: { pools } } });
    },
  );
  r.get(
    '/metrics',
    {
      config: { auth: 'public' },
      schema: {
        summary: 'Prometheus metrics (no auth)',
        tags: ['health'],
        response: { 200: { description: 'the Prometheus text format', content: { 'text/plain': { schema: z.string() } } } },
      },
    },
    async (_req, reply) => {
      return reply.type(ctx.metrics.registry.contentType).send(await ctx.metrics.registry.metrics());
    },
  );
  app.get('/openapi.json', { config: { auth: 'public' }, schema: { hide: true } }, async () => app.swagger());

  boxRoutes(app, ctx);
  wsExecRoutes(app, ctx);
  workspaceRoutes(app, ctx);
  snapshotRoutes(app, ctx);
  boxFileRoutes(app, ctx);
  adminRoutes(app, ctx);
  imageRoutes(app, ctx);
  nodeRoutes(app, ctx);
  whoamiRoutes(app);
  sessionRoutes(app);
  consoleRoutes(app);
  metricsHistoryRoutes(app, ctx);
  boxStatsRoutes(app, ctx);
  proxyRoutes(app, ctx);
  vncRoutes(app, opts.vnc ?? boxVncDeps(ctx));
  for (const plugin of opts.plugins ?? []) await plugin(app, ctx);
  return app;
}

/** The answer to a request node's HTTP parser refused (fastify's clientErrorHandler), in sbx's error body. */
export function answerClientError(err: Error & { code?: string }, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, code, message, field] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'invalid_argument', 'the request line and headers are larger than the server accepts (16 KiB): a shorter path or query', 'headers']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'timeout', 'the request did not arrive in time', 'request']
        : [400, 'invalid_argument', `malformed HTTP request (${err.code ?? 'parse error'})`, 'request'];
  const body = JSON.stringify({ error: { code, message, details: { field } } });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  }
  socket.destroy(err);
}

/** The VNC routes on the real boxes: the proxy's port authorization, the box's dial (in use while open). */
function boxVncDeps(ctx: ServerContext): VncDeps {
  return {
    authorize: async (req, id, port) => {
      const grant = await authorizePortRequest(req, id, port);
      const boxId = grant.box.id;
      // A plugin's gate (a header, or a box made public) is no cookie a page of another origin could ride.
      const via = grant.via === 'gate' ? 'key' : grant.via;
      return grant.expiresAt !== undefined ? { boxId, via, expiresAt: grant.expiresAt } : { boxId, via };
    },
    dial: async (id, port) => (await ctx.manager.get(id)).dial(port),
    hasVnc: async (id) => (await (await ctx.manager.get(id)).info()).vnc,
    publicUrl: () => ctx.publicUrl(),
    streams: ctx.streams,
  };
}
