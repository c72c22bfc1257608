/**
 * Exec in a box's pod through the API server (exec-channel.ts), until the in-box agent serves
 * exec on Kubernetes too.
 *
 * Kubernetes' exec takes only argv: no env, no working directory, no user. So every exec runs
 * a fixed wrapper, `/bin/sh -c WRAPPER sbx-exec <marker> <workDir> NAME=value… -- argv…`: the
 * script is a constant and everything of the caller's is a positional parameter, exported or
 * exec'd as it is, never parsed by the shell. The wrapper also reports a process that cannot
 * start (missing, not executable, a workDir it cannot enter) on stderr under the exec's marker,
 * so those are typed errors and not program output. Exec as another user than the container's
 * needs the agent and is `not_available`.
 *
 * Closing an exec's connection does not end its process, so a timeout, cancel or abort runs a
 * second exec, the killer: it stops and kills every process carrying the exec's marker in its
 * environment, their children (`env -i` drops the marker) and the sessions they made (setsid).
 */
import { randomUUID } from 'node:crypto';
import { PassThrough, Transform } from 'node:stream';
import { SbxError } from '../../errors.js';
import { KILLED_EXIT_CODE } from '../types.js';
import type { ExecOptions, ExecResult, ExecStream, ExecStreamOptions } from '../types.js';
// Engine-neutral helpers that still live beside the Docker runtime (to move to src/runtime/).
import { collectOutput, execResult } from '../collect-text.js';
import { EXEC_MARKER_ENV, KILLER_DONE, KILL_SCRIPT } from '../exec-killer.js';
import { abortError, watchForKill } from '../kill-watch.js';
import type { KillWatch } from '../kill-watch.js';
import type { KubeConnection } from './connection.js';
import { channelSession, EXEC_PROTOCOLS, execQuery } from './exec-channel.js';
import type { ChannelSession, ExecEnd } from './exec-channel.js';
import { MAIN_CONTAINER } from './manifest.js';
import { STARTED_AFTER_MS } from './start-gate.js';
import type { StartGate } from './start-gate.js';

/** Exports the caller's env, then the marker last (so the caller cannot replace it), enters workDir, checks the program and execs it. */
const WRAPPER = `m=$1 d=$2
shift 2
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do export "$1"; shift; done
shift
export "${EXEC_MARKER_ENV}=$m"
if [ -n "$d" ]; then cd "$d" 2>/dev/null || { echo "$m workdir" >&2; exit 126; }; fi
case $1 in
*/*) [ -e "$1" ] || { echo "$m notfound" >&2; exit 127; }
  { [ -f "$1" ] && [ -x "$1" ]; } || { echo "$m noexec" >&2; exit 126; } ;;
*) command -v "$1" >/dev/null 2>&1 || { echo "$m notfound" >&2; exit 127; } ;;
esac
exec "$@"`;

/** The killer is not waited for longer than this (a frozen or overloaded box). */
const KILLER_MAX_MS = 5000;
/** After the killer ran, how long the exec's status may take before its connection is cut. */
const CUT_AFTER_KILL_MS = 1000;

/** The argv Kubernetes runs for one exec. */
export function wrapperArgv(cmd: string[], opts: { env?: Record<string, string>; workDir?: string }, marker: string): string[] {
  const env = Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`);
  return ['/bin/sh', '-c', WRAPPER, 'sbx-exec', marker, opts.workDir ?? '', ...env, '--', ...cmd];
}

/** The wrapper's report of a process that could not start, if the output starts with it. */
export function wrapperFailure(head: string, marker: string): 'workdir' | 'notfound' | 'noexec' | undefined {
  const m = new RegExp(`^${marker} (workdir|notfound|noexec)\\n`).exec(head);
  return m ? (m[1] as 'workdir' | 'notfound' | 'noexec') : undefined;
}

function startError(kind: 'workdir' | 'notfound' | 'noexec', cmd: string[], opts: { workDir?: string }, pod: string): SbxError {
  switch (kind) {
    case 'workdir':
      return new SbxError('invalid_argument', `workDir: '${opts.workDir ?? ''}' is not a directory the process can enter in pod ${pod}`, {
        details: { field: 'workDir', workDir: opts.workDir ?? null },
      });
    case 'notfound':
      return new SbxError('not_found', `cmd: '${cmd[0]}' was not found in pod ${pod}; check the name and the image's PATH`, { details: { cmd: cmd[0] } });
    case 'noexec':
      return new SbxError('invalid_argument', `cmd: '${cmd[0]}' is not an executable file in pod ${pod}`, { details: { field: 'cmd', cmd: cmd[0] } });
  }
}

