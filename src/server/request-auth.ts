/**
 * The app's one way to read and check a request's credential: the onRequest hook for routes of
 * `auth: 'key'`, and the routes of `auth: 'box'` that also take a key (the port proxy, the
 * heartbeat). Every failure counts toward the address's failure limit and the auth metric.
 */
import type { FastifyRequest } from 'fastify';
import { authenticate, bearerFromProtocols } from './auth.js';
import type { Caller, FailureLimiter } from './auth.js';
import type { ServerContext } from './context.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** What authenticateRequest needs (decorated by buildApp). */
    sbxAuth: { ctx: ServerContext; limiter: FailureLimiter };
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
 * credentialOf finds it; unauthorized or limit_exceeded.
 */
export async function authenticateRequest(req: FastifyRequest, header = credentialOf(req)): Promise<Caller> {
  const { ctx, limiter } = req.server.sbxAuth;
  try {
    return await authenticate(header, req.ip, { keys: ctx.keys, verifyBoxToken: (t) => ctx.manager.secrets.verifyBoxToken(t), limiter });
  } catch (err) {
    ctx.metrics.authFailures.inc();
    throw err;
  }
}
