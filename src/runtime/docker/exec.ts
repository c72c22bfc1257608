import { randomUUID } from 'node:crypto';
import { PassThrough, Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { SbxError } from '../../errors.js';
import { KILLED_EXIT_CODE } from '../types.js';
import type { ExecOptions, ExecResult, ExecStream, ExecStreamOptions } from '../types.js';
import type { DockerConnection } from './connection.js';
import { StdStreamDemuxer, StreamOutput } from './demux.js';
import type { ExecOutput } from './demux.js';
import { engineStatus, toSbxError } from './errors.js';
import { hijack } from './hijack.js';
import { EXEC_MARKER_ENV, KILLER_DONE, KILL_SCRIPT } from '../exec-killer.js';
import { AGENT_TOKEN_ENV } from '../agent-protocol.js';
import { abortError, watchForKill } from '../kill-watch.js';
import { execResult, outputCollector } from '../collect-text.js';
import type { KillWatch } from '../kill-watch.js';

/**
 * After the killer ran, how long the output may take to close before the socket is cut: a
 * process the killer could not find may hold it open, and the engine then keeps the stream
 * (and its exec inspect) for 2 s more.
 */
const CUT_AFTER_KILL_MS = 100;
/** After a kill, how long the one exec inspect (start failure or not) may take. */
const INSPECT_AFTER_KILL_MS = 100;
/** The killer is not waited for longer than this (a frozen or overloaded box). */
const KILLER_MAX_MS = 3000;
/**
 * How long an exec may outlive its container before it is ended as killed (137): on gVisor the
 * engine can miss the end of an exec whose box ended under it (a `touch` that lets the box's
 * command exit, under load), and that exec's stream and inspect then never end.
 */
const ENDED_BOX_GRACE_MS = 2000;
/** How often a running exec looks whether its container still runs. */
const ENDED_CHECK_MS = 1000;
/** When a running exec first looks for its process among the box's, and how far apart those looks grow. */
const LOST_CHECK_FIRST_MS = 2000;
const LOST_CHECK_MAX_MS = 16_000;
/** A process found missing is looked for again this much later: the engine holds an exit up to 2 s for its output. */
const LOST_CONFIRM_MS = 3000;
/** How long execStream waits for the engine to say whether the process started, polling at most this far apart. */
const START_WAIT_MS = 2000;
const START_POLL_MAX_MS = 10;
/** How much of the output a start failure's message is read from. */
const MESSAGE_BYTES = 4096;

/** What an exec inspect says, reduced to what sbx decides on. */
interface ExecState {
  running: boolean;
  exitCode: number | null;
  /** The process's pid on the engine's host; 0 while starting and when it never started. */
  pid: number;
}

interface ExecSession {
  stdin: Writable;
  /** Resolves when the output closed: the engine ended it, or sbx cut it. */
  drained: Promise<void>;
  /** True once sbx cut the socket after a kill (something it could not find still held the output). */
  readonly cut: boolean;
  inspect(signal?: AbortSignal): Promise<ExecState>;
  /** Calls `fn` whenever output or the end of the stream arrives; returns the unsubscribe. */
  watchOutput(fn: () => void): () => void;
  /** Runs the killer, then gives the output a moment to close and cuts the socket if it does not. */
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

/** Starts `cmd` and hands its output to `output` as it is read. */
async function startExec(conn: DockerConnection, containerId: string, cmd: string[], opts: StartOptions, output: ExecOutput): Promise<ExecSession> {
  if (!Array.isArray(cmd) || cmd.length === 0 || cmd.some((c) => typeof c !== 'string')) {
    throw new SbxError('invalid_argument', 'cmd: must be a non-empty array of strings', { details: { field: 'cmd' } });
  }
  const marker = randomUUID();
  const env = Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`);
  // Last, so a caller's own SBX_EXEC_ID cannot replace it.
  env.push(`${EXEC_MARKER_ENV}=${marker}`);
  // A name without '=' unsets it: every engine exec inherits the container's env, where a box
  // with the agent keeps its agent's token; no process of the box may see it (docs/agent.md).
  env.push(AGENT_TOKEN_ENV);
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
  const demux = new StdStreamDemuxer(output, opts.tty ?? false);
  const watchers = new Set<() => void>();
  // The output as it is read, from the socket's reused read buffer; a reader that is behind
  // pauses the socket until it caught up.
  const take = (bytes: Buffer) => {
    demux.write(bytes);
    for (const fn of watchers) fn();
    if (output.ready()) return true;
    output.whenReady(() => socket.resume());
    return false;
  };
  const socket = await hijack(conn, `/exec/${execId}/start`, { Detach: false, Tty: opts.tty ?? false }, what, take);

  let ended = false;
  let cut = false;
  // Ended by the engine, or closed without an end (cancel, kill, engine gone): either way all
  // that was read was handed on, so the sides end and the session is over.
  const drained = new Promise<void>((resolve) => {
    const over = () => {
      output.end();
      resolve();
    };
    socket.once('end', () => {
      ended = true;
      over();
    });
    socket.once('close', over);
  });

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
    stdin,
    drained,
    get cut() {
      return cut;
    },
    async inspect(signal) {
      try {
        const info = await exec.inspect(signal ? { abortSignal: signal } : {});
        return { running: info.Running, exitCode: info.ExitCode, pid: (info as { Pid?: number }).Pid ?? 0 };
      } catch (err) {
        throw toSbxError(err, conn.address.raw, what);
      }
    },
    watchOutput(fn) {
      watchers.add(fn);
      socket.on('close', fn);
      return () => {
        watchers.delete(fn);
        socket.off('close', fn);
      };
    },
    async kill() {
      await runKiller(conn, containerId, marker, user);
      if (await within(drained, CUT_AFTER_KILL_MS)) return;
      // Not waiting for a reader that does not read either: wait() and exec still drain.
      cut = !ended;
      socket.destroy();
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

/**
 * Runs the killer and returns once it says it is done, not once its exec ends: the engine
 * handles a box's exec exits one at a time and holds each up to 2 s while an escaped process
 * keeps that exec's output open, so the killer's own exit may be reported seconds late.
 */
async function runKiller(conn: DockerConnection, containerId: string, marker: string, user: string | undefined): Promise<void> {
  let done!: () => void;
  const said = new Promise<void>((resolve) => (done = resolve));
  let text = '';
  const output = bufferedOutput({
    write(bytes) {
      text += bytes.toString('latin1');
      if (text.includes(KILLER_DONE)) done();
    },
  });
  let killer: ExecSession;
  try {
    killer = await startExec(conn, containerId, ['/bin/sh', '-c', KILL_SCRIPT, 'sbx-kill', marker], { ...(user ? { user } : {}), attachStdin: false }, output);
  } catch {
    return;
  }
  // No /bin/sh: the engine's start-failure text, then the end.
  await within(Promise.race([said, killer.drained]), KILLER_MAX_MS);
  killer.destroy();
}

/** Output that is only collected (a buffered exec, the killer): never behind, nothing to end. */
function bufferedOutput(stdout: { write(bytes: Buffer): void }, stderr?: { write(bytes: Buffer): void }): ExecOutput {
  return {
    stdout: (bytes) => stdout.write(bytes),
    stderr: (bytes) => stderr?.write(bytes),
    ready: () => true,
    whenReady: (ready) => ready(),
    end: () => undefined,
  };
}

/** Whether `p` settled within `ms` (it is left running either way; its rejection is ignored). */
async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([
      p.then(
        () => true,
        () => true,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The engine could not start the process: it answered the start with an upgrade anyway, wrote
 * its error text on stdout and set exit code 126 (127 on some versions) with no pid. A
 * process that ran and exited 126 or 127 itself (`sh -c nosuchcmd`) has a pid.
 */
function failedToStart(s: ExecState): boolean {
  return !s.running && s.pid === 0 && (s.exitCode === 126 || s.exitCode === 127);
}

/**
 * The SbxError for a start failure, from the engine's text. Shapes seen on Engine 20.10 (runc):
 * `OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd
 * ("/nope") set in config.json failed: no such file or directory: unknown`,
 * `... exec: "nosuch": executable file not found in $PATH: unknown`,
 * `... exec: "/no/such": stat /no/such: no such file or directory: unknown`, and, from dockerd
 * itself, `unable to find user bob: no matching entries in passwd file`.
 */
export function startError(engineText: string, cmd: string[], opts: { workDir?: string; user?: string }, containerId: string): SbxError {
  const text = engineText.trim() || 'the engine gave no reason';
  const where = `in container ${containerId}`;
  if (/chdir|\bcwd\b|working dir/i.test(text)) {
    return new SbxError('invalid_argument', `workDir: '${opts.workDir ?? ''}' is not a directory the process can enter ${where} (${text})`, {
      details: { field: 'workDir', workDir: opts.workDir ?? null, engine: text },
    });
  }
  if (/unable to find (user|group)|no matching entries in (passwd|group)/i.test(text)) {
    return new SbxError('invalid_argument', `user: '${opts.user ?? ''}' does not exist ${where} (${text})`, {
      details: { field: 'user', user: opts.user ?? null, engine: text },
    });
  }
  if (/executable file not found|no such file or directory|not found/i.test(text)) {
    return new SbxError('not_found', `cmd: '${cmd[0]}' was not found ${where}; check the name and the image's PATH (${text})`, {
      details: { cmd: cmd[0], engine: text },
    });
  }
  return new SbxError('internal', `exec ${where} could not start '${cmd[0]}': ${text}`, { details: { cmd: cmd[0], engine: text } });
}

