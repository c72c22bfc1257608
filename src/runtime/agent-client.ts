/**
 * Exec through the in-box agent (docs/agent.md): a TCP connection per exec, to the box's bridge
 * address (Docker) or through the API server's port-forward (Kubernetes), presenting the box's
 * token. On Docker an exec's connection is kept for the box's next one (a few idle ones per box,
 * for seconds): no connect and no accept per exec. A buffered exec with stdin, or a stream that
 * sent stdin or had a terminal, is not kept. Same results and stream semantics as
 * the engine path, which stays the fallback on Docker: `AgentUnreachable` before anything ran
 * tells the runtime.
 */
import { createHmac } from 'node:crypto';
import net from 'node:net';
import { PassThrough, Writable } from 'node:stream';
import type { Duplex } from 'node:stream';
import { SbxError } from '../errors.js';
import { KILLED_EXIT_CODE, PROCESS_SIGNALS } from './types.js';
import type { ExecOptions, ExecResult, ExecStream, ExecStreamOptions } from './types.js';
import { AgentFrameReader, F, HOST_PROTOCOL_VERSIONS, STDIN_CHUNK, STDIN_WINDOW, frame } from './agent-protocol.js';
import type { ErrorMessage, ExitMessage, StartRequest } from './agent-protocol.js';
import { abortError, watchForKill } from './kill-watch.js';
import { collectOutput, execResult } from './collect-text.js';

/** After a kill, how long the agent may take to say the exec ended before the connection is cut (the agent kills on disconnect too). */
const KILL_GRACE_MS = 3000;

/**
 * The agent cannot be reached (nothing listening, a protocol it does not speak, a refusal of the
 * token: another box's agent now holds the address): nothing ran.
 */