/** An exec status that is not an exit: the wrapper itself could not run (no /bin/sh), the container went away. */
function endError(end: Extract<ExecEnd, { failure: string }>, pod: string): SbxError {
  if (/\/bin\/sh/.test(end.failure) && /no such file|not found/i.test(end.failure)) {
    return new SbxError('not_available', `exec in pod ${pod} needs /bin/sh in the image (until the in-box agent serves exec on Kubernetes): ${end.failure}`, {
      details: { reason: end.reason },
    });
  }
  return new SbxError('internal', `exec in pod ${pod} failed: ${end.failure}`, { details: { reason: end.reason } });
}

interface Target {
  conn: KubeConnection;
  pod: string;
  /** The pod's container; absent: the box's (`main`). */
  container?: string;
  /** Bounds the execs starting at once; the killer bypasses it (a kill must not queue). */
  gate?: StartGate;
}

async function open(t: Target, argv: string[], opts: { stdin: boolean; tty: boolean; signal?: AbortSignal }): Promise<ChannelSession> {
  const path = `/api/v1/namespaces/${encodeURIComponent(t.conn.namespace)}/pods/${encodeURIComponent(t.pod)}/exec?${execQuery(argv, { container: t.container ?? MAIN_CONTAINER, ...opts })}`;
  const what = `exec in pod ${t.pod}`;
  const release = t.gate ? await t.gate.acquire() : () => undefined;
  try {
    const ws = await t.conn.openWebSocket(path, EXEC_PROTOCOLS, what, opts.signal);
    // Started once output or the status comes back (the server's empty frame per channel at
    // the open says nothing), the connection closes, or after a while in any case.
    const timer = setTimeout(release, STARTED_AFTER_MS);
    const started = () => {
      clearTimeout(timer);
      ws.off('message', onMessage);
      release();
    };
    const onMessage = (data: Buffer) => {
      if (data.length > 1) started();
    };
    ws.on('message', onMessage);
    ws.once('close', started);
    return channelSession(ws, what, { tty: opts.tty });
  } catch (err) {
    release();
    // A pod that exists but whose container does not run: the API server answers 400.
    if (err instanceof SbxError && err.details?.['status'] === 400 && /completed pod|not running|container not found|is waiting to start/i.test(err.message)) {
      throw new SbxError('conflict', `pod ${t.pod} is not running: ${err.message}`, { cause: err, details: { id: t.pod } });
    }
    throw err;
  }
}

/** Runs the killer for a marker and returns once it says it is done (or gave up). */
async function runKiller(t: Target, marker: string): Promise<void> {
  let session: ChannelSession;
  try {
    session = await open({ conn: t.conn, pod: t.pod }, ['/bin/sh', '-c', KILL_SCRIPT, 'sbx-kill', marker], {
      stdin: false,
      tty: false,
      signal: AbortSignal.timeout(KILLER_MAX_MS),
    });
  } catch {
    return;
  }
  session.stderr.resume();
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, KILLER_MAX_MS);
    let seen = '';
    session.stdout.on('data', (c: Buffer) => {
      seen += c.toString();
      if (seen.includes(KILLER_DONE)) resolve();
    });
    session.stdout.once('end', resolve);
    void session.ended.catch(() => undefined).finally(() => clearTimeout(timer));
  });
  session.destroy();
}

/** The exec's end: its status, or after a kill the status if it comes soon, else the cut connection. */
async function untilEnd(session: ChannelSession, killed: KillWatch): Promise<ExecEnd | 'killed'> {
  const end = await Promise.race([session.ended.then((e) => ({ e })), killed.fired.then(() => 'fired' as const)]);
  if (end !== 'fired') {
    killed.stop();
    return killed.reason ? 'killed' : end.e;
  }
  await killed.done;
  const cut = new Promise<'cut'>((resolve) => setTimeout(() => resolve('cut'), CUT_AFTER_KILL_MS).unref());
  await Promise.race([session.ended.catch(() => undefined), cut]);
  session.destroy();
  return 'killed';
}

/** The Runtime's `exec` on Kubernetes. */
export async function kubeExec(t: Target, cmd: string[], opts: ExecOptions = {}): Promise<ExecResult> {
  const started = performance.now();
  const marker = randomUUID();
  const session = await open(t, wrapperArgv(cmd, opts, marker), {
    stdin: opts.stdin !== undefined,
    tty: false,
    ...(opts.signal ? { signal: opts.signal } : {}),
  });
  const stdout = collectOutput(session.stdout, opts);
  const stderr = collectOutput(session.stderr, opts);
  if (opts.stdin !== undefined) session.stdin.end(Buffer.from(opts.stdin));
  const killed = watchForKill({ kill: () => runKiller(t, marker) }, opts);
  const end = await untilEnd(session, killed).catch((err: unknown) => {
    killed.stop();
    throw err;
  });
  if (end === 'killed' && killed.reason === 'aborted') throw abortError(opts.signal);
  if (end !== 'killed' && 'failure' in end) throw endError(end, t.pod);
  const exitCode = end === 'killed' ? KILLED_EXIT_CODE : end.exitCode;
  if (exitCode === 126 || exitCode === 127) {
    const failed = wrapperFailure(stderr.head, marker);
    if (failed) throw startError(failed, cmd, opts, t.pod);
  }
  return execResult(
    { exitCode, timedOut: end === 'killed' && killed.reason === 'timeout', durationMs: Math.round(performance.now() - started) },
    stdout,
    stderr,
  );
}

