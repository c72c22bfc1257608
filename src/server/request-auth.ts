/**
 * The app's one way to read and check a request's credential: the onRequest hook for routes of
 * `auth: 'key'`, and the routes of `auth: 'box'` that also take a key (the port proxy, the
 * heartbeat). Every failure counts toward the address's failure limit and the auth metric.
 */
import type { FastifyRequest } from 'fastify';
import { SbxError } from '../errors.js';
import { authenticate, bearerFromProtocols } from './auth.js';
import type { Caller, FailureLimiter } from './auth.js';
import type { ServerContext } from './context.js';
import { cookieValues } from './port-auth.js';
import { SESSION_COOKIE, SESSION_HEADER, WS_SESSION_PREFIX } from './sessions.js';
import type { SessionStore } from './sessions.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** What authenticateRequest needs (decorated by buildApp). */
    sbxAuth: { ctx: ServerContext; limiter: FailureLimiter; sessions: SessionStore };
  }
}

/**
 * `Bearer <credential>` from `X-API-KEY` (what the e2b SDK sends: an explicit key wins over an
 * Authorization a proxy or another SDK setting may carry), else `Authorization`, else on a
 * WebSocket upgrade the `sbx.bearer.<credential>` subprotocol (browsers cannot set headers).
 */
export function credentialOf(req: FastifyRequest): string | undefined {
  const apiKey = req.headers['x-api-key'];
  if (typeof apiKey === 'string') return `Bearer ${apiKey}`;
  if (req.headers.authorization !== undefined) return req.headers.authorization;
  if (req.headers.upgrade?.toLowerCase() === 'websocket') return bearerFromProtocols(req.headers['sec-websocket-protocol']);
  return undefined;
}

/**
 * The caller behind the request's credential (an API key or a box token), by default where
 * credentialOf finds it, else a console session (sessions.ts); unauthorized or limit_exceeded.
 */
export async function authenticateRequest(req: FastifyRequest, header = credentialOf(req)): Promise<Caller> {
  const { ctx, limiter } = req.server.sbxAuth;
  try {
    const cookies = header === undefined ? cookieValues(req.headers.cookie, SESSION_COOKIE) : [];
    if (cookies.length > 0) return await limiter.guard(req.ip, () => sessionCaller(req, cookies));
    return await authenticate(header, req.ip, { keys: ctx.keys, verifyBoxToken: (t) => ctx.manager.secrets.verifyBoxToken(t), limiter });
  } catch (err) {
    ctx.metrics.authFailures.inc();
    throw err;
  }
}

/** The session token a console request carries: X-SBX-Session, or on a WebSocket the `sbx.session.<token>` subprotocol. */
export function sessionTokenOf(req: FastifyRequest): string | undefined {
  const header = req.headers[SESSION_HEADER];
  if (typeof header === 'string') return header;
  if (req.headers.upgrade?.toLowerCase() !== 'websocket') return undefined;
  const offered = String(req.headers['sec-websocket-protocol'] ?? '')
    .split(',')
    .map((p) => p.trim())
    .find((p) => p.startsWith(WS_SESSION_PREFIX));
  return offered?.slice(WS_SESSION_PREFIX.length);
}

/**
 * The key behind a console session: its cookie and its token (sessions.ts), and, when the browser
 * names the page that made the request (Origin), a page of this server. The token alone already
 * keeps other pages out; the Origin check refuses them before the token is even looked at.
 */
function sessionCaller(req: FastifyRequest, cookies: string[]): Caller {
  const { sessions, ctx } = req.server.sbxAuth;
  const origin = req.headers.origin;
  if (origin !== undefined && !ownOrigin(origin, req.headers.host, ctx.publicUrl())) {
    throw new SbxError('forbidden', `a console session is accepted from this server's own pages only, not from Origin ${origin}`, { details: { origin } });
  }
  // Every value: a page of this origin (a box's, through the path-based proxy) can add a cookie of
  // the same name for a longer path, which the browser sends first; it must not shadow the real one.
  const token = sessionTokenOf(req);
  const found = cookies.slice(0, 8).reduce<ReturnType<typeof sessions.verify>>((hit, c) => hit ?? sessions.verify(c, token), undefined);
  if (!found)
    throw new SbxError('unauthorized', 'the console session is over or not valid (signed out, expired, its key revoked, or no X-SBX-Session): sign in again');
  return found.principal;
}

/** Whether Origin `origin` is a page of this server: the request's own Host, or the public URL's origin. */
export function ownOrigin(origin: string, host: string | undefined, publicUrl: string): boolean {
  let from: URL;
  try {
    from = new URL(origin);
  } catch {
    return false; // `null` (a sandboxed frame, a file) or garbage
  }
  if (from.host !== '' && from.host === host?.toLowerCase()) return true;
  return publicUrl !== '' && from.origin === new URL(publicUrl).origin;
}
