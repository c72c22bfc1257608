/**
 * `connectService`: a WebSocket or SSE connection to a service, where the handshake is the
 * readiness signal. Until it succeeds, refused or reset connections, early closes and 502-like
 * answers are retried with backoff up to `readyTimeoutMs`; after it, nothing is retried.
 * With `dial`, every attempt runs over a fresh socket from it (the library's published-port
 * dial, which holds the box in use while the socket is open). Node built-ins and `ws` only.
 */
import { EventEmitter } from 'node:events';
import http from 'node:http';
import type { IncomingMessage } from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import WebSocket from 'ws';
import { ERROR_CODES, SbxError } from '../errors.js';
import type { ErrorCode } from '../errors.js';
import { SseParser } from './sse-parser.js';
import type { SseEvent, SseServiceConn, WsCloseInfo, WsMessage, WsServiceConn } from './types.js';

export interface ServiceTarget {
  url: string;
  /** The box port, for messages and details. */
  port: number;
  headers?: Record<string, string>;
  /** A fresh connected socket per attempt; without it the URL's host is connected to. */
  dial?: () => Promise<Duplex>;
}

export interface ConnectOptions {
  protocol: 'ws' | 'sse';
  readyTimeoutMs?: number;
  signal?: AbortSignal;
}

export const DEFAULT_READY_TIMEOUT_MS = 10_000;
/** Bytes the iterator holds before the socket is paused. */
const HIGH_WATER_BYTES = 1024 * 1024;
const BACKOFF_FIRST_MS = 50;
const BACKOFF_MAX_MS = 500;

/** An attempt's failure: `retry` says whether another attempt may succeed. */
class AttemptError extends Error {
  constructor(
    message: string,
    readonly retry: boolean,
    readonly fatal?: SbxError,
  ) {
    super(message);
  }
}

