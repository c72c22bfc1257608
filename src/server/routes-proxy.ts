/**
 * The authenticated port proxy: `/v1/boxes/:id/ports/:port/<path>` (and, with a proxy domain,
 * any path on the host `<port>-<id>.<domain>`) reaches that port of that box only, through
 * LocalBox.dial — never a host port, never another box. Bodies stream both ways (nothing is
 * buffered, SSE arrives per event); a WebSocket (any Upgrade) is the upgrade request forwarded
 * on the dialed socket and then the two sockets piped, so frames pass unchanged. The proxied
 * request loses the sbx credentials (Authorization, the sbx_token cookie and query) and gains
 * X-Forwarded-For/Proto/Host. With the cookie as its credential, a WebSocket or a request with
 * side effects comes only from the page's own origin (requireOwnOrigin: no CSRF from other boxes).
 */
import { request as httpRequest } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SbxError } from '../errors.js';
import type { LocalBox } from '../sandbox/box.js';
import { CONSOLE_TOKEN_COOKIE, SESSION_COOKIE, SESSION_HEADER } from './sessions.js';
import { BOX_ID_PATTERN } from '../sandbox/create-options.js';
import type { ServerContext } from './context.js';
import { mapError } from './errors.js';
import {
  PORT_TOKEN_COOKIE,
  PORT_TOKEN_QUERY,
  authorizePortRequest,
  cookieWithout,
  isHttps,
  requireOwnOrigin,
  swapTokenForCookie,
  withoutQuery,
} from './port-auth.js';
import { checkPort } from '../runtime/ports.js';
import { PORT_SECURITY } from './openapi.js';
import { binary } from './routes-workspaces.js';
import { COMMON_ERRORS, noContent, replies } from './schemas.js';
import type { z } from 'zod';

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'];
/** Methods without side effects by contract (RFC 9110 safe methods): any page may send them with the cookie. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'trailers', 'upgrade', 'expect']);
const PREFIX = /^\/v1\/boxes\/[^/?]*\/ports\/[^/?]*(\/[^?]*)?(\?.*)?$/;
/** Set by the host-based rewrite: the URL as the client sent it. */
const HOST_BASED = Symbol('sbx.hostBased');

interface HostBased {
  originalUrl: string;
}

/** `<port>-<id>.<domain>` → the proxy path for it, or undefined when the Host is not one of the domain's. */
export function hostBasedTarget(host: string | undefined, domain: string): { port: string; id: string } | undefined {
  if (!host) return undefined;
  const name = host.replace(/:\d+$/, '').toLowerCase();
  const suffix = `.${domain.toLowerCase()}`;
  if (!name.endsWith(suffix)) return undefined;
  const m = /^(\d{1,5})-([a-z0-9][a-z0-9_.-]{0,62})$/.exec(name.slice(0, -suffix.length));
  return m ? { port: m[1]!, id: m[2]! } : undefined;
}

/** fastify's rewriteUrl for host-based routing: requests to `<port>-<id>.<domain>` go to that box's proxy route, path kept. */
export function rewriteHostBased(domain: string | undefined): ((req: IncomingMessage) => string) | undefined {
  if (!domain) return undefined;
  return (req) => {
    const url = req.url ?? '/';
    const target = hostBasedTarget(req.headers.host, domain);
    if (!target) return url;
    (req as IncomingMessage & { [HOST_BASED]?: HostBased })[HOST_BASED] = { originalUrl: url };
    return `/v1/boxes/${target.id}/ports/${target.port}${url.startsWith('/') ? url : `/${url}`}`;
  };
}

function target(req: FastifyRequest): { id: string; port: number } {
  const params = req.params as { id: string; port: string };
  if (!BOX_ID_PATTERN.test(params.id)) throw new SbxError('invalid_argument', 'id: is not a valid box id', { details: { field: 'id', in: 'path' } });
  const port = /^\d{1,5}$/.test(params.port) ? Number(params.port) : NaN;
  checkPort(port);
  return { id: params.id, port };
}