export class AgentUnreachable extends Error {
  override readonly name = 'AgentUnreachable';
  constructor(
    message: string,
    readonly reason: 'connect' | 'version' | 'closed' | 'forbidden',
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** One box's agent: how to open a connection to it, and what to say. */
export interface AgentTarget {
  /** The box, for messages. */
  containerId: string;
  /** Where the agent listens, for messages (`172.17.0.2:43011`, `port 43011 of pod x`). */
  where: string;
  /** Opens one connection; a rejection or an `error` before the hello means nothing ran. */
  connect(): Duplex | Promise<Duplex>;
  /** The box's secret, which the agent requires in every HELLO: as it is (Kubernetes' port-forward) … */
  token?: string;
  /** … or, in its place, helloProof(token, the address dialled) (Docker: the token never goes on the wire). */
  proof?: string;
  /** Set: a buffered exec's connection may be kept for the next exec on this target (the key of its idle connections). */
  keepKey?: string;
}

/**
 * How long a connection to an agent on a local bridge may take to open: it takes well under a
 * millisecond; an address nobody holds any more would otherwise hang for seconds (ARP).
 */
const CONNECT_TIMEOUT_MS = 1000;

/**
 * What a HELLO presents in place of the token (agent/session.go helloProof): HMAC-SHA256 keyed
 * with the token over the address dialled, which the agent sees as its end of the connection.
 * A container that holds an address the host still thinks is the box's (the box restarted behind
 * its back) gets a proof that the box's agent, at its own address, refuses.
 */
export function helloProof(token: string, address: string): string {
  return createHmac('sha256', token).update(`sbx-agent-hello ${address}`).digest('hex');
}

/**
 * The line the agent writes to its stderr (the box's log) when the kernel's OOM killer took the
 * box's command (agent/oom.go), up to the proof that ends it.
 */
export const AGENT_OOM_LINE = "sbx-agent: the command was killed by the kernel's OOM killer (the box's memory limit)";

/**
 * The proof that ends the agent's OOM line, `[oom:<proof>]`: HMAC-SHA256 keyed with the box's
 * token over a fixed label, its first 16 bytes in hex. Box processes never see the token, so a
 * command that prints the line cannot end it rightly.
 */
export function oomProof(token: string): string {
  return createHmac('sha256', token).update('sbx-agent-oom').digest('hex').slice(0, 32);
}

/** Whether the text (the box's log) holds the agent's OOM line with this token's proof, as a whole line. */
export function hasOomLine(text: string, token: string): boolean {
  const want = `${AGENT_OOM_LINE} [oom:${oomProof(token)}]`;
  return text.split('\n').some((line) => line.replace(/\r$/, '') === want);
}

/** The agent's TCP listener at `host:port` (Docker: the box's bridge address, an IPv4 address). */
export function tcpTarget(containerId: string, host: string, port: number, token: string): AgentTarget {
  const where = `${host}:${port}`;
  const proof = helloProof(token, where);
  return {
    containerId,
    where,
    proof,
    // The proof binds token and address: another box at the address never gets this one's connections.
    keepKey: `${where} ${proof}`,
    connect: () => {
      const socket = net.createConnection({ host, port });
      // A plain timer, not socket.setTimeout (whose idle timer every read and write touches).
      const timer = setTimeout(
        () => socket.destroy(Object.assign(new Error(`connect timed out after ${CONNECT_TIMEOUT_MS} ms`), { code: 'ETIMEDOUT' })),
        CONNECT_TIMEOUT_MS,
      );
      const settled = () => clearTimeout(timer);
      socket.once('connect', settled).once('close', settled);
      return socket;
    },
  };
}

function helloFrame(target: AgentTarget, client: string): Buffer {
  return frame(F.hello, {
    versions: HOST_PROTOCOL_VERSIONS,
    client,
    ...(target.proof ? { proof: target.proof } : target.token ? { token: target.token } : {}),
  });
}

/** Connects, or says why not as AgentUnreachable (nothing ran). */
async function connectTo(target: AgentTarget): Promise<Duplex> {
  try {
    const socket = await target.connect();
    (socket as Partial<net.Socket>).setNoDelay?.(true);
    return socket;
  } catch (err) {
    throw new AgentUnreachable(`no agent answers on ${target.where}: ${(err as Error).message}`, 'connect', { cause: err });
  }
}

/** How long a kept connection waits for the next exec before it is closed (the agent waits 60 s). */
const KEEP_IDLE_MS = 5000;
/** Idle connections kept per box at most (parallel execs open more; the rest close after use). */
const KEEP_MAX = 4;

interface IdleConnection {
  socket: Duplex & Partial<Pick<net.Socket, 'ref' | 'unref'>>;
  timer: NodeJS.Timeout;
  gone: () => void;
}

/** Idle kept connections by AgentTarget.keepKey, most recently used last. */
const idleConnections = new Map<string, IdleConnection[]>();

function dropIdle(key: string, conn: IdleConnection): void {
  const list = idleConnections.get(key);
  const at = list?.indexOf(conn) ?? -1;
  if (list && at >= 0) list.splice(at, 1);
  if (list?.length === 0) idleConnections.delete(key);
  clearTimeout(conn.timer);
  conn.socket.off('data', conn.gone).off('end', conn.gone).off('error', conn.gone).off('close', conn.gone);
}

/** A kept connection to the target, ready for HELLO+START, or undefined. */
function takeIdle(target: AgentTarget): Duplex | undefined {
  const key = target.keepKey;
  const conn = key ? idleConnections.get(key)?.at(-1) : undefined;
  if (!key || !conn) return undefined;
  dropIdle(key, conn);
  conn.socket.pause();
  conn.socket.ref?.();
  return conn.socket;
}

/**
 * Closes the kept connections to the target: its box is about to go away under them without a
 * FIN (a checkpoint ends the sandbox, whose restore knows nothing of the host's half), and a
 * silent kept connection would cost the next exec KEPT_ANSWER_MS.
 */
export function dropKeptConnections(target: AgentTarget): void {
  const key = target.keepKey;
  for (const conn of (key ? idleConnections.get(key) : undefined)?.slice() ?? []) conn.gone();
}

/** Keeps a connection whose exec ended cleanly for the target's next exec; it holds no event loop open. */
function keepIdle(target: AgentTarget, socket: Duplex): void {
  const key = target.keepKey!;
  const list = idleConnections.get(key) ?? [];
  if (list.length >= KEEP_MAX || socket.destroyed) return void socket.destroy();
  const conn: IdleConnection = {
    socket,
    timer: setTimeout(() => conn.gone(), KEEP_IDLE_MS).unref(),
    // Anything from an idle agent (its close, a stray frame) ends the connection.
    gone: () => {
      dropIdle(key, conn);
      socket.destroy();
    },
  };
  socket.on('data', conn.gone).on('end', conn.gone).on('error', conn.gone).on('close', conn.gone);
  (socket as IdleConnection['socket']).unref?.();
  list.push(conn);
  idleConnections.set(key, list);
  socket.resume();
}

/**
 * How long the agent on a kept connection may take to answer the HELLO sent before the START
 * (it answers before it reads the START): a box whose address went away without a FIN leaves
 * the connection silent. Generous, so that an agent that is only slow (a loaded machine, a box
 * at its CPU limit) is not cut after it may have started the exec; the agent's own limit for a
 * HELLO is 10 s.
 */
const KEPT_ANSWER_MS = 5000;

/**
 * A kept connection that closed (or stayed silent) before its agent answered the HELLO before
 * the START: nothing ran; a new connection is tried.
 */
class StaleConnection extends Error {}

interface Session {
  stdout: PassThrough;
  stderr: PassThrough;
  stdin: Writable;
  /** The agent started the process (its pid in the box), or it could not. */
  started: Promise<number>;
  /** The agent's EXIT (or a lost connection, reported as killed). */
  exited: Promise<ExitMessage & { lost?: boolean }>;
  /** All output was handed to stdout and stderr, which have ended. */
  drained: Promise<void>;
  kill(): Promise<void>;
  resize(size: { cols: number; rows: number }): void;
  signal(signal: number): void;
  destroy(): void;
  /**
   * Done with the session: its connection is kept for the next exec when the START said keep, it
   * ended cleanly and no stdin went on it, else closed. Stdin, resizes and signals after it go nowhere.
   */
  release(): void;
}

async function openSession(target: AgentTarget, req: StartRequest, fresh = false): Promise<Session> {
  const kept = fresh ? undefined : takeIdle(target);
  const socket = kept ?? (await connectTo(target));
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  // A kept connection said its HELLO already.
  let helloed = !!kept;
  let answered = false;
  let exitMsg: (ExitMessage & { lost?: boolean }) | undefined;
  /** Set once STARTED or an error settled `started`: later failures need no error object built. */
  let startSettled = false;
  let resolveStarted!: (pid: number) => void;
  let rejectStarted!: (err: Error) => void;
  const started = new Promise<number>((res, rej) => {
    resolveStarted = res;
    rejectStarted = rej;
  });
  started.catch(() => undefined);
  let resolveExited!: (e: ExitMessage & { lost?: boolean }) => void;
  const exited = new Promise<ExitMessage & { lost?: boolean }>((res) => (resolveExited = res));

  // Stdin: at most STDIN_WINDOW unacknowledged bytes on the wire, so the agent never blocks
  // its control frames (kill, resize) behind a process that does not read.
  let inFlight = 0;
  /** A stdin frame went out: its acknowledgement could still be on the way after EXIT. */
  let stdinSent = false;
  /** The connection went back to the idle ones (release): nothing more of this session goes on it. */
  let released = false;
  const pending: Array<{ buf: Buffer; cb?: () => void }> = [];
  const pump = () => {
    while (pending.length > 0) {
      if (socket.destroyed || released) {
        for (const p of pending.splice(0)) p.cb?.();
        return;
      }
      const head = pending[0]!;
      const piece = head.buf.subarray(0, STDIN_CHUNK);
      if (piece.length > 0 && inFlight + piece.length > STDIN_WINDOW) return;
      if (piece.length === 0) {
        // An end-of-input marker.
        pending.shift();
        stdinSent = true;
        socket.write(frame(F.stdinEof));
        head.cb?.();
        continue;
      }
      inFlight += piece.length;
      stdinSent = true;
      socket.write(frame(F.stdin, piece));
      head.buf = head.buf.subarray(piece.length);
      if (head.buf.length === 0) {
        pending.shift();
        head.cb?.();
      }
    }
  };
  const stdin = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (chunk.length === 0) return cb();
      pending.push({ buf: chunk, cb: () => cb() });
      pump();
    },
    final(cb) {
      pending.push({ buf: Buffer.alloc(0), cb: () => cb() });
      pump();
    },
  });
  stdin.on('error', () => undefined);

  // On a kept connection the HELLO is a ping, sent with the START (no extra round trip): its
  // answer says the agent is still there.
  const silence = kept ? setTimeout(() => socket.destroy(), KEPT_ANSWER_MS) : undefined;
  const reader = new AgentFrameReader(stdout, stderr, (type, payload) => {
    answered = true;
    clearTimeout(silence);
    switch (type) {
      case F.helloOk:
        helloed = true;
        return;
      case F.started:
        startSettled = true;
        resolveStarted((JSON.parse(payload.toString('utf8')) as { pid: number }).pid);
        return;
      case F.stdinAck:
        if (payload.length >= 4) inFlight = Math.max(0, inFlight - payload.readUInt32BE(0));
        pump();
        return;
      case F.exit:
        exitMsg = JSON.parse(payload.toString('utf8')) as ExitMessage;
        // EXIT is the agent's last frame: all output is handed on. The connection's own end can
        // lag (Kubernetes' port-forward closes ~1 s after the agent's half-close).
        for (const side of [stdout, stderr]) if (!side.writableEnded) side.end();
        resolveExited(exitMsg);
        void Promise.all([stdout, stderr].map(consumed)).then(resolveDrained);
        return;
      case F.error: {
        let e: ErrorMessage;
        try {
          e = JSON.parse(payload.toString('utf8')) as ErrorMessage;
        } catch {
          e = { code: 'internal', message: payload.toString('utf8') };
        }
        if (e.code === 'version' || (e.code === 'forbidden' && !helloed))
          rejectStarted(new AgentUnreachable(`the agent on ${target.where} refused this host: ${e.message}`, e.code));
        else rejectStarted(startError(e, req, target.containerId));
        return;
      }
    }
  });
  let resolveDrained!: () => void;
  const drained = new Promise<void>((resolve) => {
    resolveDrained = resolve;
    reader.once('finish', resolve);
    reader.once('error', () => resolve());
  });
  // A malformed frame ends the session as a lost connection would (the close handler reports it).
  reader.on('error', () => socket.destroy());
  socket.pipe(reader);
  const onError = (err: NodeJS.ErrnoException) => {
    if (!helloed) rejectStarted(new AgentUnreachable(`no agent answers on ${target.where}: ${err.code ?? err.message}`, 'connect', { cause: err }));
  };
  const onClose = () => {
    clearTimeout(silence);
    if (kept && !answered) rejectStarted(new StaleConnection());
    if (!reader.writableEnded) reader.end();
    for (const side of [stdout, stderr]) if (!side.writableEnded) side.end();
    if (!helloed) rejectStarted(new AgentUnreachable(`the agent on ${target.where} closed the connection before its hello`, 'closed'));
    else if (!startSettled)
      rejectStarted(new SbxError('internal', `the agent in container ${target.containerId} closed the connection before the exec started`));
    // The box stopped under the exec, or the agent died: the process is gone.
    if (!exitMsg) resolveExited({ exitCode: KILLED_EXIT_CODE, killed: true, lost: true });
    pump();
  };
  socket.on('error', onError);
  socket.once('close', onClose);
  socket.write(Buffer.concat([helloFrame(target, 'sbx'), frame(F.start, req)]));

  let killing: Promise<void> | undefined;
  return {
    stdout,
    stderr,
    stdin,
    started,
    exited,
    drained,
    kill() {
      killing ??= (async () => {
        if (exitMsg || socket.destroyed) return;
        socket.write(frame(F.kill));
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([exited, new Promise<void>((resolve) => (timer = setTimeout(resolve, KILL_GRACE_MS)))]);
        clearTimeout(timer);
        // An agent that does not answer: cutting the connection makes it kill too.
        if (!exitMsg) socket.destroy();
      })();
      return killing;
    },
    resize({ cols, rows }) {
      if (!socket.destroyed && !released) socket.write(frame(F.resize, { cols, rows }));
    },
    signal(signal) {
      if (!socket.destroyed && !released && !exitMsg) socket.write(frame(F.signal, { signal }));
    },
    destroy() {
      socket.destroy();
    },
    release() {
      // Kept only after a clean EXIT of a START that said keep, with no kill under way and no
      // stdin sent (its acknowledgements could come after EXIT): the agent then waits for the
      // next START and sends nothing before it.
      if (released) return;
      if (!req.keep || !exitMsg || exitMsg.lost || killing || stdinSent || socket.destroyed) return void socket.destroy();
      released = true;
      socket.unpipe(reader);
      socket.off('error', onError).off('close', onClose);
      keepIdle(target, socket);
    },
  };
}