/** The engine's start-failure text: the first bytes of the output, read until it closes. */
async function failureText(session: ExecSession, stdout: PassThrough, stderr: PassThrough): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  const take = (c: Buffer) => {
    if (size < MESSAGE_BYTES) chunks.push(c.subarray(0, MESSAGE_BYTES - size));
    size += c.length;
  };
  // Read to the end of both sides: the text may still sit in their buffers after the socket closed.
  const ends = [stdout, stderr].map((side) => {
    side.on('data', take);
    return finished(side);
  });
  await within(Promise.all(ends), 1000);
  session.destroy();
  return Buffer.concat(chunks).toString('utf8');
}

/** Runs `cmd` to completion and collects its output (the Runtime's `exec`). */
export async function runBuffered(conn: DockerConnection, containerId: string, cmd: string[], opts: ExecOptions = {}): Promise<ExecResult> {
  const started = performance.now();
  const stdout = outputCollector(opts);
  const stderr = outputCollector(opts);
  const session = await startExec(conn, containerId, cmd, { ...pick(opts), attachStdin: opts.stdin !== undefined }, bufferedOutput(stdout, stderr));
  if (opts.stdin !== undefined) session.stdin.end(Buffer.from(opts.stdin));

  const killed = watchForKill(session, opts);
  const watch = watchEngineExec(conn, containerId, session, killed);
  let exit: { code: number; failed: boolean };
  try {
    await session.drained;
    exit = await untilExit(session, killed);
  } finally {
    watch.stop();
  }
  if (exit.failed) throw startError(stdout.head, cmd, opts, containerId);
  if (killed.reason === 'lost') throw lostExitError(containerId, cmd, watch.lostPid);
  if (killed.reason === 'aborted') throw abortError(opts.signal);
  return execResult(
    {
      exitCode: exit.code,
      timedOut: killed.reason === 'timeout',
      durationMs: Math.round(performance.now() - started),
    },
    stdout,
    stderr,
  );
}