/** The path and query the box's service gets: everything after `/ports/<port>`, without sbx_token. */
function upstreamPath(rawUrl: string): string {
  const m = PREFIX.exec(rawUrl);
  return withoutQuery(`${m?.[1] ?? '/'}${m?.[2] ?? ''}`, PORT_TOKEN_QUERY);
}

/**
 * Response headers a box's service may not send to the browser. On the path-based proxy the box's
 * pages share the origin of the API and the web console, so a header that acts on the whole origin
 * would act on them: `Service-Worker-Allowed` would let a box's worker control the console (the app
 * also refuses every service-worker script request), `Clear-Site-Data` would wipe its storage and
 * cookies.
 */
const BOX_MAY_NOT_SET = new Set(['service-worker-allowed', 'clear-site-data']);

/** sbx's own cookies, which a box's `Set-Cookie` may not replace or shadow. */
const SBX_COOKIES = [PORT_TOKEN_COOKIE, SESSION_COOKIE, CONSOLE_TOKEN_COOKIE];

/** A box's Set-Cookie headers without those naming one of sbx's cookies. */
function boxCookies(list: string[]): string[] {
  return list.filter((c) => !SBX_COOKIES.includes(c.slice(0, c.indexOf('=')).trim()));
}

function forwardHeaders(req: FastifyRequest, keepUpgrade: boolean): OutgoingHttpHeaders {
  const h: IncomingHttpHeaders = req.headers;
  // The plugins' proxy credentials (e2b's traffic token) are the proxy's, like Authorization: the box never sees them.
  const gateHeaders = new Set(req.server.sbxAuth.ctx.portGates?.flatMap((g) => g.headers) ?? []);
  const listed = new Set(
    String(h.connection ?? '')
      .split(',')
      .map((s) => s.trim().toLowerCase())
      .filter(Boolean),
  );
  const out: OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined || k === 'authorization' || k === 'cookie' || k === SESSION_HEADER || k.startsWith('x-forwarded-') || gateHeaders.has(k)) continue;
    if (!keepUpgrade && (HOP_BY_HOP.has(k) || listed.has(k))) continue;
    if (keepUpgrade && (k === 'proxy-authorization' || k === 'expect' || k === 'keep-alive')) continue;
    out[k] = v;
  }
  // The console's session cookie is sbx's, like the port token: a box's service never sees it.
  const cookie = cookieWithout(cookieWithout(h.cookie, PORT_TOKEN_COOKIE), SESSION_COOKIE);
  if (cookie !== undefined) out['cookie'] = cookie;
  const prior = h['x-forwarded-for'];
  out['x-forwarded-for'] = prior ? `${String(prior)}, ${req.ip}` : req.ip;
  out['x-forwarded-proto'] = isHttps(req) ? 'https' : 'http';
  if (h.host) out['x-forwarded-host'] = h.host;
  return out;
}

/** Swaps a `?sbx_token=` for the cookie and sends the browser to the same URL without it. */
function setCookieAndRedirect(req: FastifyRequest, reply: FastifyReply, id: string, port: number, expiresAt: number): FastifyReply {
  const hostBased = (req.raw as IncomingMessage & { [HOST_BASED]?: HostBased })[HOST_BASED];
  return swapTokenForCookie(req, reply, {
    cookiePath: hostBased ? '/' : `/v1/boxes/${id}/ports/${port}/`,
    expiresAt,
    url: hostBased ? hostBased.originalUrl : (req.raw.url ?? '/'),
  });
}