/**
 * Settles once a reader that is consuming `side` has had all of it (its `end`); when nobody reads
 * it, at once (the rest stays buffered for a later reader), so an unread side never holds up the
 * exit. Looked at one event-loop turn later: EXIT often comes in the same read as STARTED, before
 * the caller of execStream could even attach its reader.
 */
function consumed(side: PassThrough): Promise<void> {
  return new Promise((resolve) =>
    setImmediate(() => {
      if (side.readableEnded || side.readableFlowing !== true) return resolve();
      side.once('end', resolve);
      side.once('close', resolve);
    }),
  );
}

/** The agent's start failure as the engine path reports it (exec.ts startError): same codes and fields. */
function startError(e: ErrorMessage, req: StartRequest, containerId: string): SbxError {
  const where = `in container ${containerId}`;
  const text = e.message;
  if (e.code === 'invalid_argument' && e.field === 'workDir') {
    return new SbxError('invalid_argument', `workDir: '${req.workDir ?? ''}' is not a directory the process can enter ${where} (${text})`, {
      details: { field: 'workDir', workDir: req.workDir ?? null, agent: text },
    });
  }
  if (e.code === 'invalid_argument' && e.field === 'user') {
    return new SbxError('invalid_argument', `user: '${req.user ?? ''}' does not exist ${where} (${text})`, {
      details: { field: 'user', user: req.user ?? null, agent: text },
    });
  }
  if (e.code === 'invalid_argument') return new SbxError('invalid_argument', text, { details: { field: e.field ?? 'cmd', agent: text } });
  if (e.code === 'not_found') {
    return new SbxError('not_found', `cmd: '${req.argv[0]}' was not found ${where}; check the name and the image's PATH (${text})`, {
      details: { cmd: req.argv[0], agent: text },
    });
  }
  if (e.code === 'forbidden') return new SbxError('forbidden', `the agent in container ${containerId} refused: ${text}`);
  if (e.code === 'not_available')
    return new SbxError('not_available', `exec ${where}: ${text}`, { details: { field: e.field ?? 'user', reason: 'exec_user' } });
  return new SbxError('internal', `exec ${where} could not start '${req.argv[0]}': ${text}`, { details: { cmd: req.argv[0], agent: text } });
}

