/**
 * The exec (and attach) stream protocol of the Kubernetes API server over WebSocket,
 * `v5.channel.k8s.io` (v4 as the fallback): every binary message is one channel byte, then
 * data. Channels: 0 stdin, 1 stdout, 2 stderr, 3 the v1.Status of the end, 4 terminal resize
 * (`{"Width":w,"Height":h}`), 255 close (v5 only: `[255, n]` closes channel n; the client sends
 * `[255, 0]` for a real stdin half-close).
 *
 * Our own framing rather than client-node's Exec, which speaks v5 and sends the close frame but
 * has no backpressure either way (stdin is forwarded in flowing mode, output written without
 * waiting), turns a refused handshake into a bare socket error (the API server's 403 Status,
 * which names the missing permission, is lost) and resizes only through a tty-like stdout.
 */
import { PassThrough, Writable } from 'node:stream';
import { SbxError } from '../../errors.js';

export const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, status: 3, resize: 4, close: 255 } as const;
/** Offered in this order; the API server picks the first it speaks (v5 since Kubernetes 1.30). */
export const EXEC_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'];
/** Stdin is sent in frames of at most this many bytes, so a resize is never stuck behind a large write. */
const STDIN_FRAME_BYTES = 32 * 1024;

/** One message of the protocol: the channel byte, then the payload. */
export function frame(channel: number, payload: Uint8Array | string = Buffer.alloc(0)): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  const out = Buffer.allocUnsafe(body.length + 1);
  out[0] = channel;
  out.set(body, 1);
  return out;
}

/** The v5 close frame for one channel: `[255, channel]`. */
export function closeFrame(channel: number): Buffer {
  return Buffer.from([CHANNEL.close, channel]);
}

/** A resize message: channel 4 with the size as the API server's TerminalSize JSON. */
export function resizeFrame(size: { cols: number; rows: number }): Buffer {
  return frame(CHANNEL.resize, JSON.stringify({ Width: size.cols, Height: size.rows }));
}

/** The query of an exec: every argv element its own `command=` parameter, never a shell string. */
export function execQuery(cmd: string[], opts: { container: string; stdin: boolean; tty: boolean }): string {
  const q = new URLSearchParams();
  for (const arg of cmd) q.append('command', arg);
  q.set('container', opts.container);
  q.set('stdout', 'true');
  // With a terminal the API server merges stderr into stdout and refuses stderr=true.
  q.set('stderr', opts.tty ? 'false' : 'true');
  q.set('stdin', opts.stdin ? 'true' : 'false');
  q.set('tty', opts.tty ? 'true' : 'false');
  return q.toString();
}

/** How an exec ended, from the v1.Status on channel 3. */
export type ExecEnd = { exitCode: number } | { failure: string; reason: string };

/**
 * Reads the status: `Success` is exit 0; `Failure` with reason `NonZeroExitCode` carries the
 * code in `details.causes[reason=ExitCode].message`; any other failure (the process could not
 * start, the container is gone) is returned with its message for the caller to type.
 */
export function parseStatus(payload: Uint8Array | string): ExecEnd {
  const text = typeof payload === 'string' ? payload : Buffer.from(payload).toString('utf8');
  let status: { status?: string; message?: string; reason?: string; details?: { causes?: Array<{ reason?: string; message?: string }> } };
  try {
    status = JSON.parse(text) as typeof status;
  } catch {
    return { failure: `unreadable exec status: ${text.slice(0, 200)}`, reason: 'Unknown' };
  }
  if (status.status === 'Success') return { exitCode: 0 };
  if (status.reason === 'NonZeroExitCode') {
    const cause = status.details?.causes?.find((c) => c.reason === 'ExitCode');
    const code = Number(cause?.message);
    if (Number.isInteger(code) && code >= 0) return { exitCode: code };
  }
  return { failure: status.message ?? text, reason: status.reason ?? 'Unknown' };
}

