/**
 * The SDK's one HTTP path: every call goes through `Transport.request`, which adds the key,
 * turns error bodies back into SbxError, names the URL when the server cannot be reached, and
 * retries GETs (and only GETs) on connection errors.
 */
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { ERROR_CODES, SbxError, libraryOptionHint, rewordOptionHint } from '../errors.js';
import type { ErrorCode } from '../errors.js';
import { JsonReader } from './json-reader.js';

/** Connection-level failures worth another try: nothing reached the server's handler, or the answer never came. */
const RETRYABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED']);

/** The status an answer without an sbx error body maps to (a proxy's 502, say). */
const CODE_BY_STATUS: Record<number, ErrorCode> = {
  400: 'invalid_argument',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  409: 'conflict',
  413: 'quota_exceeded',
  415: 'invalid_argument',
  429: 'limit_exceeded',
  499: 'cancelled',
  502: 'runtime_unavailable',
  503: 'not_available',
  504: 'timeout',
};

/** Reads an answer's body as it arrives (JsonReader, ExecFramesReader). */
export interface BodyReader {
  write(chunk: Buffer): void;
  /** The value; throws for a malformed body. */
  end(): unknown;
}

export interface TransportOptions {
  url: string;
  apiKey: string | undefined;
  /** Extra tries of a GET after a connection error. */
  retries: number;
  /** First backoff; doubled each try. */
  retryDelayMs: number;
}

export interface RequestOptions {
  /** JSON body. */
  json?: unknown;
  /** Raw body, streamed (file and tar uploads). */
  body?: AsyncIterable<Uint8Array> | Uint8Array;
  query?: Record<string, string | string[] | boolean | undefined>;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export class Transport {
  readonly baseUrl: string;

  constructor(readonly options: TransportOptions) {
    this.baseUrl = options.url.replace(/\/+$/, '');
  }

  url(path: string, query?: RequestOptions['query']): string {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined || v === false) continue;
      for (const item of Array.isArray(v) ? v : [v === true ? 'true' : v]) qs.append(k, item);
    }
    const s = qs.toString();
    return this.baseUrl + path + (s ? `?${s}` : '');
  }

  authHeaders(): Record<string, string> {
    return this.options.apiKey ? { authorization: `Bearer ${this.options.apiKey}` } : {};
  }

  /** Sends one request; an answer of 400 or more becomes the SbxError its body describes. */
  async request(method: string, path: string, opts: RequestOptions = {}): Promise<Response> {
    const target = this.url(path, opts.query);
    const headers: Record<string, string> = { ...this.authHeaders(), ...(opts.headers ?? {}) };
    let body: RequestInit['body'] | undefined;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers['content-type'] = 'application/json';
    } else if (opts.body !== undefined) {
      body = opts.body as RequestInit['body'];
      headers['content-type'] ??= 'application/octet-stream';
    }
    // Only a GET is safe to send twice: a create or an exec that reached the server before the
    // connection broke must not run again.
    const tries = method === 'GET' ? this.options.retries + 1 : 1;
    for (let attempt = 1; ; attempt++) {
      let res: Response;
      try {
        res = await fetch(target, {
          method,
          headers,
          ...(body !== undefined ? { body, duplex: 'half' } : {}),
          ...(opts.signal ? { signal: opts.signal } : {}),
        } as RequestInit);
      } catch (err) {
        if (opts.signal?.aborted) throw abortError(opts.signal, method, path);
        if (attempt < tries && RETRYABLE.has(errCode(err) ?? '')) {
          await sleep(this.options.retryDelayMs * 2 ** (attempt - 1));
          continue;
        }
        throw this.unreachable(err, method, path, attempt);
      }
      if (res.status >= 400) throw await errorFromResponse(res, method, path);
      return res;
    }
  }

  async json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const res = await this.request(method, path, opts);
    if (res.status === 204) return undefined as T;
    try {
      return (await res.json()) as T;
    } catch (err) {
      throw this.readFailed(err, method, path);
    }
  }

  /**
   * A JSON call whose answer may take as long as the work does (a buffered exec). `accept` asks
   * for another form of the answer, read by the reader `readers` names for the type the server
   * answered with (a server that does not know the form answers JSON, read as JSON). fetch gives
   * up on answers whose headers take more than 300 s (undici's headersTimeout) and cannot be
   * told otherwise without undici itself, so this goes through node:http, which waits. Never
   * retried: it is only used for calls that must not run twice.
   */
  async jsonWithoutTimeout<T>(
    method: string,
    path: string,
    opts: { json: unknown; signal?: AbortSignal; accept?: string; readers?: Record<string, () => BodyReader> },
  ): Promise<T> {
    const target = new URL(this.url(path));
    const body = Buffer.from(JSON.stringify(opts.json));
    const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
    // A success is parsed as it arrives (JsonReader): its text can be longer than a string can be.
    const answer = await new Promise<{ status: number; text: string; value?: unknown }>((resolve, reject) => {
      const req = send(
        target,
        {
          method,
          headers: {
            ...this.authHeaders(),
            'content-type': 'application/json',
            'content-length': String(body.length),
            ...(opts.accept ? { accept: opts.accept } : {}),
          },
          ...(opts.signal ? { signal: opts.signal } : {}),
        },
        (res) => {
          const status = res.statusCode ?? 0;
          const type = (res.headers['content-type'] ?? '').split(';')[0]!.trim();
          const reader = status < 400 ? (opts.readers?.[type]?.() ?? new JsonReader()) : undefined;
          const chunks: Buffer[] = [];
          const fail = (err: unknown) => {
            res.destroy();
            reject(this.readFailed(err, method, path));
          };
          res.on('data', (c: Buffer) => {
            if (!reader) return void chunks.push(c);
            try {
              reader.write(c);
            } catch (err) {
              fail(err);
            }
          });
          res.on('end', () => {
            if (!reader) return resolve({ status, text: Buffer.concat(chunks).toString('utf8') });
            try {
              resolve({ status, text: '', value: reader.end() });
            } catch (err) {
              fail(err);
            }
          });
          res.on('error', (err) => reject(opts.signal?.aborted ? abortError(opts.signal, method, path) : this.readFailed(err, method, path)));
        },
      );
      req.on('error', (err) => reject(opts.signal?.aborted ? abortError(opts.signal, method, path) : this.unreachable(err, method, path)));
      req.end(body);
    });
    if (answer.status >= 400) throw errorFromBody(answer.status, answer.text, method, path);
    return answer.value as T;
  }

  unreachable(err: unknown, method: string, path: string, attempts = 1): SbxError {
    const code = errCode(err);
    const why = code ?? (err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err));
    const tried = attempts > 1 ? ` (${attempts} tries)` : '';
    return new SbxError('runtime_unavailable', `cannot reach the sbx server at ${this.baseUrl}${tried}: ${why}; is \`sbx serve\` running there?`, {
      cause: err,
      details: { url: this.baseUrl, method, path, ...(code ? { errno: code } : {}) },
    });
  }

  readFailed(err: unknown, method: string, path: string): SbxError {
    if (err instanceof SbxError) return err;
    return new SbxError('runtime_unavailable', `the answer from ${this.baseUrl} to ${method} ${path} broke off: ${(err as Error).message}`, {
      cause: err,
      details: { url: this.baseUrl, method, path },
    });
  }
}