/**
 * Starts `cmd` with live stdio (the Runtime's `execStream`). It returns once the engine says
 * the process runs, so a process that cannot start (bad workDir, missing executable) throws
 * here, like `exec` does, instead of handing back the engine's text as output.
 */
export async function runStreaming(conn: DockerConnection, containerId: string, cmd: string[], opts: ExecStreamOptions = {}): Promise<ExecStream> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const session = await startExec(
    conn,
    containerId,
    cmd,
    { ...pick(opts), ...(opts.tty ? { tty: true } : {}), attachStdin: true },
    new StreamOutput(stdout, stderr),
  );
  let state: ExecState;
  try {
    state = await untilStarted(session);
  } catch (err) {
    session.destroy();
    throw err;
  }
  if (failedToStart(state)) throw startError(await failureText(session, stdout, stderr), cmd, opts, containerId);
  if (opts.tty && opts.size) await session.resize(opts.size).catch(() => undefined);
  const killed = watchForKill(session, opts);
  const watch = watchEngineExec(conn, containerId, session, killed);
  // Settled whether or not anyone waits, so the watch on the container always ends.
  const exit = session.drained
    .then(async () => {
      const { code, failed } = await untilExit(session, killed);
      // Only when the engine took longer than START_WAIT_MS to say: the output was the engine's text.
      if (failed) throw startError('', cmd, opts, containerId);
      if (killed.reason === 'lost') throw lostExitError(containerId, cmd, watch.lostPid);
      return code;
    })
    .finally(() => watch.stop());
  exit.catch(() => undefined);
  return {
    stdout,
    stderr,
    stdin: session.stdin,
    wait() {
      return exit;
    },
    async cancel() {
      await killed.kill('cancelled');
    },
    resize: (size) => session.resize(size),
  };
}

