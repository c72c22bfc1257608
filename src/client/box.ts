/** A box behind `sbx serve`, with the library Box's fields and calls. */
import { connectService } from '../attach/connect.js';
import type { AttachOptions, ServiceConn, SseAttachOptions, SseServiceConn, WsAttachOptions, WsServiceConn } from '../attach/types.js';
import { SbxError, invalidArgument } from '../errors.js';
import { EXEC_FRAMES_TYPE, ExecFramesReader } from './exec-frames.js';
import type { ExecOptions, ExecResult, ExecStream, ExecStreamOptions, LogChunk, LogOptions } from '../runtime/types.js';
import type { Box as LibraryBox, ProxyUrlOptions, VncUrlOptions } from '../sandbox/box.js';
import type { BoxInfo, BoxStats, BoxStatus, LifecyclePolicy, PauseOptions } from '../sandbox/types.js';
import type { SnapshotInfo, SnapshotOptions } from '../sandbox/snapshots.js';
import type { NetworkPolicy } from '../sandbox/egress-policy.js';
import { abortError, fromWire } from './http.js';
import type { Transport } from './http.js';
import { openStream } from './stream.js';
import { RemoteWorkspaceFS } from './workspace.js';
import { RemoteBoxFS } from './box-files.js';
import type { BoxFS } from './box-files.js';
import type { BoxFilesOptions } from '../sandbox/box-fs.js';
import type { WorkspaceFS } from './workspace.js';
import { checkPort } from '../runtime/ports.js';

/**
 * The library's Box, with `workspace()` giving the structural WorkspaceFS: a library Box is
 * one of these too, so code typed against it runs on either.
 */
export type Box = Omit<LibraryBox, 'workspace' | 'files'> & {
  /** The file API of the workspace mounted into this box; not_found when it has none. */
  workspace(): Promise<WorkspaceFS>;
  /** Files anywhere in the box, as its user or `user` (the library's BoxFS, over HTTP). */
  files(opts?: BoxFilesOptions): BoxFS;
};

const LOG_OPTIONS = new Set(['follow', 'tail', 'since', 'sinceMs', 'signal']);
const QUERY_FIELDS = ['querystring.', 'query.'];

/** The chunks of a logs answer: one JSON object a line; empty lines are the server's keep-alives; `{error}` ends it with that error. */
async function* jsonLines(res: Response, signal: AbortSignal | undefined): AsyncGenerator<LogChunk> {
  if (!res.body) return;
  const reader = res.body.getReader();
  // A read in flight does not always see fetch's abort at once: cancelling the reader ends it.
  const onAbort = () => void reader.cancel().catch(() => undefined);
  signal?.addEventListener('abort', onAbort, { once: true });
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      if (signal?.aborted) return;
      const { done, value } = await reader.read();
      if (done || signal?.aborted) return;
      buffer += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line.trim() === '') continue;
        const v = JSON.parse(line) as LogChunk | { error: { code: string; message: string; details?: Record<string, unknown> } };
        if ('error' in v) throw fromWire(v.error);
        yield v;
      }
    }
  } catch (err) {
    if (signal?.aborted) return;
    if (err instanceof SbxError) throw err;
    throw new SbxError('runtime_unavailable', `the log stream broke off: ${(err as Error).message}`, { cause: err });
  } finally {
    signal?.removeEventListener('abort', onAbort);
    await reader.cancel().catch(() => undefined);
  }
}

export class RemoteBox implements Box {
  private fields: BoxInfo;

  constructor(
    private readonly transport: Transport,
    info: BoxInfo,
  ) {
    this.fields = info;
  }

  private get path(): string {
    return `/v1/boxes/${encodeURIComponent(this.fields.id)}`;
  }

  get id(): string {
    return this.fields.id;
  }
  get containerId(): string {
    return this.fields.containerId;
  }
  get owner(): string {
    return this.fields.owner;
  }
  get pool(): string {
    return this.fields.pool;
  }
  get policy(): LifecyclePolicy {
    return this.fields.policy;
  }
  get image(): string {
    return this.fields.image;
  }
  get workspaceId(): string | null {
    return this.fields.workspaceId;
  }
  get mountPath(): string {
    return this.fields.mountPath;
  }
  get labels(): Record<string, string> {
    return { ...this.fields.labels };
  }
  get createdAt(): string {
    return this.fields.createdAt;
  }
  /** The status the server last reported to this object (`info()`, `start()`, `stop()` refresh it). */
  get status(): BoxStatus {
    return this.fields.status;
  }