async function authorize(req: FastifyRequest, reply: FastifyReply, ctx: ServerContext): Promise<{ box: LocalBox; port: number } | undefined> {
  const { id, port } = target(req);
  const auth = await authorizePortRequest(req, id, port);
  // A WebSocket, or a request with side effects (CSRF): with the cookie only from the page it belongs to.
  if (req.headers.upgrade || !SAFE_METHODS.has(req.method)) {
    // On a host-based URL only the box's own origin for this port; path-based, the server's own.
    const hostBased = (req.raw as IncomingMessage & { [HOST_BASED]?: HostBased })[HOST_BASED] !== undefined;
    requireOwnOrigin(req, auth.via, hostBased ? undefined : ctx.publicUrl());
  }
  if (auth.via === 'query' && (req.method === 'GET' || req.method === 'HEAD') && !req.headers.upgrade) {
    setCookieAndRedirect(req, reply, id, port, auth.expiresAt!);
    return undefined;
  }
  return { box: auth.box, port };
}

/** Writes an error answer on a response the proxy already took over. */
function sendRawError(raw: ServerResponse, err: unknown): void {
  const mapped = mapError(err);
  if (raw.headersSent) {
    raw.destroy();
    return;
  }
  const body = JSON.stringify(mapped.body);
  raw.writeHead(mapped.status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  raw.end(body);
}

function proxyHttp(ctx: ServerContext, req: FastifyRequest, reply: FastifyReply, box: LocalBox, port: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const controller = new AbortController();
    const onEarlyClose = () => controller.abort();
    reply.raw.once('close', onEarlyClose);
    box.dial(port, { signal: controller.signal }).then(
      (socket: Duplex) => {
        reply.raw.off('close', onEarlyClose);
        (socket as Socket).setNoDelay?.(true);
        if (reply.raw.destroyed) {
          socket.destroy();
          resolve();
          return;
        }
        reply.hijack();
        const headers = forwardHeaders(req, false);
        headers['connection'] = 'close';
        const up = httpRequest({ method: req.method, path: upstreamPath(req.raw.url ?? '/'), headers, createConnection: () => socket as Socket });
        const finish = () => {
          socket.destroy();
          resolve();
        };
        // Graceful shutdown ends a proxied request still open after its grace (a long SSE stream).
        let ended!: () => void;
        const done = new Promise<void>((r) => (ended = r));
        ctx.streams.add({
          done,
          abort: () => {
            up.destroy();
            reply.raw.destroy();
          },
        });
        reply.raw.once('close', () => ended());
        reply.raw.once('close', () => {
          if (!reply.raw.writableFinished) up.destroy();
          finish();
        });
        req.raw.once('aborted', () => up.destroy());
        up.on('error', (err) => {
          if (reply.raw.headersSent) reply.raw.destroy();
          else
            sendRawError(
              reply.raw,
              new SbxError('not_available', `the service on port ${port} of box '${box.id}' closed the connection: ${err.message}`, {
                cause: err,
                details: { id: box.id, port, reason: 'port_not_listening' },
              }),
            );
          finish();
        });
        up.on('response', (res) => {
          const out: OutgoingHttpHeaders = {};
          for (const [k, v] of Object.entries(res.headers)) {
            if (v === undefined || HOP_BY_HOP.has(k) || k === 'transfer-encoding' || BOX_MAY_NOT_SET.has(k)) continue;
            out[k] = k === 'set-cookie' ? boxCookies(v as string[]) : v;
          }
          reply.raw.writeHead(res.statusCode ?? 502, res.statusMessage, out);
          reply.raw.flushHeaders();
          res.on('data', (chunk: Buffer) => {
            if (!reply.raw.write(chunk)) {
              res.pause();
              reply.raw.once('drain', () => res.resume());
            }
          });
          res.once('end', () => reply.raw.end());
          res.once('error', () => reply.raw.destroy());
          res.once('aborted', () => reply.raw.destroy());
        });
        ctx.log.info({ reqId: req.id, box: box.id, port, method: req.method }, 'proxy');
        req.raw.pipe(up);
      },
      (err: unknown) => {
        reply.raw.off('close', onEarlyClose);
        if (!reply.sent) void reply.send(err instanceof Error ? err : new Error(String(err)));
        resolve();
      },
    );
  });
}