/** What the watch on one engine exec found: the pid whose exit the engine lost, if that is how it ended. */
interface ExecWatch {
  stop(): void;
  readonly lostPid: number | null;
}

/**
 * Watches an engine exec for the two ends the engine can miss, and ends it on either.
 * - Its box ended under it (on gVisor the engine then never reports the exec's end): ended as
 *   killed (`ended`, 137) when the container stopped and the exec has not ended
 *   ENDED_BOX_GRACE_MS later. The container is looked at once a second (a wait request would hold
 *   one of the engine connections for the whole exec).
 * - Its process ended and the engine lost the exit (`lost`). containerd 1.6's runc shim keeps an
 *   exec it could not delete because the box was pausing at that moment (a pause right after an
 *   exec), and takes the exit of a later exec given the same pid for that old one's: the engine
 *   then says the exec runs, forever. Seen as the engine's pid for the exec missing from the
 *   box's processes on two looks LOST_CONFIRM_MS apart, longer than the engine holds an exit
 *   back for its output (2 s). The process is looked for at 2, 4, 8, 16 s and then every 16 s.
 */
function watchEngineExec(conn: DockerConnection, containerId: string, session: ExecSession, killed: KillWatch): ExecWatch {
  let over = false;
  let lostPid: number | null = null;
  const timers = new Set<NodeJS.Timeout>();
  const later = (ms: number, fn: () => Promise<unknown>) => {
    if (over) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (!over) void fn().catch(() => undefined);
    }, ms);
    timers.add(timer);
  };
  const lookAtBox = async () => {
    const running = await conn.docker
      .getContainer(containerId)
      .inspect()
      .then(
        (c) => c.State.Running,
        (err: unknown) => engineStatus(err) !== 404,
      );
    if (running) later(ENDED_CHECK_MS, lookAtBox);
    else later(ENDED_BOX_GRACE_MS, () => killed.kill('ended'));
  };
  let suspect: number | null = null;
  const lookForProcess = async (next: number): Promise<void> => {
    const gone = await goneProcess(conn, containerId, session).catch(() => null);
    if (gone !== null && gone === suspect) {
      lostPid = gone;
      await killed.kill('lost');
      return;
    }
    suspect = gone;
    later(gone === null ? next : LOST_CONFIRM_MS, () => lookForProcess(Math.min(next * 2, LOST_CHECK_MAX_MS)));
  };
  later(ENDED_CHECK_MS, lookAtBox);
  later(LOST_CHECK_FIRST_MS, () => lookForProcess(LOST_CHECK_FIRST_MS * 2));
  return {
    stop() {
      over = true;
      for (const timer of timers) clearTimeout(timer);
    },
    get lostPid() {
      return lostPid;
    },
  };
}

