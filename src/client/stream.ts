/**
 * `box.stream()` over the server's WebSocket exec (docs/api.md, "Stream framing"): binary
 * messages whose first byte is the channel. The result has the library's ExecStream shape.
 */
import { PassThrough, Writable } from 'node:stream';
import WebSocket from 'ws';
import { SbxError, invalidArgument } from '../errors.js';
import type { ExecStream, ExecStreamOptions } from '../runtime/types.js';
import { errorFromBody, fromWire } from './http.js';
import type { Transport } from './http.js';

const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, control: 3, stdinEof: 4 } as const;
/** The exit code the library reports after a kill (timeout, cancel, abort). */
const KILLED_EXIT_CODE = 137;
/** How long the socket may take to close after the exit frame before it is cut. */
const CLOSE_GRACE_MS = 1000;
/** Past this the command goes in a first control frame instead of the query (URL limits). */
const MAX_QUERY_CHARS = 6000;
/** Output buffered per stream before the socket is paused. */
const OUTPUT_HIGH_WATER = 1024 * 1024;
/** The server names the exec's fields by where the SDK put them: the query, or the exec frame. */
const QUERY_FIELDS = ['querystring.', 'query.', 'exec.'];

function frame(channel: number, data?: Uint8Array | string): Buffer {
  const body = data === undefined ? Buffer.alloc(0) : typeof data === 'string' ? Buffer.from(data) : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return Buffer.concat([Buffer.from([channel]), body]);
}

function execQuery(cmd: string[], opts: ExecStreamOptions): Record<string, string | string[] | boolean | undefined> {
  return {
    cmd,
    tty: opts.tty ? true : undefined,
    ...(opts.size ? { cols: String(opts.size.cols), rows: String(opts.size.rows) } : {}),
    workDir: opts.workDir,
    user: opts.user,
    timeoutMs: opts.timeoutMs === undefined ? undefined : String(opts.timeoutMs),
    env: opts.env ? Object.entries(opts.env).map(([k, v]) => `${k}=${v}`) : undefined,
  };
}

/**
 * Opens the socket and resolves once it is open. The query carries the command, so the server
 * checks it before the upgrade and a bad one rejects here, as the library's `stream()` does.
 */
export async function openStream(transport: Transport, boxId: string, cmd: string[], opts: ExecStreamOptions = {}): Promise<ExecStream> {
  // An empty command would leave the query without `cmd`, which the server reads as "the
  // command follows in a frame": refused here with the library's words instead.
  if (!Array.isArray(cmd)) throw invalidArgument('cmd', 'must be an array of strings');
  if (cmd.length === 0) throw invalidArgument('cmd', 'must not be empty');
  if (opts.signal?.aborted) throw new SbxError('cancelled', 'stream aborted before it started', { cause: opts.signal.reason });
  const path = `/v1/boxes/${encodeURIComponent(boxId)}/exec/ws`;
  let url = transport.url(path, execQuery(cmd, opts));
  let startFrame: Buffer | undefined;
  if (url.length > MAX_QUERY_CHARS) {
    url = transport.url(path);
    const { signal: _s, ...spec } = opts;
    startFrame = frame(CHANNEL.control, JSON.stringify({ exec: { cmd, ...spec } }));
  }
  const ws = new WebSocket(url.replace(/^http/, 'ws'), { headers: transport.authHeaders(), perMessageDeflate: false });
  ws.binaryType = 'nodebuffer';
  // Frames that arrive in the same read as the upgrade answer (a fast command's output and
  // exit) are emitted before the stream below exists: held here, replayed by it in order.
  const early: Buffer[] = [];
  const hold = (data: Buffer) => early.push(data);
  ws.on('message', hold);
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => reject(transport.unreachable(err, 'GET', path));
    ws.once('open', () => {
      ws.off('error', onError);
      resolve();
    });
    ws.once('error', onError);
    ws.once('unexpected-response', (req, res) => {
      ws.off('error', onError);
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        // The refused upgrade's connection must not linger (and keep the process alive).
        req.destroy();
        reject(errorFromBody(res.statusCode ?? 0, Buffer.concat(chunks).toString(), 'GET', path, QUERY_FIELDS));
      });
      res.on('error', (err) => reject(transport.unreachable(err, 'GET', path)));
    });
  });
  if (startFrame) ws.send(startFrame);
  ws.off('message', hold);
  return new RemoteExecStream(ws, opts, transport.baseUrl, early);
}

class RemoteExecStream implements ExecStream {
  readonly stdout = new PassThrough({ highWaterMark: OUTPUT_HIGH_WATER });
  readonly stderr = new PassThrough({ highWaterMark: OUTPUT_HIGH_WATER });
  readonly stdin: Writable;
  private readonly exit: Promise<number>;
  private outcome: { exitCode: number } | { error: SbxError } | undefined;
  private killed = false;
  private settle!: { resolve: (n: number) => void; reject: (e: SbxError) => void };
  private readonly closed: Promise<void>;
  private pausedBy = new Set<PassThrough>();