export function connectService(target: ServiceTarget, opts: ConnectOptions & { protocol: 'ws' }): Promise<WsServiceConn>;
export function connectService(target: ServiceTarget, opts: ConnectOptions & { protocol: 'sse' }): Promise<SseServiceConn>;
export function connectService(target: ServiceTarget, opts: ConnectOptions): Promise<WsServiceConn | SseServiceConn>;
export async function connectService(target: ServiceTarget, opts: ConnectOptions): Promise<WsServiceConn | SseServiceConn> {
  const timeoutMs = opts.readyTimeoutMs ?? DEFAULT_READY_TIMEOUT_MS;
  const deadline = Date.now() + timeoutMs;
  const signal = opts.signal;
  const details = { port: target.port, url: target.url };
  const cancelled = () => new SbxError('cancelled', `attach to port ${target.port} cancelled`, { details, cause: signal?.reason });
  let backoff = BACKOFF_FIRST_MS;
  let last = 'no attempt';
  let attempts = 0;
  for (;;) {
    if (signal?.aborted) throw cancelled();
    attempts++;
    const remaining = Math.max(1, deadline - Date.now());
    try {
      return opts.protocol === 'ws' ? await attemptWs(target, remaining, signal) : await attemptSse(target, remaining, signal);
    } catch (err) {
      if (signal?.aborted) throw cancelled();
      if (err instanceof AttemptError) {
        if (err.fatal) throw err.fatal;
        if (!err.retry)
          throw new SbxError('not_available', `attach to port ${target.port}: ${err.message}`, { details: { ...details, reason: 'handshake_refused' } });
        last = err.message;
      } else if (err instanceof SbxError) {
        // From `dial`: only "nothing listens yet" can change by waiting.
        if (!(err.code === 'not_available' && err.details?.['reason'] === 'port_not_listening')) throw err;
        last = err.message;
      } else {
        last = (err as Error).message;
      }
    }
    const wait = Math.min(backoff, deadline - Date.now());
    if (wait <= 0) {
      throw new SbxError('not_available', `port ${target.port} is not ready after ${timeoutMs} ms (${attempts} attempts; last: ${last})`, {
        details: { ...details, reason: 'port_not_ready', lastError: last, attempts },
      });
    }
    await sleep(wait, signal);
    backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

const RETRY_STATUS = new Set([502, 503, 504]);
const CODE_BY_STATUS: Record<number, ErrorCode> = { 401: 'unauthorized', 403: 'forbidden', 404: 'not_found', 429: 'limit_exceeded' };

/** A non-handshake answer: an sbx error body (from the server's proxy) is kept as it is. */
function answerError(port: number, status: number, body: string): AttemptError {
  let wire: { code?: unknown; message?: unknown; details?: unknown } | undefined;
  try {
    wire = (JSON.parse(body) as { error?: typeof wire })?.error;
  } catch {
    /* not JSON */
  }
  if (wire && typeof wire.code === 'string' && (ERROR_CODES as readonly string[]).includes(wire.code) && typeof wire.message === 'string') {
    const details = (wire.details && typeof wire.details === 'object' ? wire.details : {}) as Record<string, unknown>;
    const err = new SbxError(wire.code as ErrorCode, wire.message, { details: { ...details, status } });
    const notYet = wire.code === 'not_available' && (details['reason'] === 'port_not_listening' || details['reason'] === 'port_not_ready');
    return notYet ? new AttemptError(wire.message, true) : new AttemptError(wire.message, false, err);
  }
  const text = `HTTP ${status}${body ? `: ${body.slice(0, 200)}` : ''}`;
  if (RETRY_STATUS.has(status)) return new AttemptError(text, true);
  const code = CODE_BY_STATUS[status] ?? 'not_available';
  return new AttemptError(
    text,
    false,
    new SbxError(code, `attach to port ${port}: the service answered ${text}`, { details: { port, status, reason: 'handshake_refused' } }),
  );
}

function readBody(res: IncomingMessage, limit = 4096): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on('data', (c: Buffer) => {
      if (size < limit) chunks.push(c);
      size += c.length;
    });
    res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8').slice(0, limit)));
    res.on('error', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
}

/** Runs one attempt: dials (when asked), then `run` with that socket; a failed attempt destroys it. */
async function withSocket<T>(target: ServiceTarget, run: (socket: Duplex | undefined) => Promise<T>): Promise<T> {
  const socket = target.dial ? await target.dial() : undefined;
  try {
    return await run(socket);
  } catch (err) {
    socket?.destroy();
    throw err;
  }
}

function attemptWs(target: ServiceTarget, timeoutMs: number, signal: AbortSignal | undefined): Promise<WsServiceConn> {
  return withSocket(target, (socket) => {
    return new Promise<WsServiceConn>((resolve, reject) => {
      const ws = new WebSocket(target.url, {
        headers: target.headers ?? {},
        perMessageDeflate: false,
        handshakeTimeout: timeoutMs,
        ...(socket ? { createConnection: () => socket as never } : {}),
      });
      ws.binaryType = 'nodebuffer';
      // Messages that arrive with the upgrade answer come before the connection object exists.
      const early: WsMessage[] = [];
      const hold = (data: Buffer, isBinary: boolean) => early.push(toMessage(data, isBinary));
      ws.on('message', hold);
      const onAbort = () => {
        ws.terminate();
        fail(new AttemptError('cancelled', false));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const fail = (err: AttemptError) => {
        signal?.removeEventListener('abort', onAbort);
        ws.removeAllListeners();
        ws.on('error', () => undefined);
        reject(err);
      };
      ws.once('open', () => {
        signal?.removeEventListener('abort', onAbort);
        ws.off('message', hold);
        ws.removeAllListeners('error');
        ws.removeAllListeners('unexpected-response');
        resolve(new WsConnection(ws, target.url, early, signal));
      });
      ws.once('error', (err) => fail(new AttemptError((err as NodeJS.ErrnoException).code ?? err.message, true)));
      ws.once('unexpected-response', (req, res) => {
        // readBody never rejects: on an error or close it resolves with what arrived.
        void readBody(res).then((body) => {
          req.destroy();
          fail(answerError(target.port, res.statusCode ?? 0, body));
        });
      });
    });
  });
}

function toMessage(data: Buffer, isBinary: boolean): WsMessage {
  return isBinary ? { type: 'binary', data } : { type: 'text', data: data.toString('utf8') };
}

function messageBytes(m: WsMessage): number {
  return m.type === 'binary' ? m.data.byteLength : m.data.length;
}

/** A bounded queue behind an async iterator; `pause`/`resume` apply the backpressure. */
class Feed<T> {
  private readonly items: T[] = [];
  private bytes = 0;
  private ended = false;
  private error: Error | undefined;
  private wake: (() => void) | undefined;
  private paused = false;

  constructor(
    private readonly size: (item: T) => number,
    private readonly pause: () => void,
    private readonly resume: () => void,
  ) {}

  push(item: T): void {
    this.items.push(item);
    this.bytes += this.size(item);
    if (!this.paused && this.bytes > HIGH_WATER_BYTES) {
      this.paused = true;
      this.pause();
    }
    this.notify();
  }

  end(error?: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    this.notify();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  async *iterate(): AsyncGenerator<T> {
    for (;;) {
      const item = this.items.shift();
      if (item !== undefined) {
        this.bytes -= this.size(item);
        if (this.paused && this.bytes <= HIGH_WATER_BYTES / 2) {
          this.paused = false;
          this.resume();
        }
        yield item;
        continue;
      }
      if (this.ended) {
        if (this.error) throw this.error;
        return;
      }
      await new Promise<void>((r) => (this.wake = r));
    }
  }

  /** Everything queued so far, emptied (the switch to event delivery). */
  drain(): T[] {
    const out = this.items.splice(0);
    this.bytes = 0;
    if (this.paused) {
      this.paused = false;
      this.resume();
    }
    return out;
  }
}

class WsConnection extends EventEmitter implements WsServiceConn {
  readonly protocol = 'ws' as const;
  readonly closed: Promise<WsCloseInfo>;
  private readonly feed: Feed<WsMessage>;
  private mode: 'buffer' | 'iterator' | 'events' = 'buffer';

  constructor(
    private readonly ws: WebSocket,
    readonly url: string,
    early: WsMessage[],
    signal: AbortSignal | undefined,
  ) {
    super();
    this.feed = new Feed<WsMessage>(
      messageBytes,
      () => ws.pause(),
      () => ws.resume(),
    );
    for (const m of early) this.feed.push(m);
    let closeInfo: (info: WsCloseInfo) => void = () => undefined;
    this.closed = new Promise((r) => (closeInfo = r));
    let failure: Error | undefined;
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      const m = toMessage(data, isBinary);
      if (this.mode === 'events') this.emit('message', m);
      else this.feed.push(m);
    });
    ws.on('error', (err) => {
      failure = new SbxError('not_available', `the WebSocket to ${url} failed: ${err.message}`, { cause: err, details: { url } });
      if (this.listenerCount('error') > 0) this.emit('error', failure);
    });
    const onAbort = () => this.close(1000, 'aborted');
    signal?.addEventListener('abort', onAbort, { once: true });
    ws.on('close', (code: number, reason: Buffer) => {
      signal?.removeEventListener('abort', onAbort);
      const info = { code, reason: reason.toString('utf8') };
      this.feed.end(failure);
      closeInfo(info);
      this.emit('close', info);
    });
    this.on('newListener', (event: string) => {
      if (event !== 'message' || this.mode !== 'buffer') return;
      this.mode = 'events';
      const held = this.feed.drain();
      // Delivered after the listener is in place (newListener runs before it is added).
      if (held.length > 0) queueMicrotask(() => held.forEach((m) => this.emit('message', m)));
    });
  }

  send(data: string | Uint8Array): void {
    if (this.ws.readyState !== WebSocket.OPEN) throw new SbxError('conflict', `the WebSocket to ${this.url} is not open`, { details: { url: this.url } });
    this.ws.send(data, { binary: typeof data !== 'string' });
  }

  close(code = 1000, reason = ''): void {
    if (this.ws.readyState === WebSocket.CLOSED || this.ws.readyState === WebSocket.CLOSING) return;
    this.ws.close(code, reason);
  }

  [Symbol.asyncIterator](): AsyncIterator<WsMessage> {
    if (this.mode === 'events') throw new SbxError('conflict', 'this connection delivers its messages to `message` listeners');
    this.mode = 'iterator';
    return this.feed.iterate();
  }
}

function attemptSse(target: ServiceTarget, timeoutMs: number, signal: AbortSignal | undefined): Promise<SseServiceConn> {
  return withSocket(target, (socket) => {
    return new Promise<SseServiceConn>((resolve, reject) => {
      const url = new URL(target.url);
      const request = url.protocol === 'https:' ? https.request : http.request;
      const req = request(url, {
        method: 'GET',
        headers: { accept: 'text/event-stream', 'cache-control': 'no-cache', ...(target.headers ?? {}) },
        ...(socket ? { createConnection: () => socket as never } : { agent: false }),
      });
      const timer = setTimeout(() => fail(new AttemptError(`no answer within ${timeoutMs} ms`, true)), timeoutMs);
      const onAbort = () => fail(new AttemptError('cancelled', false));
      signal?.addEventListener('abort', onAbort, { once: true });
      let settled = false;
      function fail(err: AttemptError) {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        req.destroy();
        reject(err);
      }
      req.on('error', (err) => fail(new AttemptError((err as NodeJS.ErrnoException).code ?? err.message, true)));
      req.on('response', (res) => {
        const type = String(res.headers['content-type'] ?? '');
        if (res.statusCode === 200 && /^text\/event-stream\b/i.test(type)) {
          settled = true;
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          resolve(new SseConnection(req, res, target.url, signal));
          return;
        }
        // readBody never rejects: on an error or close it resolves with what arrived.
        void readBody(res).then((body) => {
          if (res.statusCode === 200) {
            fail(
              new AttemptError(
                `not an event stream (content-type ${type || 'none'})`,
                false,
                new SbxError(
                  'not_available',
                  `attach to port ${target.port}: the service answered 200 with content-type ${type || 'none'}, not text/event-stream`,
                  { details: { port: target.port, reason: 'handshake_refused', status: 200 } },
                ),
              ),
            );
          } else fail(answerError(target.port, res.statusCode ?? 0, body));
        });
      });
      req.end();
    });
  });
}

class SseConnection implements SseServiceConn {
  readonly protocol = 'sse' as const;
  readonly closed: Promise<void>;
  private readonly feed: Feed<SseEvent>;
  private iterated = false;

  constructor(
    private readonly req: http.ClientRequest,
    res: IncomingMessage,
    readonly url: string,
    signal: AbortSignal | undefined,
  ) {
    this.feed = new Feed<SseEvent>(
      (e) => e.data.length + 16,
      () => res.pause(),
      () => res.resume(),
    );
    const parser = new SseParser();
    let done: () => void = () => undefined;
    this.closed = new Promise((r) => (done = r));
    const onAbort = () => this.close();
    signal?.addEventListener('abort', onAbort, { once: true });
    res.on('data', (c: Buffer) => {
      for (const e of parser.push(c)) this.feed.push(e);
    });
    const finish = () => {
      signal?.removeEventListener('abort', onAbort);
      parser.end();
      this.feed.end();
      done();
    };
    res.on('end', finish);
    res.on('close', finish);
    res.on('error', () => undefined);
    req.on('error', () => undefined);
  }

  close(): void {
    this.req.destroy();
  }

  [Symbol.asyncIterator](): AsyncIterator<SseEvent> {
    if (this.iterated) throw new SbxError('conflict', 'an SSE connection is iterated once');
    this.iterated = true;
    return this.feed.iterate();
  }
}