function request(cmd: string[], opts: { workDir?: string; env?: Record<string, string>; user?: string }, defaultUser: string | undefined): StartRequest {
  const user = opts.user ?? defaultUser;
  return {
    argv: cmd,
    ...(opts.env ? { env: opts.env } : {}),
    ...(opts.workDir ? { workDir: opts.workDir } : {}),
    ...(user ? { user } : {}),
  };
}

/**
 * Opens a session and waits for its STARTED: on a kept connection that turns out stale (closed or
 * silent before its agent answered, so nothing ran), once more on a new connection.
 */
async function startSession(target: AgentTarget, req: StartRequest): Promise<{ session: Session; pid: number }> {
  let session = await openSession(target, req);
  try {
    return { session, pid: await session.started };
  } catch (err) {
    session.destroy();
    if (!(err instanceof StaleConnection)) throw err;
  }
  session = await openSession(target, req, true);
  try {
    return { session, pid: await session.started };
  } catch (err) {
    session.destroy();
    throw err;
  }
}

/** Runs `cmd` to completion through the agent (the Runtime's `exec`). */
export async function agentExec(target: AgentTarget, cmd: string[], opts: ExecOptions = {}): Promise<ExecResult> {
  const t0 = performance.now();
  // Kept for the next exec: a connection that carried no stdin (whose acknowledgements could
  // still be on the way after EXIT).
  const req: StartRequest = {
    ...request(cmd, opts, undefined),
    stdin: opts.stdin !== undefined,
    ...(target.keepKey && opts.stdin === undefined ? { keep: true } : {}),
  };
  const { session } = await startSession(target, req);
  const stdout = collectOutput(session.stdout, opts);
  const stderr = collectOutput(session.stderr, opts);
  if (opts.stdin !== undefined) session.stdin.end(Buffer.from(opts.stdin));
  const killed = watchForKill(session, opts);
  const exit = await session.exited;
  killed.stop();
  await session.drained;
  if (killed.reason) session.destroy();
  else session.release();
  if (killed.reason === 'aborted') throw abortError(opts.signal);
  return execResult(
    {
      exitCode: killed.reason ? KILLED_EXIT_CODE : exit.exitCode,
      timedOut: killed.reason === 'timeout',
      durationMs: Math.round(performance.now() - t0),
    },
    stdout,
    stderr,
  );
}