/**
 * The exec's pid when the engine says it runs and that pid is not among the box's processes;
 * null otherwise. The box's own first process must be in the list: a runtime whose processes the
 * engine lists in another pid space (gVisor) gives nothing to judge by.
 */
async function goneProcess(conn: DockerConnection, containerId: string, session: ExecSession): Promise<number | null> {
  const state = await session.inspect();
  if (!state.running || state.pid <= 0) return null;
  const c = conn.docker.getContainer(containerId);
  const [info, top] = await Promise.all([c.inspect(), c.top({ ps_args: '-o pid' }) as Promise<{ Processes?: string[][] | null }>]);
  const pids = new Set((top.Processes ?? []).map((row) => Number(row[0])));
  if (!pids.has(info.State.Pid)) return null;
  return pids.has(state.pid) ? null : state.pid;
}

/** The exec ended, its exit code lost by the engine (watchEngineExec). */
function lostExitError(containerId: string, cmd: string[], pid: number | null): SbxError {
  return new SbxError(
    'internal',
    `exec in container ${containerId}: '${cmd[0]}' ended but the engine lost its exit (its process ${pid} is gone and the engine still says it runs; a containerd 1.6 shim bug after a pause): its exit code is unknown`,
    { details: { id: containerId, cmd: cmd[0], pid, reason: 'exit_lost' } },
  );
}

/**
 * Polls until the engine has started the process (a pid) or failed to. The pid only shows
 * once the engine's start call returns (tens of ms), so polls are short and a poll is also
 * made as soon as output or the end of the stream arrives: a failure's text comes right after
 * the engine recorded it.
 */
async function untilStarted(session: ExecSession): Promise<ExecState> {
  const deadline = Date.now() + START_WAIT_MS;
  let poke: (() => void) | undefined;
  const unwatch = session.watchOutput(() => poke?.());
  try {
    let delay = 2;
    for (;;) {
      const state = await session.inspect();
      if (state.pid > 0 || (!state.running && state.exitCode !== null) || Date.now() > deadline) return state;
      await within(new Promise<void>((resolve) => (poke = resolve)), delay);
      delay = Math.min(delay * 2, START_POLL_MAX_MS);
    }
  } finally {
    unwatch();
  }
}

/**
 * The exit code once the output closed, with the timeout and abort still armed: a process
 * that closed its stdio early is polled for until it exits or is killed. After a kill the
 * answer is 137 without waiting for the engine, which holds the inspect for 2 s while anything
 * keeps the output open.
 */
async function untilExit(session: ExecSession, killed: KillWatch): Promise<{ code: number; failed: boolean }> {
  let delay = 2;
  for (;;) {
    if (killed.reason) return exitAfterKill(session, killed);
    const state = await session.inspect();
    if (!state.running && state.exitCode !== null) {
      killed.stop();
      if (failedToStart(state)) return { code: state.exitCode, failed: true };
      // A kill that fired during the inspect still wins: the caller was told it would be killed.
      return { code: killed.reason ? KILLED_EXIT_CODE : state.exitCode, failed: false };
    }
    await Promise.race([sleep(delay), killed.fired]);
    delay = Math.min(delay * 2, 100);
  }
}

async function exitAfterKill(session: ExecSession, killed: KillWatch): Promise<{ code: number; failed: boolean }> {
  await killed.done;
  // A cut socket means a process held the output: something started, no start failure to find.
  if (session.cut) return { code: KILLED_EXIT_CODE, failed: false };
  const state = await session.inspect(AbortSignal.timeout(INSPECT_AFTER_KILL_MS)).catch(() => undefined);
  return state && failedToStart(state) ? { code: state.exitCode!, failed: true } : { code: KILLED_EXIT_CODE, failed: false };
}

function pick(opts: ExecOptions | ExecStreamOptions): Pick<StartOptions, 'workDir' | 'env' | 'user'> {
  return {
    ...(opts.workDir ? { workDir: opts.workDir } : {}),
    ...(opts.env ? { env: opts.env } : {}),
    ...(opts.user ? { user: opts.user } : {}),
  };
}
