/**
 * The console's one way to the HTTP API (docs/api.md): JSON in and out, the session token on every
 * request (src/server/sessions.ts), the API's error body as an ApiError. The API key itself is never
 * kept: sign-in sends it once; the server answers with the session's cookies, of which this page
 * reads one, the token, set for the console's own path (a box's page on this origin cannot read it).
 */
export interface Whoami {
  keyId: string;
  name: string;
  role: 'admin' | 'user';
  owner: string;
  admin: boolean;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

const TOKEN_COOKIE = 'sbx_console';
export const SESSION_HEADER = 'X-SBX-Session';

/** The session token: the `sbx_console` cookie of this page's path (the first: the most specific path). */
export function sessionToken(): string | null {
  for (const part of document.cookie.split(';')) {
    const [name, value] = part.trim().split('=', 2);
    if (name === TOKEN_COOKIE && value) return value;
  }
  return null;
}

/** Called when the API says the session is over (401): the app shows the sign-in page. */
let onSignedOut: () => void = () => undefined;
export function whenSignedOut(cb: () => void): void {
  onSignedOut = cb;
}

function forget(): void {
  document.cookie = `${TOKEN_COOKIE}=; Max-Age=0; Path=${location.pathname.replace(/[^/]*$/, '')}; SameSite=Strict`;
}

async function errorOf(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => '');
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string; details?: Record<string, unknown> } };
    if (body.error?.message) return new ApiError(res.status, body.error.code ?? 'internal', body.error.message, body.error.details);
  } catch {
    // not JSON: a proxy's page, say
  }
  return new ApiError(res.status, 'internal', `HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`);
}

export interface RequestOptions {
  method?: string;
  /** Sent as JSON. */
  json?: unknown;
  /** Sent as is (a file's bytes). */
  body?: BodyInit;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/** A request under the session; the Response of a 2xx, else the API's error as an ApiError. */
export async function request(path: string, opts: RequestOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { ...opts.headers };
  const token = sessionToken();
  if (token) headers[SESSION_HEADER] = token;
  let body = opts.body;
  if (opts.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.json);
  }
  const res = await fetch(path, { method: opts.method ?? 'GET', headers, body: body ?? null, signal: opts.signal ?? null, credentials: 'same-origin' });
  if (res.ok) return res;
  const err = await errorOf(res);
  if (res.status === 401 && token) {
    forget();
    onSignedOut();
  }
  throw err;
}

/** A JSON request under the session; its parsed answer (undefined for 204). */
export async function api<T>(path: string, opts: RequestOptions = {}): Promise<T> {
  const res = await request(path, opts);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

export async function signIn(apiKey: string): Promise<Whoami> {
  const res = await fetch('/v1/session', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ apiKey }),
    credentials: 'same-origin',
  });
  if (!res.ok) throw await errorOf(res);
  // The token arrives as the sbx_console cookie of this page's path (sessionToken() reads it).
  return ((await res.json()) as { whoami: Whoami }).whoami;
}

export async function signOut(): Promise<void> {
  try {
    await request('/v1/session', { method: 'DELETE' });
  } finally {
    forget();
    onSignedOut();
  }
}

/** Who this session is, or undefined when there is none (no token in this tab, or the server ended it). */
export async function currentUser(): Promise<Whoami | undefined> {
  if (!sessionToken()) return undefined;
  try {
    return await api<Whoami>('/v1/whoami');
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return undefined;
    throw err;
  }
}

/** The WebSocket URL of an API path, and the subprotocols that carry the session (browsers cannot set headers on one). */
export function webSocketOf(path: string): { url: string; protocols: string[] } {
  const url = new URL(path, location.href);
  url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return { url: url.href, protocols: ['sbx.v1', `sbx.session.${sessionToken() ?? ''}`] };
}

/** `encodeURIComponent` for each segment of a path, keeping its slashes. */
export function encodePath(path: string): string {
  return path
    .split('/')
    .map((s) => encodeURIComponent(s))
    .join('/');
}