/** Starts `cmd` with live stdio through the agent (the Runtime's `execStream`); returns once it runs. */
export async function agentExecStream(target: AgentTarget, cmd: string[], opts: ExecStreamOptions = {}): Promise<ExecStream> {
  // Kept for the next exec like a buffered one, unless stdin goes on it (release() sees that) or
  // it has a terminal (an interactive session: a connect is nothing beside it).
  const { session, pid } = await startSession(target, {
    ...request(cmd, opts, undefined),
    stdin: true,
    ...(opts.tty ? { tty: true, ...(opts.size ? { cols: opts.size.cols, rows: opts.size.rows } : {}) } : {}),
    ...(target.keepKey && !opts.tty ? { keep: true } : {}),
  });
  const killed = watchForKill(session, opts);
  // Settled at the exit whether or not wait() is called: a kept connection goes back to the idle
  // ones (which hold no event loop open) as soon as the output was read.
  const exit = session.exited.then(async (e) => {
    killed.stop();
    await session.drained;
    if (killed.reason) session.destroy();
    else session.release();
    return killed.reason ? KILLED_EXIT_CODE : e.exitCode;
  });
  return {
    pid,
    stdout: session.stdout,
    stderr: session.stderr,
    stdin: session.stdin,
    wait() {
      return exit;
    },
    async cancel() {
      await killed.kill('cancelled');
    },
    async resize(size) {
      session.resize(size);
    },
    async signal(name) {
      session.signal(PROCESS_SIGNALS[name]);
    },
  };
}