/**
 * Holds back the first line of a stream until it is known not to be the wrapper's report, which
 * it swallows (the caller's wait() rejects with the typed error instead).
 */
function reportFilter(marker: string, onReport: (kind: 'workdir' | 'notfound' | 'noexec') => void): Transform {
  let head: Buffer | undefined = Buffer.alloc(0);
  const need = marker.length + 10;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      if (!head) return cb(null, chunk);
      head = Buffer.concat([head, chunk]);
      const text = head.toString('utf8');
      const kind = wrapperFailure(text, marker);
      if (kind) {
        onReport(kind);
        const rest = head.subarray(head.indexOf(10) + 1);
        head = undefined;
        return cb(null, rest.length ? rest : undefined);
      }
      if (head.length >= need || !`${marker} `.startsWith(text.slice(0, marker.length + 1))) {
        const out = head;
        head = undefined;
        return cb(null, out);
      }
      cb();
    },
    flush(cb) {
      cb(null, head?.length ? head : undefined);
    },
  });
}

/** The Runtime's `execStream` on Kubernetes. */
export async function kubeExecStream(t: Target, cmd: string[], opts: ExecStreamOptions = {}): Promise<ExecStream> {
  const marker = randomUUID();
  const tty = opts.tty ?? false;
  const session = await open(t, wrapperArgv(cmd, opts, marker), { stdin: true, tty, ...(opts.signal ? { signal: opts.signal } : {}) });
  if (tty && opts.size) await session.resize(opts.size);
  let report: 'workdir' | 'notfound' | 'noexec' | undefined;
  // With a terminal the wrapper's stderr arrives on stdout.
  const filtered = reportFilter(marker, (k) => (report = k));
  const carrier = tty ? session.stdout : session.stderr;
  carrier.pipe(filtered);
  const stdout = tty ? filtered : session.stdout;
  const stderr = tty ? new PassThrough().end() : filtered;
  const killed = watchForKill({ kill: () => runKiller(t, marker) }, opts);
  let exit: Promise<number> | undefined;
  const stream: ExecStream = {
    stdout,
    stderr,
    stdin: session.stdin,
    wait() {
      exit ??= untilEnd(session, killed).then((end) => {
        if (end === 'killed') return KILLED_EXIT_CODE;
        if ('failure' in end) throw endError(end, t.pod);
        if (report && (end.exitCode === 126 || end.exitCode === 127)) throw startError(report, cmd, opts, t.pod);
        return end.exitCode;
      });
      return exit;
    },
    async cancel() {
      await killed.kill('cancelled');
      await stream.wait().catch(() => undefined);
    },
    resize: (size) => session.resize(size),
  };
  return stream;
}

/**
 * Runs argv as it is in one container of the pod (no wrapper: sbx's own containers have no
 * shell), stdin given whole, output buffered; the connection is cut after `timeoutMs` (the
 * process is not killed: only sbx's own short-lived commands run this way).
 */
export async function kubeExecPlain(
  t: Target & { container: string },
  argv: string[],
  opts: { stdin?: string; timeoutMs: number },
): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const session = await open(t, argv, { stdin: opts.stdin !== undefined, tty: false, signal: AbortSignal.timeout(opts.timeoutMs) });
  const stdout = collectOutput(session.stdout, {});
  const stderr = collectOutput(session.stderr, {});
  if (opts.stdin !== undefined) session.stdin.end(Buffer.from(opts.stdin));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), opts.timeoutMs)));
  const end = await Promise.race([session.ended, late]).finally(() => clearTimeout(timer));
  const what = `${argv.join(' ')} in container ${t.container} of pod ${t.pod}`;
  if (end === 'late') {
    session.destroy();
    throw new SbxError('timeout', `${what} did not end within ${opts.timeoutMs} ms`, { details: { id: t.pod, timeoutMs: opts.timeoutMs } });
  }
  if ('failure' in end) throw new SbxError('internal', `${what} failed: ${end.failure}`, { details: { id: t.pod, reason: end.reason } });
  return { exitCode: end.exitCode, stdout: stdout.text(), stderr: stderr.text() };
}