/** The upgrade request forwarded on a dialed socket, then both sockets piped (frames unchanged). */
async function proxyUpgrade(ctx: ServerContext, req: FastifyRequest, reply: FastifyReply, box: LocalBox, port: number): Promise<void> {
  const upstream = await box.dial(port);
  (upstream as Socket).setNoDelay?.(true);
  reply.hijack();
  const client = reply.raw.socket as Socket | null;
  // The client left during the dial (a box waking up): its 'close' is past, and the stream to
  // the box, with the box's hold, would be left open for good.
  if (!client || client.destroyed) {
    upstream.destroy();
    return;
  }
  reply.raw.detachSocket(client);
  const headSym = Object.getOwnPropertySymbols(req.raw).find((s) => s.description === 'ws-head');
  const head = headSym ? ((req.raw as unknown as Record<symbol, Buffer | undefined>)[headSym] ?? Buffer.alloc(0)) : Buffer.alloc(0);
  const headers = forwardHeaders(req, true);
  let text = `${req.method} ${upstreamPath(req.raw.url ?? '/')} HTTP/1.1\r\n`;
  for (const [k, v] of Object.entries(headers)) for (const one of Array.isArray(v) ? v : [v]) text += `${k}: ${String(one)}\r\n`;
  upstream.write(`${text}\r\n`);
  if (head.length) upstream.write(head);
  client.setNoDelay(true);
  client.setTimeout(0);
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));
  const end = () => {
    client.destroy();
    upstream.destroy();
    resolveDone();
  };
  ctx.streams.add({ done, abort: end });
  ctx.metrics.openStreams.inc({ transport: 'proxy' });
  void done.then(() => ctx.metrics.openStreams.dec({ transport: 'proxy' }));
  client.on('error', end);
  upstream.on('error', end);
  client.once('close', end);
  upstream.once('close', end);
  upstream.pipe(client);
  client.pipe(upstream);
  ctx.log.info({ reqId: req.id, box: box.id, port, upgrade: req.headers.upgrade }, 'proxy upgrade');
}

export function proxyRoutes(app: FastifyInstance, ctx: ServerContext): void {
  void app.register(async (scope) => {
    // Bodies stay unread: the proxy streams them to the box.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));
    scope.route({
      method: METHODS,
      url: '/v1/boxes/:id/ports/:port',
      config: { auth: 'box' },
      schema: { hide: true },
      handler: async (req, reply) => {
        target(req);
        const url = req.raw.url ?? '/';
        const q = url.indexOf('?');
        return reply
          .code(308)
          .header('location', q === -1 ? `${url}/` : `${url.slice(0, q)}/${url.slice(q)}`)
          .send();
      },
    });
    scope.route({
      method: METHODS,
      url: '/v1/boxes/:id/ports/:port/*',
      config: { auth: 'box' },
      schema: {
        summary: "Proxy to a port of a box (HTTP, SSE, WebSocket); the owner's key or a port access token (?sbx_token=, then a cookie)",
        tags: ['proxy'],
        security: PORT_SECURITY,
        response: replies(
          {
            default: { description: 'what the service on the port answers, passed through', content: { '*/*': { schema: binary } } } as unknown as z.ZodType,
            303: noContent('a ?sbx_token= on a GET swapped for the cookie: the same URL without it'),
          } as Record<number, z.ZodType>,
          [...COMMON_ERRORS, 504],
        ),
      },
      preHandler: async (req, reply) => {
        if (!(req as FastifyRequest & { ws?: boolean }).ws) return;
        // An Upgrade request: fastify-websocket would complete the handshake itself; take it first.
        const ok = await authorize(req, reply, ctx);
        if (!ok) return;
        await proxyUpgrade(ctx, req, reply, ok.box, ok.port);
      },
      handler: async (req, reply) => {
        const ok = await authorize(req, reply, ctx);
        if (!ok) return reply;
        await proxyHttp(ctx, req, reply, ok.box, ok.port);
        return reply;
      },
    });
  });
}
