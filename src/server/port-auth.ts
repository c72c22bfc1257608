/**
 * Who may reach a port of a box through the proxy (and VNC): the API key of the box's owner or
 * an admin (Authorization: Bearer), or a signed port access token (src/sandbox/port-tokens.ts)
 * for exactly that box (that box's life: id and nonce) and port, signed for an API key that is
 * still live, given once as `?sbx_token=` and then as the `sbx_token` cookie the proxy sets.
 * Another owner's box answers as a missing one (404). Failed tokens count toward the address's
 * auth-failure limit (FailureLimiter) like failed keys.
 */
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { SbxError } from '../errors.js';
import type { LocalBox } from '../sandbox/box.js';
import { mayAccess, requireKey } from './auth.js';
import { authenticateRequest } from './request-auth.js';
import { boxFor } from './context.js';

export const PORT_TOKEN_QUERY = 'sbx_token';
export const PORT_TOKEN_COOKIE = 'sbx_token';

export interface PortAuthorization {
  box: LocalBox;
  /**
   * Where the credential came from: a token in the query is swapped for a cookie by the proxy;
   * `gate`: a plugin's PortGate let it through (a header of its own, or a box it made public).
   */
  via: 'key' | 'query' | 'cookie' | 'gate';
  /** With a token: when it expires (epoch ms). */
  expiresAt?: number;
}

/** The values of one query parameter in a raw URL (`?a=1&sbx_token=…`). */
export function queryValues(url: string, name: string): string[] {
  const q = url.indexOf('?');
  if (q === -1) return [];
  const out: string[] = [];
  for (const part of url.slice(q + 1).split('&')) {
    const eq = part.indexOf('=');
    const k = eq === -1 ? part : part.slice(0, eq);
    if (k !== name) continue;
    try {
      out.push(decodeURIComponent(eq === -1 ? '' : part.slice(eq + 1)));
    } catch {
      out.push('');
    }
  }
  return out;
}

/** The raw URL without the given query parameter (the rest kept byte for byte, in order). */
export function withoutQuery(url: string, name: string): string {
  const q = url.indexOf('?');
  if (q === -1) return url;
  const kept = url
    .slice(q + 1)
    .split('&')
    .filter((part) => part !== '' && (part.indexOf('=') === -1 ? part : part.slice(0, part.indexOf('='))) !== name);
  return kept.length ? `${url.slice(0, q)}?${kept.join('&')}` : url.slice(0, q);
}

/** The values of cookie `name` in a Cookie header. */
export function cookieValues(header: string | undefined, name: string): string[] {
  if (!header) return [];
  return header
    .split(';')
    .map((c) => c.trim())
    .filter((c) => c.startsWith(`${name}=`))
    .map((c) => c.slice(name.length + 1));
}

/** The Cookie header without cookie `name`; undefined when nothing is left. */
export function cookieWithout(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  const kept = header
    .split(';')
    .map((c) => c.trim())
    .filter((c) => c !== '' && !c.startsWith(`${name}=`));
  return kept.length ? kept.join('; ') : undefined;
}

export function isHttps(req: FastifyRequest): boolean {
  return (req.raw.socket as Socket & { encrypted?: boolean }).encrypted === true;
}

/**
 * Answers a GET that brought its token as `?sbx_token=`: the token becomes an HttpOnly cookie
 * scoped to `cookiePath` for the token's remaining life, and a 303 sends the browser to `url`
 * without it, so the token leaves the address bar (and the history).
 */
export function swapTokenForCookie(req: FastifyRequest, reply: FastifyReply, opts: { cookiePath: string; expiresAt: number; url: string }): FastifyReply {
  const token = queryValues(req.raw.url ?? '', PORT_TOKEN_QUERY)[0] ?? '';
  const maxAge = Math.max(0, Math.floor((opts.expiresAt - Date.now()) / 1000));
  const cookie = [
    `${PORT_TOKEN_COOKIE}=${token}`,
    `Path=${opts.cookiePath}`,
    `Max-Age=${maxAge}`,
    'HttpOnly',
    'SameSite=Lax',
    ...(isHttps(req) ? ['Secure'] : []),
  ];
  return reply
    .code(303)
    .header('set-cookie', cookie.join('; '))
    .header('cache-control', 'no-store')
    .header('location', withoutQuery(opts.url, PORT_TOKEN_QUERY))
    .send();
}

