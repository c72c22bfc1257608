/**
 * Who is calling: an API key (admin or user, acting as an owner) or a box token (speaking for
 * one box, accepted on that box's heartbeat route only). Failed attempts are rate-limited per
 * client address (FailureLimiter); valid credentials never are.
 */
import { SbxError } from '../errors.js';
import type { KeyStore, Principal } from './keys.js';

export interface BoxPrincipal {
  kind: 'box';
  boxId: string;
}

export type Caller = Principal | BoxPrincipal;

export const BOX_TOKEN_PREFIX = 'sbxb1.';

/**
 * Browsers cannot set headers on a WebSocket, so the WebSocket exec also takes the credential
 * as an offered subprotocol, `sbx.bearer.<key or box token>`, beside `sbx.v1`, the one the
 * server selects (it never selects, and so never echoes, the credential). Not a `?token=`
 * query: URLs end up in proxy logs and browser history. Keys and box tokens are made only of
 * characters a subprotocol may hold.
 */
export const WS_PROTOCOL = 'sbx.v1';
export const WS_BEARER_PREFIX = 'sbx.bearer.';

/** `Bearer <credential>` from a Sec-WebSocket-Protocol header, or undefined when none is offered. */
export function bearerFromProtocols(header: string | string[] | undefined): string | undefined {
  const list = (Array.isArray(header) ? header.join(',') : (header ?? '')).split(',').map((p) => p.trim());
  const offered = list.find((p) => p.startsWith(WS_BEARER_PREFIX) && p.length > WS_BEARER_PREFIX.length);
  return offered ? `Bearer ${offered.slice(WS_BEARER_PREFIX.length)}` : undefined;
}

export interface AuthDeps {
  keys: KeyStore;
  verifyBoxToken(token: string): Promise<string>;
  limiter: FailureLimiter;
}

/**
 * Reads `Authorization: Bearer …` and resolves the caller; throws unauthorized, or limit_exceeded
 * for a failing attempt from an address over the failure limit (a valid credential always passes).
 */
export async function authenticate(header: string | undefined, address: string, deps: AuthDeps): Promise<Caller> {
  return deps.limiter.guard(address, async () => {
    const m = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    if (!m)
      throw new SbxError(
        'unauthorized',
        header ? 'Authorization must be "Bearer <key>"' : 'missing credentials: Authorization: Bearer <key> (or X-API-KEY: <key>)',
      );
    const credential = m[1]!;
    if (credential.startsWith(BOX_TOKEN_PREFIX)) return { kind: 'box', boxId: await verifyBox(credential, deps.verifyBoxToken) };
    const principal = deps.keys.verify(credential);
    if (!principal) throw new SbxError('unauthorized', 'API key is not valid (unknown, revoked or mistyped)');
    return principal;
  });
}

/** The box a box token speaks for; any failure to verify it is unauthorized. */
async function verifyBox(token: string, verifyBoxToken: AuthDeps['verifyBoxToken']): Promise<string> {
  try {
    return await verifyBoxToken(token);
  } catch (err) {
    if (err instanceof SbxError && err.code === 'unauthorized') throw err;
    throw new SbxError('unauthorized', 'box token rejected', { cause: err });
  }
}

/**
 * `Bearer <box token>` (the gRPC heartbeat, which takes nothing else) → the box it speaks for;
 * unauthorized, or limit_exceeded like authenticate(), through the same limiter.
 */
export async function authenticateBox(header: string | undefined, address: string, deps: Pick<AuthDeps, 'verifyBoxToken' | 'limiter'>): Promise<string> {
  return deps.limiter.guard(address, async () => {
    const m = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    if (!m) throw new SbxError('unauthorized', 'missing authorization: Bearer <box token>');
    return verifyBox(m[1]!, deps.verifyBoxToken);
  });
}

/** The API key behind a call; a box token here is forbidden (it may only send heartbeats). */
export function requireKey(caller: Caller | undefined): Principal {
  if (!caller) throw new SbxError('unauthorized', 'missing Authorization: Bearer <key>');
  if (caller.kind === 'box') throw new SbxError('forbidden', 'a box token may only call its own box heartbeat route');
  return caller;
}

export function requireAdmin(caller: Caller | undefined): Principal {
  const p = requireKey(caller);
  if (p.role !== 'admin') throw new SbxError('forbidden', 'this route is for admin keys only');
  return p;
}

/**
 * The owner a call acts as. A user key always acts as its owner; naming another owner is
 * forbidden. An admin may name any owner (or none).
 */
export function actingOwner(p: Principal, requested: string | undefined): string | undefined {
  if (p.role === 'admin') return requested;
  if (requested !== undefined && requested !== p.owner) {
    throw new SbxError('forbidden', `this key acts as owner '${p.owner}' and cannot act as '${requested}'`, { details: { field: 'owner' } });
  }
  return p.owner;
}

/** True when `p` may see something owned by `owner`. */
export function mayAccess(p: Principal, owner: string): boolean {
  return p.role === 'admin' || p.owner === owner;
}

/**
 * Failed authentications per client address in a sliding window, for every credential sbx
 * checks (API keys, box tokens over HTTP and gRPC, port access tokens, envd access tokens),
 * through guard(); serve() makes one for the whole server.
 * A valid credential always passes, from any address: a flood of bad keys from one address
 * (a NAT, a CI runner) must not lock the good key out. A failing attempt from an address with
 * `max` failures in the window is answered limit_exceeded (429, Retry-After) instead of
 * unauthorized, until its failures age out; it still counts, so an address that keeps guessing
 * stays limited.
 */
export class FailureLimiter {
  private readonly failures = new Map<string, number[]>();

  constructor(
    readonly max: number,
    readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  private recent(address: string): number[] {
    const cutoff = this.now() - this.windowMs;
    const list = (this.failures.get(address) ?? []).filter((t) => t > cutoff);
    if (list.length === 0) this.failures.delete(address);
    else this.failures.set(address, list);
    return list;
  }

  /**
   * Runs one authentication attempt for `address`. Its result passes through; an unauthorized
   * failure is counted, and becomes limit_exceeded when the address was already over the limit.
   * Other errors (not_found, forbidden, an engine down) are not authentication failures.
   */
  async guard<T>(address: string, attempt: () => T | Promise<T>): Promise<T> {
    try {
      return await attempt();
    } catch (err) {
      if (err instanceof SbxError && err.code === 'unauthorized') this.failed(address, err);
      throw err;
    }
  }

  /** Whether `address` is over the limit now: a check that is costly (a signed URL's search) is refused before it runs. */
  over(address: string): boolean {
    return this.max > 0 && this.recent(address).length >= this.max;
  }

  /** Counts a failed attempt; throws limit_exceeded (with `cause`) when the address was already over the limit. */
  failed(address: string, cause?: unknown): void {
    if (this.max <= 0) return;
    const list = this.recent(address);
    const over = list.length >= this.max;
    list.push(this.now());
    // Only the latest `max` failures matter: the oldest of them says when the address is let in.
    if (list.length > this.max) list.splice(0, list.length - this.max);
    this.failures.set(address, list);
    if (this.failures.size > 10_000) this.failures.delete(this.failures.keys().next().value!);
    if (over) {
      const retryMs = list[0]! + this.windowMs - this.now();
      throw new SbxError('limit_exceeded', `too many failed authentications from ${address}; retry in ${Math.ceil(retryMs / 1000)} s`, {
        cause,
        details: { limit: 'authFailures', retryAfterMs: retryMs },
      });
    }
  }
}