/** A probe's outcome: the agent's hello, or why not (`refused`: the agent answered with its error, so it listens). */
export type ProbeResult = { ok: true; agent: string; version: number } | { ok: false; why: string; refused?: true };

/** Whether the agent answers its hello (one short connection). */
export async function probeAgent(target: AgentTarget, timeoutMs = 1000): Promise<ProbeResult> {
  let socket: Duplex;
  try {
    socket = await connectTo(target);
  } catch (err) {
    return { ok: false, why: (err as Error).message };
  }
  return new Promise((resolve) => {
    const done = (r: ProbeResult) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => done({ ok: false, why: 'no answer' }), timeoutMs);
    const stdout = new PassThrough();
    const reader = new AgentFrameReader(stdout, stdout, (type, payload) => {
      if (type === F.helloOk) {
        const h = JSON.parse(payload.toString('utf8')) as { agent: string; version: number };
        done({ ok: true, agent: h.agent, version: h.version });
      } else if (type === F.error) done({ ok: false, why: payload.toString('utf8'), refused: true });
    });
    reader.on('error', () => done({ ok: false, why: 'bad frame' }));
    socket.pipe(reader);
    socket.on('error', (err: NodeJS.ErrnoException) => done({ ok: false, why: err.code ?? err.message }));
    socket.on('close', () => done({ ok: false, why: 'closed' }));
    socket.write(helloFrame(target, 'sbx-probe'));
  });
}

/**
 * Sets variables of the box's environment in its agent (one short connection): every later exec
 * gets them under its own, and the heartbeat reads SBX_API_URL, SBX_TOKEN and SBX_SANDBOX_ID from
 * them. What a claimed warm spare learns of the box it became.
 */
export async function configureAgent(target: AgentTarget, env: Record<string, string>, timeoutMs = 2000): Promise<void> {
  const socket = await connectTo(target);
  return new Promise((resolve, reject) => {
    let settled = false;
    const done = (err?: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(
      () => done(new AgentUnreachable(`the agent on ${target.where} did not answer CONFIGURE within ${timeoutMs} ms`, 'closed')),
      timeoutMs,
    );
    const sink = new PassThrough();
    const reader = new AgentFrameReader(sink, sink, (type, payload) => {
      if (type === F.configured) done();
      else if (type === F.error) {
        const e = JSON.parse(payload.toString('utf8')) as ErrorMessage;
        done(
          e.code === 'version' || e.code === 'forbidden'
            ? new AgentUnreachable(`the agent on ${target.where} refused this host: ${e.message}`, e.code)
            : new SbxError('internal', `agent: ${e.message}`),
        );
      }
    });
    reader.on('error', (err: Error) => done(err));
    socket.pipe(reader);
    socket.on('error', (err: NodeJS.ErrnoException) =>
      done(new AgentUnreachable(`no agent answers on ${target.where}: ${err.code ?? err.message}`, 'connect', { cause: err })),
    );
    socket.on('close', () => done(new AgentUnreachable(`the agent on ${target.where} closed the connection before CONFIGURED`, 'closed')));
    socket.write(Buffer.concat([helloFrame(target, 'sbx'), frame(F.configure, { env })]));
  });
}
