/**
 * Console sessions: an API key typed into the web console once, exchanged for a session the page
 * can use without keeping the key. A session has two halves, and a request needs both:
 *
 * - the `sbx_session` cookie (HttpOnly, SameSite=Strict, Path=/v1): no script can read it, and
 *   no page of another site makes the browser send it;
 * - its `sessionToken`, which sign-in sets as the `sbx_console` cookie for the console's own path
 *   (`/console/`, readable by the console's scripts, SameSite=Strict) and the page sends as
 *   `X-SBX-Session` (a WebSocket: the `sbx.session.<token>` subprotocol) with every request, reads
 *   included.
 *
 * The second half is what a cookie alone cannot give: a box's web service reached through the
 * path-based port proxy is served from this very origin, so its scripts make requests the browser
 * sends the cookie with, SameSite or not. They never see the token: a document reads only the
 * cookies of its own path (a box page lives under /v1/boxes/…), and the console's page, which can,
 * cannot be framed (frame-ancestors 'none'), keeps its own browsing context group
 * (Cross-Origin-Opener-Policy: same-origin) and opens box pages without an opener; no service
 * worker can be registered on the origin (app.ts refuses its script). Requiring the token on every
 * request is also the CSRF defence: a form or a request from another page has no token.
 *
 * A session speaks for the key it was opened with and ends with it (revoking the key ends every
 * session of it), at sign-out, after its lifetime, or when the server restarts (kept in memory:
 * signing in again is cheap, and no session secret is ever written to disk).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { KeyStore, Principal } from './keys.js';

export const SESSION_COOKIE = 'sbx_session';
/** The session token's cookie, for the console's path only (its scripts read it; a box page cannot). */
export const CONSOLE_TOKEN_COOKIE = 'sbx_console';
/** Where the console's page lives: the token cookie's path. */
export const CONSOLE_PATH = '/console/';
export const SESSION_HEADER = 'x-sbx-session';
/** The WebSocket spelling of the session token (browsers cannot set headers on one), beside `sbx.v1`. */
export const WS_SESSION_PREFIX = 'sbx.session.';
/** How long a session lasts from sign-in; the page signs in again after. */
export const SESSION_LIFETIME_MS = 12 * 60 * 60 * 1000;
/** Sessions kept at once; the oldest is ended past it (every sign-in makes one). */
const MAX_SESSIONS = 10_000;
/** Sessions of one key at once: one key signing in over and over ends its own oldest, never others'. */
export const MAX_SESSIONS_PER_KEY = 32;

interface Session {
  keyId: string;
  /** SHA-256 of the session token (the cookie's value is the map's key, also hashed). */
  tokenHash: Buffer;
  expiresAt: number;
}

export interface OpenedSession {
  /** The cookie's value. */
  cookie: string;
  /** The page's half, sent as X-SBX-Session. */
  sessionToken: string;
  expiresAt: number;
}

function sha256(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** A random 256-bit secret, in characters a cookie, a header and a WebSocket subprotocol all take. */
function secret(): string {
  return randomBytes(32).toString('base64url');
}

export class SessionStore {
  /** By SHA-256 (hex) of the cookie: what is kept in memory opens nothing by itself. */
  private readonly sessions = new Map<string, Session>();

  constructor(
    private readonly keys: Pick<KeyStore, 'principal'>,
    private readonly lifetimeMs = SESSION_LIFETIME_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** A new session for a key that was just verified. */
  open(principal: Principal): OpenedSession {
    this.sweep();
    const mine = [...this.sessions].filter(([, s]) => s.keyId === principal.keyId);
    for (const [id] of mine.slice(0, Math.max(0, mine.length - MAX_SESSIONS_PER_KEY + 1))) this.sessions.delete(id);
    const cookie = secret();
    const sessionToken = secret();
    const expiresAt = this.now() + this.lifetimeMs;
    this.sessions.set(sha256(cookie).toString('hex'), { keyId: principal.keyId, tokenHash: sha256(sessionToken), expiresAt });
    while (this.sessions.size > MAX_SESSIONS) this.sessions.delete(this.sessions.keys().next().value!);
    return { cookie, sessionToken, expiresAt };
  }

  /**
   * The key a cookie and token speak for now; undefined when the session is unknown, over, its
   * token wrong, or its key revoked (then it is ended too).
   */
  verify(cookie: string, sessionToken: string | undefined): { principal: Principal; expiresAt: number } | undefined {
    const id = sha256(cookie).toString('hex');
    const session = this.sessions.get(id);
    if (!session) return undefined;
    if (session.expiresAt <= this.now()) {
      this.sessions.delete(id);
      return undefined;
    }
    if (sessionToken === undefined || !timingSafeEqual(sha256(sessionToken), session.tokenHash)) return undefined;
    const principal = this.keys.principal(session.keyId);
    if (!principal) {
      this.sessions.delete(id);
      return undefined;
    }
    return { principal, expiresAt: session.expiresAt };
  }

  /** Ends the session of this cookie (sign-out); nothing when there is none. */
  close(cookie: string): void {
    this.sessions.delete(sha256(cookie).toString('hex'));
  }

  get size(): number {
    return this.sessions.size;
  }

  private sweep(): void {
    const now = this.now();
    for (const [id, s] of this.sessions) if (s.expiresAt <= now) this.sessions.delete(id);
  }
}