  /**
   * Runs a command to completion. Never retried: a command that may have run is not run again.
   * An aborted `signal` drops the request, which makes the server kill the process.
   */
  async exec(cmd: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    // outputBudget stays here: the server's own budget holds the output there.
    const { signal, stdin, outputBudget: _local, ...rest } = opts;
    const body: Record<string, unknown> = { cmd, ...rest };
    if (typeof stdin === 'string') body['stdin'] = stdin;
    else if (stdin !== undefined) body['stdin'] = { base64: Buffer.from(stdin.buffer, stdin.byteOffset, stdin.byteLength).toString('base64') };
    try {
      // Frames carry the output as it is: no JSON escaping (six bytes per NUL) nor parsing of it.
      return await this.transport.jsonWithoutTimeout<ExecResult>('POST', `${this.path}/exec`, {
        json: body,
        accept: `${EXEC_FRAMES_TYPE}, application/json;q=0.9`,
        readers: { [EXEC_FRAMES_TYPE]: () => new ExecFramesReader() },
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      // An abort while the answer was being read is still the caller's abort.
      if (signal?.aborted && !(err instanceof SbxError && err.code === 'cancelled')) throw abortError(signal, 'POST', `${this.path}/exec`);
      throw err;
    }
  }

  stream(cmd: string[], opts?: ExecStreamOptions): Promise<ExecStream> {
    return openStream(this.transport, this.fields.id, cmd, opts);
  }

  async workspace(): Promise<WorkspaceFS> {
    if (!this.fields.workspaceId) throw new SbxError('not_found', `box '${this.id}' has no workspace`, { details: { id: this.id } });
    return new RemoteWorkspaceFS(this.transport, this.fields.workspaceId);
  }

  files(opts?: BoxFilesOptions): BoxFS {
    return new RemoteBoxFS(this.transport, this.fields.id, opts);
  }

  /**
   * A WebSocket or SSE connection to a service of the box, through the server's port proxy
   * (`/v1/boxes/:id/ports/:port/<path>`, authenticated by the API key). Same contract as the
   * library's `attach`.
   */
  attach(port: number, opts: WsAttachOptions): Promise<WsServiceConn>;
  attach(port: number, opts: SseAttachOptions): Promise<SseServiceConn>;
  attach(port: number, opts: AttachOptions): Promise<ServiceConn>;
  async attach(port: number, opts: AttachOptions): Promise<ServiceConn> {
    checkPort(port);
    if (opts === null || typeof opts !== 'object') throw invalidArgument('options', 'must be an object with a protocol');
    if (opts.protocol !== 'ws' && opts.protocol !== 'sse') throw invalidArgument('protocol', "must be 'ws' or 'sse'");
    // eslint-disable-next-line no-control-regex
    if (opts.path !== undefined && (typeof opts.path !== 'string' || /[\s\x00-\x1f\x7f]/.test(opts.path))) {
      throw invalidArgument('path', 'must be a string without whitespace or control characters');
    }
    const t = opts.readyTimeoutMs;
    if (t !== undefined && (typeof t !== 'number' || !Number.isInteger(t) || t < 0))
      throw invalidArgument('readyTimeoutMs', 'must be a whole, non-negative number of milliseconds');
    if (opts.signal?.aborted) throw new SbxError('cancelled', `attach to port ${port} cancelled`, { details: { id: this.id, port } });
    const rest = (opts.path ?? '').replace(/^\/+/, '');
    const http = this.transport.url(`${this.path}/ports/${port}/`) + rest;
    const url = opts.protocol === 'ws' ? http.replace(/^http/, 'ws') : http;
    return connectService(
      { url, port, headers: { ...(opts.headers ?? {}), ...this.transport.authHeaders() } },
      { protocol: opts.protocol, ...(t !== undefined ? { readyTimeoutMs: t } : {}), ...(opts.signal ? { signal: opts.signal } : {}) },
    );
  }

  /**
   * A URL on the server's authenticated proxy for `path` on `port` of this box (see the library's
   * Box.proxy); with `{ signed: true, ttlMs }` it carries an access token a browser can open.
   */
  async proxy(port: number, path = '/', opts: ProxyUrlOptions = {}): Promise<string> {
    const res = await this.transport.json<{ url: string; expiresAt?: string }>('POST', `${this.path}/proxy-url`, { json: { port, path, ...opts } });
    return res.url;
  }

  /** The URL of the box's VNC viewer page with a port access token (see the library's Box.vnc). */
  async vnc(opts: VncUrlOptions = {}): Promise<string> {
    const res = await this.transport.json<{ url: string; expiresAt: string }>('POST', `${this.path}/vnc-url`, { json: { ...opts } });
    return res.url;
  }

  async info(): Promise<BoxInfo> {
    this.fields = await this.transport.json<BoxInfo>('GET', this.path);
    return { ...this.fields };
  }

  /** The box's CPU and memory use, as the library's `box.stats()` reads it (GET /v1/boxes/:id/stats): not use of the box. */
  async stats(): Promise<BoxStats> {
    return this.transport.json<BoxStats>('GET', `${this.path}/stats`);
  }

  /**
   * The output of the box's command, as the library's `box.logs()` reads it (GET
   * /v1/boxes/:id/logs, JSON lines). Resolves once the server answered; an aborted `signal` ends
   * the iteration.
   */
  async logs(opts: LogOptions = {}): Promise<AsyncIterable<LogChunk>> {
    if (opts === null || typeof opts !== 'object' || Array.isArray(opts)) throw invalidArgument('options', 'must be an object');
    for (const k of Object.keys(opts)) if (!LOG_OPTIONS.has(k)) throw invalidArgument('options', `Unrecognized key: "${k}"`);
    if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) throw invalidArgument('signal', 'must be an AbortSignal');
    const { signal } = opts;
    const query = {
      follow: opts.follow === true ? true : undefined,
      tail: opts.tail === undefined ? undefined : String(opts.tail),
      since: opts.since,
      sinceMs: opts.sinceMs === undefined ? undefined : String(opts.sinceMs),
    };
    if (opts.follow !== undefined && typeof opts.follow !== 'boolean') throw invalidArgument('follow', 'must be a boolean');
    let res: Response;
    try {
      res = await this.transport.request('GET', `${this.path}/logs`, { query, ...(signal ? { signal } : {}) });
    } catch (err) {
      // The server names the query's fields by where they were; the caller gave options.
      throw err instanceof SbxError ? fromWire({ code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) }, QUERY_FIELDS) : err;
    }
    return jsonLines(res, signal);
  }