/** authorizePort, also saying where the credential came from. */
export async function authorizePortRequest(request: FastifyRequest, boxId: string, port: number): Promise<PortAuthorization> {
  const { ctx, limiter } = request.server.sbxAuth;
  const authorization = request.headers.authorization;
  // Only Authorization: an X-API-KEY or a subprotocol here may be the box service's own.
  if (authorization !== undefined) {
    const caller = await authenticateRequest(request, authorization);
    request.caller = caller;
    requireKey(caller);
    return { box: await boxFor(ctx, caller, boxId), via: 'key' };
  }
  for (const gate of ctx.portGates ?? []) {
    const box = await gate.authorize(request, boxId, port);
    if (box) return { box, via: 'gate' };
  }
  const fromQuery = queryValues(request.raw.url ?? '', PORT_TOKEN_QUERY);
  const fromCookie = cookieValues(request.headers.cookie, PORT_TOKEN_COOKIE);
  const token = fromQuery[0] ?? fromCookie[0];
  if (token === undefined) {
    ctx.metrics.authFailures.inc();
    const missing = new SbxError('unauthorized', `missing credentials: Authorization: Bearer <key>, ?${PORT_TOKEN_QUERY}= or the ${PORT_TOKEN_COOKIE} cookie`);
    // Counted like every entry point counts a missing credential (API, envd, e2b, gRPC): one rule.
    limiter.failed(request.ip, missing);
    throw missing;
  }
  try {
    return await limiter.guard(request.ip, async () => {
      // Signed for this box's life (its nonce), not just its id: a removed box's URL opens nothing.
      const grant = await ctx.manager.secrets.verifyPortToken(token, { boxId, port });
      const box = await ctx.manager.get(boxId).catch((err: unknown) => {
        if (err instanceof SbxError && err.code === 'not_found')
          throw new SbxError('unauthorized', 'this port access token is for a box that was removed; ask for a new URL');
        throw err;
      });
      // A URL signed for a key lives only as long as that key does (and that key may still see the box).
      if (grant.keyId !== '') {
        const signer = ctx.keys.principal(grant.keyId);
        if (!signer || !mayAccess(signer, box.owner)) {
          throw new SbxError('unauthorized', 'the API key this URL was signed for has been revoked; ask for a new URL with a live key');
        }
      }
      return { box, via: fromQuery[0] !== undefined ? 'query' : 'cookie', expiresAt: grant.expiresAt } satisfies PortAuthorization;
    });
  } catch (err) {
    ctx.metrics.authFailures.inc();
    throw err;
  }
}

/**
 * Refuses (403 forbidden) a request authenticated by the `sbx_token` cookie that a page of
 * another origin made: callers apply it to WebSocket upgrades and to requests with side effects
 * (POST, PUT, PATCH, DELETE). A browser sends the cookie with such a request from any page of the
 * same site, and with a proxy domain every box host is same-site with the API and with every
 * other box host, so SameSite=Lax does not stop a page of `3000-attacker.<domain>` from opening
 * the victim's VNC socket or posting a form to the victim's service. Allowed: an Origin whose host
 * is the request's Host (the page the cookie belongs to: the API's own pages, or on a host-based
 * proxy URL the box's own origin for that port), and, when given, `publicUrl`'s origin; without
 * Origin, a request whose Sec-Fetch-Site is not `cross-site` or `same-site` (no browser, or a
 * browser that says it came from the same origin). Requests authenticated by an API key or by
 * `?sbx_token=` in the URL are not checked: neither is sent by a browser on its own, so another
 * page cannot ride them.
 */
export function requireOwnOrigin(request: FastifyRequest, via: PortAuthorization['via'], publicUrl?: string): void {
  if (via !== 'cookie') return;
  const origin = request.headers.origin;
  if (origin === undefined) {
    const site = request.headers['sec-fetch-site'];
    if (site !== 'cross-site' && site !== 'same-site') return;
  } else {
    let from: URL | undefined;
    try {
      from = new URL(origin);
    } catch {
      from = undefined; // `null` (a sandboxed frame, a file) or garbage: no page of ours
    }
    if (
      from &&
      from.host !== '' &&
      (from.host === request.headers.host?.toLowerCase() || (publicUrl !== undefined && from.origin === new URL(publicUrl).origin))
    )
      return;
  }
  const what = request.headers.upgrade ? 'a WebSocket' : `a ${request.method}`;
  const seen = origin === undefined ? `Sec-Fetch-Site ${String(request.headers['sec-fetch-site'])}` : `Origin ${origin}`;
  throw new SbxError(
    'forbidden',
    `${what} with the ${PORT_TOKEN_COOKIE} cookie is accepted from the page's own origin only (Origin with this request's Host, or this server's), not from ${seen}`,
    { details: origin === undefined ? { secFetchSite: request.headers['sec-fetch-site'] } : { origin } },
  );
}

/**
 * The box whose `port` this request may reach, or unauthorized (no or bad credentials, expired
 * token), forbidden (a box token, or a token for another box or port), not_found (no such box,
 * or another owner's).
 */
export async function authorizePort(request: FastifyRequest, boxId: string, port: number): Promise<LocalBox> {
  return (await authorizePortRequest(request, boxId, port)).box;
}