  constructor(
    private readonly ws: WebSocket,
    opts: ExecStreamOptions,
    baseUrl: string,
    early: Buffer[] = [],
  ) {
    this.stdin = new Writable({
      write: (chunk: Buffer, _enc, cb) => this.sendFrame(frame(CHANNEL.stdin, chunk), cb),
      // end() is the real half-close: the server closes the process's stdin, output keeps coming.
      final: (cb) => this.sendFrame(frame(CHANNEL.stdinEof), cb),
    });
    this.exit = new Promise<number>((resolve, reject) => (this.settle = { resolve, reject }));
    // wait() may never be called; a rejection nobody asked for must not crash the process.
    this.exit.catch(() => undefined);
    this.closed = new Promise((resolve) => ws.once('close', () => resolve()));
    for (const data of early) this.onMessage(data);
    ws.on('message', (data: Buffer) => this.onMessage(data));
    ws.on('error', () => undefined);
    ws.once('close', (code, reason) => {
      this.endOutput();
      this.stdin.destroy();
      opts.signal?.removeEventListener('abort', onAbort);
      if (this.outcome) return;
      if (this.killed) this.settle.resolve(KILLED_EXIT_CODE);
      else
        this.settle.reject(
          new SbxError('runtime_unavailable', `the exec stream from ${baseUrl} closed before the process exited (${code} ${reason.toString()})`, {
            details: { url: baseUrl, closeCode: code },
          }),
        );
    });
    const onAbort = () => void this.cancel();
    if (opts.signal) opts.signal.addEventListener('abort', onAbort, { once: true });
  }

  private sendFrame(buf: Buffer, cb: (err?: Error | null) => void): void {
    if (this.ws.readyState !== WebSocket.OPEN) return cb();
    // The callback fires once the frame is on the socket: stdin's own buffer gives backpressure.
    this.ws.send(buf, { binary: true }, (err) => cb(err ?? null));
  }

  private onMessage(data: Buffer): void {
    const channel = data[0];
    const payload = data.subarray(1);
    if (channel === CHANNEL.stdout || channel === CHANNEL.stderr) {
      const out = channel === CHANNEL.stdout ? this.stdout : this.stderr;
      if (out.writableEnded) return;
      if (!out.write(payload) && !this.pausedBy.has(out)) {
        // A reader that does not keep up pauses the socket; the server then pauses the process.
        this.pausedBy.add(out);
        this.ws.pause();
        out.once('drain', () => {
          this.pausedBy.delete(out);
          if (this.pausedBy.size === 0) this.ws.resume();
        });
      }
      return;
    }
    if (channel !== CHANNEL.control) return;
    let msg: { exit?: unknown; error?: { code: string; message: string; details?: Record<string, unknown> } };
    try {
      msg = JSON.parse(payload.toString('utf8')) as typeof msg;
    } catch {
      return;
    }
    if (typeof msg.exit === 'number') this.finish({ exitCode: msg.exit });
    else if (msg.error) this.finish({ error: fromWire(msg.error, QUERY_FIELDS) });
  }

  /**
   * The exit (or error) frame is the last word: frames arrive in order, so all output is in.
   * wait() settles now rather than at the socket's close, because the close handshake can
   * hang: a server that paused reading while the process's stdin was full may never read our
   * close reply, and ws then waits its 30 s close timeout. The socket is cut after a grace.
   */
  private finish(outcome: { exitCode: number } | { error: SbxError }): void {
    if (this.outcome) return;
    this.outcome = outcome;
    this.endOutput();
    if ('exitCode' in outcome) this.settle.resolve(outcome.exitCode);
    else this.settle.reject(outcome.error);
    setTimeout(() => this.ws.terminate(), CLOSE_GRACE_MS).unref();
  }

  private endOutput(): void {
    if (!this.stdout.writableEnded) this.stdout.end();
    if (!this.stderr.writableEnded) this.stderr.end();
  }

  wait(): Promise<number> {
    return this.exit;
  }

  /**
   * Closing the socket is what makes the server kill the process inside the box; the framing
   * has no kill message, so this resolves once the socket is closed, and wait() gives 137.
   */
  async cancel(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    if (!this.outcome) this.killed = true;
    this.ws.close(1000, 'cancel');
    // A server that stopped reading (the process's stdin is full) never sees the close frame;
    // cutting the connection reaches it all the same.
    const cut = setTimeout(() => this.ws.terminate(), CLOSE_GRACE_MS);
    await this.closed;
    clearTimeout(cut);
  }

  async resize(size: { cols: number; rows: number }): Promise<void> {
    await new Promise<void>((resolve, reject) =>
      this.sendFrame(frame(CHANNEL.control, JSON.stringify({ resize: size })), (err) => (err ? reject(err) : resolve())),
    );
  }
}