/** The error an answer describes: the server's own code and details, else one from the status. */
export async function errorFromResponse(res: { status: number; text(): Promise<string> }, method: string, path: string): Promise<SbxError> {
  let text = '';
  try {
    text = await res.text();
  } catch {
    /* the status still says enough */
  }
  return errorFromBody(res.status, text, method, path);
}

export function errorFromBody(status: number, text: string, method: string, path: string, prefixes?: string[]): SbxError {
  const wire = parseErrorBody(text);
  if (wire) return fromWire(wire, prefixes);
  const code = CODE_BY_STATUS[status] ?? (status >= 500 ? 'internal' : 'invalid_argument');
  return new SbxError(code, `${method} ${path}: HTTP ${status}${text ? `: ${text.slice(0, 200)}` : ''}`, { details: { status } });
}

interface WireError {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

function parseErrorBody(text: string): WireError | undefined {
  try {
    const body = JSON.parse(text) as { error?: WireError };
    if (body?.error && typeof body.error.code === 'string' && typeof body.error.message === 'string') return body.error;
  } catch {
    /* not JSON */
  }
  return undefined;
}

/**
 * The wire form back into an SbxError. The server names a request field as the caller wrote it
 * (`memory`) with `details.in` saying where; a server before that named it by where it was
 * (`body.memory`), so those `prefixes` (the parts of the request the SDK built from the caller's
 * options) are cut, the library's name in `field`, the server's in `wireField`. An option hint
 * (`add ?force=true`) is worded back as the SDK's caller passes the option (`pass { force: true }`).
 */
export function fromWire(wire: WireError, prefixes: string[] = ['body.']): SbxError {
  const code = (ERROR_CODES as readonly string[]).includes(wire.code) ? (wire.code as ErrorCode) : 'internal';
  let details = wire.details;
  const field = details?.['field'];
  const prefix = typeof field === 'string' ? prefixes.find((p) => field.startsWith(p)) : undefined;
  if (typeof field === 'string' && prefix) details = { ...details, field: field.slice(prefix.length), wireField: field };
  return rewordOptionHint(new SbxError(code, wire.message, details ? { details } : {}), libraryOptionHint);
}

function errCode(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code !== 'ABORT_ERR') return code;
  }
  return undefined;
}

export function abortError(signal: AbortSignal, method: string, path: string): SbxError {
  const reason: unknown = signal.reason;
  return new SbxError('cancelled', `${method} ${path} aborted: ${reason instanceof Error ? reason.message : String(reason ?? 'aborted')}`, { cause: reason });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Path segments for a URL: each one escaped, so names with `?`, `#` or `%` arrive as written. */
export function encodePath(components: string[]): string {
  return components.map((c) => encodeURIComponent(c)).join('/');
}