  async start(): Promise<void> {
    this.fields = await this.transport.json<BoxInfo>('POST', `${this.path}/start`);
  }

  async stop(): Promise<void> {
    this.fields = await this.transport.json<BoxInfo>('POST', `${this.path}/stop`);
  }

  async pause(opts?: PauseOptions): Promise<void> {
    // A plain pause sends no body, as before; the server checks the options (invalid_argument).
    this.fields = await this.transport.json<BoxInfo>('POST', `${this.path}/pause`, opts === undefined ? {} : { json: opts });
  }

  async resume(): Promise<void> {
    this.fields = await this.transport.json<BoxInfo>('POST', `${this.path}/resume`);
  }

  async archive(): Promise<void> {
    this.fields = await this.transport.json<BoxInfo>('POST', `${this.path}/archive`);
  }

  async remove(): Promise<void> {
    await this.transport.json('DELETE', this.path);
  }

  /** Saves the box's filesystem as a snapshot of its owner (POST /v1/boxes/:id/snapshots; see the library's Box.snapshot). */
  async snapshot(opts: SnapshotOptions = {}): Promise<SnapshotInfo> {
    return this.transport.json<SnapshotInfo>('POST', `${this.path}/snapshots`, { json: opts });
  }

  async renewLifetime(lifetimeMs: number): Promise<void> {
    this.fields = await this.transport.json<BoxInfo>('POST', `${this.path}/renew-lifetime`, { json: { lifetimeMs } });
  }

  async setNetwork(policy: NetworkPolicy): Promise<void> {
    this.fields = await this.transport.json<BoxInfo>('PUT', `${this.path}/network`, { json: policy });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.remove();
    } catch (err) {
      if (!(err instanceof SbxError && err.code === 'not_found')) throw err;
    }
  }
}