/** What the session needs of a WebSocket (the `ws` package's, or anything speaking like it). */
export interface ChannelSocket {
  readonly protocol: string;
  send(data: Buffer, cb?: (err?: Error) => void): void;
  pause(): void;
  resume(): void;
  close(code?: number): void;
  terminate(): void;
  on(event: 'message', fn: (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => void): this;
  on(event: 'close', fn: (code: number, reason: Buffer) => void): this;
  on(event: 'error', fn: (err: Error) => void): this;
}

export interface ChannelSession {
  stdout: PassThrough;
  stderr: PassThrough;
  /** `end()` sends the v5 close frame for stdin; on v4 there is no half-close (see `halfClose`). */
  stdin: Writable;
  /** Whether `stdin.end()` is a real half-close (v5), or nothing the process sees (v4). */
  readonly halfClose: boolean;
  /** Resolves when the status arrived and the connection closed (stdout and stderr have ended); a lost connection without a status rejects. */
  ended: Promise<ExecEnd>;
  resize(size: { cols: number; rows: number }): Promise<void>;
  /** Closes the connection now (the process is not killed by this: see the runtime's kill). */
  destroy(): void;
}

/**
 * Runs the protocol over an open socket. With `tty`, `stdin.end()` types ^D (as a terminal
 * does) rather than closing stdin, which would hang up the terminal.
 */
export function channelSession(ws: ChannelSocket, what: string, opts: { tty?: boolean } = {}): ChannelSession {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const halfClose = ws.protocol === 'v5.channel.k8s.io';
  let end: ExecEnd | undefined;
  let closed = false;
  let resolveEnded!: (e: ExecEnd) => void;
  let rejectEnded!: (e: Error) => void;
  const ended = new Promise<ExecEnd>((res, rej) => {
    resolveEnded = res;
    rejectEnded = rej;
  });
  ended.catch(() => undefined);

  // Backpressure: a reader that does not read pauses the socket, so the API server (and the
  // process behind it) waits rather than filling our memory.
  let paused = 0;
  const push = (out: PassThrough, data: Buffer) => {
    if (out.writableEnded) return;
    if (!out.write(data)) {
      paused++;
      if (paused === 1) ws.pause();
      out.once('drain', () => {
        paused--;
        if (paused === 0 && !closed) ws.resume();
      });
    }
  };
  const finish = () => {
    if (!stdout.writableEnded) stdout.end();
    if (!stderr.writableEnded) stderr.end();
  };

  ws.on('message', (raw, isBinary) => {
    if (!isBinary) return;
    const data = Array.isArray(raw) ? Buffer.concat(raw) : Buffer.isBuffer(raw) ? raw : Buffer.from(raw);
    if (data.length === 0) return;
    const payload = data.subarray(1);
    switch (data[0]) {
      case CHANNEL.stdout:
        if (payload.length) push(stdout, payload);
        return;
      case CHANNEL.stderr:
        if (payload.length) push(stderr, payload);
        return;
      case CHANNEL.status:
        end ??= parseStatus(payload);
        return;
      case CHANNEL.close:
        if (payload[0] === CHANNEL.stdout) stdout.end();
        if (payload[0] === CHANNEL.stderr) stderr.end();
        return;
      default:
        return;
    }
  });
  ws.on('error', () => undefined);
  ws.on('close', () => {
    closed = true;
    finish();
    // All output has been handed to stdout and stderr (read or not: a caller reading only
    // stdout must still learn of the exit).
    if (end) resolveEnded(end);
    else {
      rejectEnded(new SbxError('runtime_unavailable', `${what}: the connection closed before the process's exit status arrived`));
    }
  });

  const stdin = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (closed) return cb();
      let at = 0;
      const next = (err?: Error) => {
        if (err || closed || at >= chunk.length) return cb();
        const piece = chunk.subarray(at, at + STDIN_FRAME_BYTES);
        at += piece.length;
        ws.send(frame(CHANNEL.stdin, piece), next);
      };
      next();
    },
    final(cb) {
      if (closed) return cb();
      if (opts.tty) return ws.send(frame(CHANNEL.stdin, '\x04'), () => cb());
      // v4 has no way to say EOF but closing the whole connection, which would lose the output.
      if (!halfClose) return cb();
      ws.send(closeFrame(CHANNEL.stdin), () => cb());
    },
  });
  stdin.on('error', () => undefined);

  return {
    stdout,
    stderr,
    stdin,
    halfClose,
    ended,
    resize: (size) =>
      new Promise<void>((resolve) => {
        if (closed) return resolve();
        ws.send(resizeFrame(size), () => resolve());
      }),
    destroy() {
      if (closed) return;
      closed = true;
      ws.terminate();
    },
  };
}
