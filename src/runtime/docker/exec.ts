import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import { PassThrough, Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { SbxError } from '../../errors.js';
import { KILLED_EXIT_CODE } from '../types.js';
import type { ExecOptions, ExecResult, ExecStream, ExecStreamOptions } from '../types.js';
import type { DockerConnection } from './connection.js';
import { StdStreamDemuxer } from './demux.js';
import { toSbxError } from './errors.js';

/**
 * Every exec carries this variable so that a timeout or cancel can find and kill the process
 * and everything it started: the Engine API has no "kill exec", and killing the connection
 * leaves the process running.
 */
export const EXEC_MARKER_ENV = 'SBX_EXEC_ID';

// Runs as the exec's own user (who may read its processes' environ) and loops because a
// dying tree can fork between passes.
const KILL_SCRIPT = `m="${EXEC_MARKER_ENV}=$1"; for pass in 1 2 3; do found=0; for d in /proc/[0-9]*; do p=\${d#/proc/}; [ "$p" = "$$" ] && continue; if tr '\\0' '\\n' < "$d/environ" 2>/dev/null | grep -qxF "$m"; then kill -9 "$p" 2>/dev/null && found=1; fi; done; [ $found = 0 ] && break; done; exit 0`;

const DEFAULT_MAX_OUTPUT = 64 * 1024 * 1024;
/** After a kill, how long the output may take to close before the socket is cut. */
const KILL_GRACE_MS = 2000;

interface ExecSession {
  stdout: PassThrough;
  stderr: PassThrough;
  stdin: Writable;
  /** Resolves when the engine closed the output (the process and its stdio are gone). */
  drained: Promise<void>;
  /** Polls until the process has exited; `giveUp` ends the wait with 137 (a kill that did not take). */
  exitCode(giveUp?: () => boolean): Promise<number>;
  kill(): Promise<void>;
  resize(size: { cols: number; rows: number }): Promise<void>;
  destroy(): void;
}

interface StartOptions {
  workDir?: string;
  env?: Record<string, string>;
  user?: string;
  tty?: boolean;
  attachStdin: boolean;
}

async function startExec(conn: DockerConnection, containerId: string, cmd: string[], opts: StartOptions): Promise<ExecSession> {
  if (!Array.isArray(cmd) || cmd.length === 0 || cmd.some((c) => typeof c !== 'string')) {
    throw new SbxError('invalid_argument', 'cmd: must be a non-empty array of strings', { details: { field: 'cmd' } });
  }
  const marker = randomUUID();
  const env = Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`);
  env.push(`${EXEC_MARKER_ENV}=${marker}`);
  const what = `exec in container ${containerId}`;
  let execId: string;
  try {
    const exec = await conn.docker.getContainer(containerId).exec({
      Cmd: cmd,
      Env: env,
      AttachStdin: opts.attachStdin,
      AttachStdout: true,
      AttachStderr: true,
      Tty: opts.tty ?? false,
      ...(opts.workDir ? { WorkingDir: opts.workDir } : {}),
      ...(opts.user ? { User: opts.user } : {}),
    });
    execId = exec.id;
  } catch (err) {
    throw toSbxError(err, conn.address.raw, what);
  }
  const socket = await hijack(conn, `/exec/${execId}/start`, { Detach: false, Tty: opts.tty ?? false }, what);

  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const sink: Writable = opts.tty ? stdout : new StdStreamDemuxer(stdout, stderr);
  const drained = new Promise<void>((resolve) => {
    let settled = false;
    let ended = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      if (opts.tty) stderr.end();
      resolve();
    };
    sink.once('finish', finish);
    socket.once('end', () => (ended = true));
    socket.once('close', () => {
      // Ended normally: pipe() ends the sink, and 'finish' follows once all output is handed on.
      if (ended) return;
      // Destroyed (cancel, kill grace, engine gone): a reader that never reads must not keep
      // the session open, so give the sink a moment to flush and call it over.
      if (!sink.writableEnded) sink.end();
      setTimeout(finish, 100).unref();
    });
  });
  socket.on('error', () => undefined);
  socket.pipe(sink);

  const stdin = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (socket.destroyed) return cb();
      socket.write(chunk, () => cb());
    },
    final(cb) {
      if (socket.destroyed) return cb();
      // A terminal has no half-close (the engine ends the whole session on it): EOF on a tty
      // is ^D. Without a tty, half-close: the process reads EOF while its output keeps
      // arriving on the same socket.
      if (opts.tty) socket.write(Buffer.from([4]), () => cb());
      else {
        socket.end();
        cb();
      }
    },
  });
  stdin.on('error', () => undefined);

  const exec = conn.docker.getExec(execId);
  const user = opts.user;
  return {
    stdout,
    stderr,
    stdin,
    drained,
    async exitCode(giveUp = () => false) {
      // The output closes when the process exits, so this is usually one call; a process that
      // closed its stdio early is waited for here.
      let delay = 2;
      for (;;) {
        const info = await exec.inspect().catch((err: unknown) => {
          throw toSbxError(err, conn.address.raw, what);
        });
        if (!info.Running && info.ExitCode !== null) return info.ExitCode;
        if (giveUp()) return KILLED_EXIT_CODE;
        await sleep(delay);
        delay = Math.min(delay * 2, 100);
      }
    },
    async kill() {
      await runBuffered(conn, containerId, ['/bin/sh', '-c', KILL_SCRIPT, 'sbx-kill', marker], user ? { user } : {}).catch(() => undefined);
      const cut = setTimeout(() => socket.destroy(), KILL_GRACE_MS);
      await drained;
      clearTimeout(cut);
    },
    async resize({ cols, rows }) {
      try {
        await exec.resize({ h: rows, w: cols });
      } catch (err) {
        throw toSbxError(err, conn.address.raw, what);
      }
    },
    destroy() {
      socket.destroy();
    },
  };
}

/** POSTs `path` asking for a protocol upgrade and returns the raw duplex socket. */
function hijack(conn: DockerConnection, path: string, body: unknown, what: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify(body);
    const req = conn.rawRequest({
      method: 'POST',
      path,
      headers: {
        'Content-Type': 'application/json',
        'Content-Length': Buffer.byteLength(payload),
        Connection: 'Upgrade',
        Upgrade: 'tcp',
      },
    });
    req.once('upgrade', (_res, socket, head) => {
      socket.setNoDelay(true);
      if (head.length > 0) socket.unshift(head);
      resolve(socket);
    });
    req.once('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        let message = Buffer.concat(chunks).toString('utf8');
        try {
          message = (JSON.parse(message) as { message?: string }).message ?? message;
        } catch {
          /* plain text body */
        }
        reject(toSbxError({ statusCode: res.statusCode, json: { message } }, conn.address.raw, what));
      });
    });
    req.once('error', (err) => reject(toSbxError(err, conn.address.raw, what)));
    req.end(payload);
  });
}

/** Runs `cmd` to completion and collects its output (the Runtime's `exec`). */
export async function runBuffered(conn: DockerConnection, containerId: string, cmd: string[], opts: ExecOptions = {}): Promise<ExecResult> {
  const started = performance.now();
  const limit = opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT;
  const session = await startExec(conn, containerId, cmd, {
    ...pick(opts),
    attachStdin: opts.stdin !== undefined,
  });
  let truncated = false;
  const collect = (stream: PassThrough) => {
    const chunks: Buffer[] = [];
    let size = 0;
    stream.on('data', (chunk: Buffer) => {
      if (size >= limit) {
        truncated = true;
        return;
      }
      const room = limit - size;
      if (chunk.length > room) {
        truncated = true;
        chunk = chunk.subarray(0, room);
      }
      chunks.push(chunk);
      size += chunk.length;
    });
    return () => Buffer.concat(chunks).toString('utf8');
  };
  const stdout = collect(session.stdout);
  const stderr = collect(session.stderr);
  if (opts.stdin !== undefined) session.stdin.end(Buffer.from(opts.stdin));

  const killed = watchForKill(session, opts);
  await session.drained;
  const exitCode = await untilExit(session, killed);
  if (killed.reason === 'aborted') throw abortError(opts.signal);
  return {
    exitCode,
    stdout: stdout(),
    stderr: stderr(),
    truncated,
    timedOut: killed.reason === 'timeout',
    durationMs: Math.round(performance.now() - started),
  };
}

/** Starts `cmd` with live stdio (the Runtime's `execStream`). */
export async function runStreaming(conn: DockerConnection, containerId: string, cmd: string[], opts: ExecStreamOptions = {}): Promise<ExecStream> {
  const session = await startExec(conn, containerId, cmd, { ...pick(opts), ...(opts.tty ? { tty: true } : {}), attachStdin: true });
  if (opts.tty && opts.size) await session.resize(opts.size).catch(() => undefined);
  const killed = watchForKill(session, opts);
  let exit: Promise<number> | undefined;
  return {
    stdout: session.stdout,
    stderr: session.stderr,
    stdin: session.stdin,
    wait() {
      exit ??= session.drained.then(() => untilExit(session, killed));
      return exit;
    },
    async cancel() {
      await killed.kill('cancelled');
    },
    resize: (size) => session.resize(size),
  };
}

/** The exit code, with the timeout and abort still armed until the process is gone. */
async function untilExit(session: ExecSession, killed: ReturnType<typeof watchForKill>): Promise<number> {
  const code = await session.exitCode(() => killed.reason !== undefined && Date.now() - killed.at > KILL_GRACE_MS);
  killed.stop();
  return killed.reason ? KILLED_EXIT_CODE : code;
}

function pick(opts: ExecOptions | ExecStreamOptions): Pick<StartOptions, 'workDir' | 'env' | 'user'> {
  return {
    ...(opts.workDir ? { workDir: opts.workDir } : {}),
    ...(opts.env ? { env: opts.env } : {}),
    ...(opts.user ? { user: opts.user } : {}),
  };
}

type KillReason = 'timeout' | 'aborted' | 'cancelled';

/** Arms the timeout and abort signal of one exec; the first to fire kills it inside the box. */
function watchForKill(session: ExecSession, opts: { timeoutMs?: number; signal?: AbortSignal }) {
  const state: { reason: KillReason | undefined; at: number; kill(reason: KillReason): Promise<void>; stop(): void } = {
    reason: undefined,
    at: 0,
    async kill(reason) {
      if (state.reason) return;
      state.reason = reason;
      state.at = Date.now();
      state.stop();
      await session.kill();
    },
    stop() {
      if (timer) clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
    },
  };
  const onAbort = () => void state.kill('aborted');
  const timer = opts.timeoutMs && opts.timeoutMs > 0 ? setTimeout(() => void state.kill('timeout'), opts.timeoutMs) : undefined;
  if (opts.signal?.aborted) onAbort();
  else opts.signal?.addEventListener('abort', onAbort, { once: true });
  return state;
}

function abortError(signal: AbortSignal | undefined): SbxError {
  const reason: unknown = signal?.reason;
  return new SbxError('cancelled', `exec aborted: ${reason instanceof Error ? reason.message : String(reason ?? 'aborted')}`, { cause: reason });
}
