/**
 * MemoryRuntime: a fast, deterministic Runtime held in memory, for unit tests of the logic
 * above the runtime (cleanup, recovery, limits, reconciliation). It is never a substitute for
 * the real-engine tests: what it promises is the Runtime interface as the Docker runtime keeps
 * it, checked by src/testing/memory-runtime.test.ts against the same cases as the conformance
 * suite where they make sense without a real process.
 *
 * Same as the Docker runtime:
 * - specs, exec commands and exec options are checked by `validateSpec`, `validateExec` and
 *   `validateExecStream` (invalid_argument naming the field) before any engine work, so even on an
 *   unreachable engine bad input is invalid_argument;
 * - error codes: unknown container or image -> not_found (`create` names the image); a duplicate
 *   name, removing a running container without force, exec/processes on a container that is not
 *   running, removing an image a container uses -> conflict; an unreachable engine ->
 *   runtime_unavailable naming the address; an aborted exec -> cancelled;
 * - start of a running container and stop of a stopped (or never started) one are no-ops;
 * - containers are found by id, unique id prefix or name; `list` is newest first, `all` defaults
 *   to true, every label pair must match and '' only asks that the label exists; its createdAt
 *   has whole seconds (the Engine API's list has no more), inspect's has milliseconds;
 * - inspect's exitCode is null while running or never started; ports are published only while
 *   running, on 127.0.0.1 unless the spec names a host address, host port 0 picks one;
 * - an exec timeout or cancel gives exit code 137 (`timedOut` for the timeout); output is cut at
 *   `maxOutputBytes` with `truncated`; with `tty` stderr is merged into stdout;
 * - `events` reports created / started / stopped / removed from the first iteration on, filtered by
 *   labels like `list` (a force-remove of a running container is `stopped` then `removed`); it ends
 *   when the signal aborts (a signal aborted before the start makes no engine call) and throws
 *   runtime_unavailable when the engine goes away (`setReachable(false)`, `simulateEngineRestart`).
 *
 * Different, on purpose:
 * - nothing runs. An exec runs `onExec` (default: exit 0, no output); the image's CMD is only a
 *   line in `processes`. env, user and workDir are handed to the handler (container values
 *   overlaid with the exec's; user defaults to 'root', workDir to '/'), not applied.
 * - memory, cpus, pids, security, binds, network and ociRuntime are validated and stored, never
 *   enforced: no OOM kills. `stats` is made-up plain data (1 MiB used while running, zeros otherwise);
 *   `resources` is what the options say (default 2 cores, 8 GiB).
 * - stop is immediate (timeoutMs is ignored) and exits 0, as the graceful CMD does; stopping or
 *   removing a container kills its execs (137). `simulateEngineRestart` kills every running
 *   container (exit 255, as dockerd reports the containers it lost; their `stopped` events reach
 *   the open event streams, which then throw). Nothing starts them again: sbx boxes have no
 *   engine restart policy (the Manager revives them; docs/architecture.md, Box lifecycle).
 * - event labels are the container's labels only (Docker's also carry `name`, `image`, `exitCode`).
 * - ids are 64 hex digits derived from the address and a counter (deterministic: give two
 *   runtimes of one test different addresses); default names are `memory-<n>`.
 * - createdAt, startedAt and durationMs come from the injected clock; exec timeouts and
 *   `latencyMs` use real timers.
 * - images: a set of references (`busybox` means `busybox:latest`); pull fetches only what
 *   `registry` lists (else not_found), yields three progress events and ignores auth and signal;
 *   build reads the context and tags it.
 * - `close()` only records `closed`; calls keep working.
 * - test hooks (`failNext`, `setReachable`, `injectContainer`, `vanish`, `simulateEngineRestart`)
 *   change the state at once, without an engine call; the container changes they make are still
 *   reported to `events`, as another client's would be.
 */
import { createHash } from 'node:crypto';
import { PassThrough, Writable } from 'node:stream';
import type { Duplex, Readable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { SbxError } from '../errors.js';
import { isoNanos, logSinceNanos, validateExec, validateExecStream, validateLogs, validateSpec } from '../runtime/spec.js';
import { KILLED_EXIT_CODE } from '../runtime/types.js';
import type {
  LogChunk,
  LogOptions,
  ContainerEvent,
  ContainerInfo,
  ContainerListOptions,
  ContainerSpec,
  ContainerStats,
  ContainerStatus,
  ContainerSummary,
  ExecOptions,
  ExecResult,
  ExecStream,
  ExecStreamOptions,
  ImageInfo,
  Images,
  ProcessInfo,
  PublishedPort,
  PullProgress,
  RegistryAuth,
  Runtime,
  RuntimeCapabilities,
  RuntimeResources,
  RuntimeVersion,
} from '../runtime/types.js';
import type { RuntimeOp } from './counting-runtime.js';
import { testEnv } from './env.js';

/** One exec as the handler sees it: the process a real engine would run. */
export interface MemoryProcess {
  readonly containerId: string;
  readonly cmd: readonly string[];
  /** The container's env overlaid with the exec's. */
  readonly env: Readonly<Record<string, string>>;
  readonly user: string;
  readonly workDir: string;
  readonly tty: boolean;
  /** What the caller writes (exec: its `stdin` option), then EOF. */
  readonly stdin: Readable;
  /** The process's output; with tty, stderr goes to stdout. Writes after the exit are dropped. */
  readonly stdout: Writable;
  readonly stderr: Writable;
  /** Aborted when the process is killed (timeout, cancel, abort, its container stopped). */
  readonly signal: AbortSignal;
  /** Resolves with the exit code once the process has exited and its output is handed on. */
  readonly exited: Promise<number>;
  /** The terminal size, with tty: the initial one, then the last `resize`. */
  readonly size: { cols: number; rows: number } | undefined;
  /** Ends the process with this exit code (default 0), from the handler or from the test. */
  exit(code?: number): void;
  /** Reads stdin to EOF as UTF-8. */
  readStdin(): Promise<string>;
}

/** What a handler may return: an exit code, or output and an exit code (default 0). */
export interface ExecReply {
  exitCode?: number;
  stdout?: string | Uint8Array;
  stderr?: string | Uint8Array;
}

/**
 * Plays the process of one exec. The process exits when the returned value (or promise)
 * resolves, or earlier by `p.exit()` or a kill; a throw fails the exec (exec rejects, wait() rejects).
 *
 * @example
 * rt.onExec = async (p) => (p.cmd[0] === 'cat' ? { stdout: await p.readStdin() } : { exitCode: 0 });
 */
export type ExecHandler = (p: MemoryProcess) => ExecReply | number | void | Promise<ExecReply | number | void>;

/** A handler that keeps every exec running until the test calls `exit()` on it (see `execs()`). */
export const holdOpen: ExecHandler = (p) => p.exited;

export interface MemoryRuntimeOptions {
  /** Default 'memory'. Ids derive from it, so two runtimes in one test need two addresses. */
  address?: string;
  /** Milliseconds since the epoch; default Date.now. Pass a ManualClock's `now`. */
  clock?: () => number;
  /** Images present at the start; default the harness's base and test images. */
  images?: Iterable<string>;
  /** Images a pull can fetch; default none (every pull is not_found). */
  registry?: Iterable<string>;
  /** Default `{ hostMounts: false }`. */
  capabilities?: Partial<RuntimeCapabilities>;
  /** What `resources()` reports; default 2 cores and 8 GiB. */
  resources?: Partial<RuntimeResources>;
  /** Plays every exec; default exit 0 with no output. Also settable later as `onExec`. */
  onExec?: ExecHandler;
  /** Real delay of every engine call, so concurrent callers interleave; default 0 (one microtask). */
  latencyMs?: number;
}

/** The CMD of the sbx images: what `processes` shows as PID 1 when a spec names no command. */
const IMAGE_CMD = ['/bin/sh', '-c', "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done"];
const DEFAULT_MAX_OUTPUT = 64 * 1024 * 1024;
const MiB = 1024 * 1024;
const DEFAULT_RESOURCES: RuntimeResources = { cpus: 2, memoryBytes: 8 * 1024 * MiB };
/** Exit code dockerd reports for containers that were running when it went away. */
const ENGINE_LOST_EXIT_CODE = 255;

interface MemoryContainer {
  id: string;
  name: string;
  image: string;
  spec: ContainerSpec;
  labels: Record<string, string>;
  status: ContainerStatus;
  exitCode: number | null;
  createdAt: number;
  startedAt: number | null;
  ports: PublishedPort[];
  seq: number;
  /** What its main process wrote (`writeLog`), and the follows waiting for more. */
  log: LogChunk[];
  logWaiters: Set<() => void>;
}

type KillReason = 'timeout' | 'aborted' | 'cancelled' | 'container' | 'failed';

/** One open `events` iteration. */
interface Subscriber {
  labels: Record<string, string>;
  queue: ContainerEvent[];
  error: Error | undefined;
  wake: (() => void) | undefined;
}

export class MemoryRuntime implements Runtime {
  readonly address: string;
  readonly images: MemoryImages;
  readonly capabilities: RuntimeCapabilities;
  /** Plays every exec and execStream; replace it at any time. */
  onExec: ExecHandler;

  private readonly clock: () => number;
  private readonly latencyMs: number;
  private readonly containers = new Map<string, MemoryContainer>();
  private readonly procs = new Set<MemoryExec>();
  private readonly failures = new Map<RuntimeOp, Error[]>();
  private readonly subscribers = new Set<Subscriber>();
  private readonly machine: RuntimeResources;
  private reachable = true;
  private seq = 0;
  private nextHostPort = 32768;
  private nextPid = 100;
  private wasClosed = false;

  constructor(opts: MemoryRuntimeOptions = {}) {
    this.address = opts.address ?? 'memory';
    this.clock = opts.clock ?? Date.now;
    this.latencyMs = opts.latencyMs ?? 0;
    this.capabilities = { hostMounts: false, ...opts.capabilities };
    this.machine = { ...DEFAULT_RESOURCES, ...opts.resources };
    this.onExec = opts.onExec ?? (() => undefined);
    this.images = new MemoryImages({
      address: this.address,
      clock: this.clock,
      engine: (op) => this.engine(op),
      inUse: (ref) => [...this.containers.values()].some((c) => normalizeRef(c.image) === ref),
      present: opts.images ?? [testEnv.baseImage, testEnv.testImage],
      registry: opts.registry ?? [],
    });
  }

  // --- test hooks ------------------------------------------------------------------------

  /** Makes the next call of `op` throw `error` (default runtime_unavailable); calls queue up. */
  failNext(op: RuntimeOp, error?: Error): void {
    const err =
      error ?? new SbxError('runtime_unavailable', `${op} on '${this.address}' failed (injected by failNext)`, { details: { address: this.address } });
    const queue = this.failures.get(op) ?? [];
    queue.push(err);
    this.failures.set(op, queue);
  }

  /** While false every call throws runtime_unavailable; containers keep their state. */
  setReachable(reachable: boolean): void {
    this.reachable = reachable;
    if (!reachable) this.endEventStreams();
  }

  /**
   * The engine restarted: every running container dies (255, its execs killed, `stopped` sent)
   * and the open event streams throw runtime_unavailable. None runs again by itself, as with
   * dockerd for containers without a restart policy, which sbx's boxes are.
   */
  simulateEngineRestart(): void {
    for (const c of this.containers.values()) if (c.status === 'running') this.halt(c, ENGINE_LOST_EXIT_CODE);
    this.endEventStreams();
  }

  /** Makes a container appear as if another process had created it; returns its id. */
  injectContainer(summary: Partial<ContainerSummary> = {}): string {
    const seq = ++this.seq;
    const id = summary.id ?? this.makeId(seq);
    if (this.containers.has(id)) throw new SbxError('conflict', `injectContainer: id ${id} exists`);
    const name = summary.name ?? this.makeName(seq);
    this.assertNameFree(name, `injectContainer ${name}`);
    const status: ContainerStatus = summary.status ?? (summary.running === false ? 'exited' : 'running');
    const createdAt = summary.createdAt ? Date.parse(summary.createdAt) : this.clock();
    const image = summary.image ?? testEnv.baseImage;
    const labels = { ...summary.labels };
    const c: MemoryContainer = {
      id,
      name,
      image,
      spec: { image, name, labels },
      labels,
      status,
      exitCode: status === 'exited' ? 0 : null,
      createdAt,
      startedAt: status === 'created' ? null : createdAt,
      ports: [],
      seq,
      log: [],
      logWaiters: new Set(),
    };
    this.containers.set(id, c);
    this.emit(c, 'created');
    if (status === 'running') this.emit(c, 'started');
    return id;
  }

  /** Removes a container behind everyone's back (its execs die); the next call on it is not_found. */
  vanish(id: string): void {
    this.delete(this.find(id, 'vanish'));
  }

  /** Execs still running, of one container (by id, prefix or name; none once it is gone) or of all. */
  execs(containerId?: string): MemoryProcess[] {
    if (containerId === undefined) return [...this.procs];
    let id = containerId;
    try {
      id = this.find(containerId).id;
    } catch {
      /* gone: only an exact id can still match, and its execs were killed */
    }
    return [...this.procs].filter((p) => p.containerId === id);
  }

  /** How many execs (and streams) are running, in one container or in all. */
  inFlightExecs(containerId?: string): number {
    return this.execs(containerId).length;
  }

  /** True once `close()` was called. */
  get closed(): boolean {
    return this.wasClosed;
  }

  // --- Runtime ---------------------------------------------------------------------------

  async ping(): Promise<void> {
    await this.engine('ping');
  }

  async version(): Promise<RuntimeVersion> {
    await this.engine('version');
    return { engine: 'memory', version: '0.0.0-memory', apiVersion: '1', os: 'linux', arch: 'amd64' };
  }

  async create(spec: ContainerSpec): Promise<string> {
    const valid = validateSpec(spec);
    await this.engine('create');
    if (!this.images.has(valid.image)) {
      throw new SbxError('not_found', `image ${valid.image} not found on ${this.address}; pull or build it first`, { details: { image: valid.image } });
    }
    const seq = ++this.seq;
    const name = valid.name ?? this.makeName(seq);
    this.assertNameFree(name, `create from image ${valid.image}`);
    const id = this.makeId(seq);
    const c: MemoryContainer = {
      id,
      name,
      image: valid.image,
      spec: structuredClone(valid),
      labels: { ...valid.labels },
      status: 'created',
      exitCode: null,
      createdAt: this.clock(),
      startedAt: null,
      ports: [],
      seq,
      log: [],
      logWaiters: new Set(),
    };
    this.containers.set(id, c);
    this.emit(c, 'created');
    return id;
  }

  async start(id: string): Promise<void> {
    await this.engine('start');
    const c = this.find(id);
    if (c.status !== 'running') this.run(c);
  }

  async stop(id: string, _opts: { timeoutMs?: number } = {}): Promise<void> {
    await this.engine('stop');
    const c = this.find(id);
    if (c.status === 'running' || c.status === 'paused') this.halt(c, 0);
  }

  async pause(id: string): Promise<void> {
    await this.engine('pause');
    const c = this.find(id);
    if (c.status === 'paused') return;
    if (c.status !== 'running') throw new SbxError('conflict', `container ${id}: Container ${id} is not running`, { details: { address: this.address } });
    c.status = 'paused';
  }

  async commit(id: string, ref: string): Promise<void> {
    await this.engine('commit');
    this.find(id);
    this.images.add(ref);
  }

  async unpause(id: string): Promise<void> {
    await this.engine('unpause');
    const c = this.find(id);
    if (c.status === 'paused') c.status = 'running';
  }

  async remove(id: string, opts: { force?: boolean } = {}): Promise<void> {
    await this.engine('remove');
    const c = this.find(id);
    if ((c.status === 'running' || c.status === 'paused') && !opts.force) {
      throw new SbxError('conflict', `container ${id}: cannot remove a running container; stop it first or use force`, { details: { address: this.address } });
    }
    this.delete(c);
  }

  async inspect(id: string): Promise<ContainerInfo> {
    await this.engine('inspect');
    const c = this.find(id);
    return {
      id: c.id,
      name: c.name,
      image: c.image,
      status: c.status,
      running: c.status === 'running',
      exitCode: c.status === 'running' || c.startedAt === null ? null : c.exitCode,
      oomKilled: false,
      labels: { ...c.labels },
      ports: c.ports.map((p) => ({ ...p })),
      createdAt: new Date(c.createdAt).toISOString(),
      startedAt: c.startedAt === null ? null : new Date(c.startedAt).toISOString(),
    };
  }

  async list(opts: ContainerListOptions = {}): Promise<ContainerSummary[]> {
    await this.engine('list');
    return [...this.containers.values()]
      .filter((c) => (opts.all ?? true) || c.status === 'running')
      .filter((c) => matches(c.labels, opts.labels))
      .sort((a, b) => b.seq - a.seq)
      .map((c) => ({
        id: c.id,
        name: c.name,
        image: c.image,
        status: c.status,
        running: c.status === 'running',
        labels: { ...c.labels },
        createdAt: new Date(Math.floor(c.createdAt / 1000) * 1000).toISOString(),
      }));
  }

  async processes(id: string): Promise<ProcessInfo[]> {
    await this.engine('processes');
    const c = this.running(id, `container ${id}`);
    const user = c.spec.user ?? 'root';
    const pid1 = [...(c.spec.entrypoint ?? []), ...(c.spec.cmd ?? [])];
    return [
      { pid: '1', user, command: (pid1.length ? pid1 : IMAGE_CMD).join(' ') },
      ...[...this.procs].filter((p) => p.containerId === c.id).map((p) => ({ pid: String(p.pid), user: p.user, command: p.cmd.join(' ') })),
    ];
  }

  async *events(opts: { labels?: Record<string, string>; signal: AbortSignal }): AsyncGenerator<ContainerEvent> {
    const { signal } = opts;
    if (signal.aborted) return;
    // Subscribed before the engine call resolves, so nothing done after the first next() is missed.
    const sub: Subscriber = { labels: { ...opts.labels }, queue: [], error: undefined, wake: undefined };
    const wake = () => sub.wake?.();
    this.subscribers.add(sub);
    signal.addEventListener('abort', wake, { once: true });
    try {
      await this.engine('events');
      for (;;) {
        if (signal.aborted) return;
        const ev = sub.queue.shift();
        if (ev) {
          yield ev;
          continue;
        }
        if (sub.error) throw sub.error;
        await new Promise<void>((resolve) => (sub.wake = resolve));
        sub.wake = undefined;
      }
    } finally {
      this.subscribers.delete(sub);
      signal.removeEventListener('abort', wake);
    }
  }

  async resources(): Promise<RuntimeResources> {
    await this.engine('resources');
    return { ...this.machine };
  }

  async stats(id: string): Promise<ContainerStats> {
    await this.engine('stats');
    const c = this.find(id);
    if (c.status !== 'running') return { cpuPercent: 0, memoryBytes: 0, memoryLimitBytes: 0, pids: 0 };
    return { cpuPercent: 0, memoryBytes: MiB, memoryLimitBytes: c.spec.memory || this.machine.memoryBytes, pids: 1 + this.inFlightExecs(c.id) };
  }

  async exec(id: string, cmd: string[], options?: ExecOptions): Promise<ExecResult> {
    const opts = validateExec(cmd, options);
    await this.engine('exec');
    const startedAt = this.clock();
    const p = this.spawn(this.running(id, `exec in container ${id}`), cmd, opts, false);
    const limit = opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT;
    const stdout = collect(p.out, limit);
    const stderr = collect(p.err, limit);
    p.stdinPipe.end(opts.stdin === undefined ? undefined : Buffer.from(opts.stdin));
    await p.exited;
    await Promise.all([finished(p.out), finished(p.err)]);
    if (p.failure !== undefined) throw p.failure;
    if (p.killedBy === 'aborted') throw abortError(opts.signal);
    return {
      exitCode: p.code ?? KILLED_EXIT_CODE,
      stdout: stdout.text(),
      stderr: stderr.text(),
      truncated: stdout.truncated || stderr.truncated,
      timedOut: p.killedBy === 'timeout',
      durationMs: this.clock() - startedAt,
    };
  }

  /** Main-process output for `logs` (nothing runs in memory to write it): appends a chunk now. */
  writeLog(id: string, stream: 'stdout' | 'stderr', data: string): void {
    const c = this.find(id);
    c.log.push({ stream, data, time: new Date(this.clock()).toISOString() });
    this.wakeLog(c);
  }

  async logs(id: string, options?: LogOptions): Promise<AsyncIterable<LogChunk>> {
    const opts = validateLogs(options);
    await this.engine('logs');
    const c = this.find(id);
    const since = logSinceNanos(opts, this.clock());
    const past = c.log.filter((l) => since === undefined || isoNanos(l.time) >= since);
    let next = opts.tail === undefined ? c.log.length - past.length : c.log.length - Math.min(opts.tail, past.length);
    const containers = this.containers;
    return (async function* () {
      for (;;) {
        while (next < c.log.length) yield c.log[next++]!;
        if (!opts.follow || c.status !== 'running' || !containers.has(c.id) || opts.signal?.aborted) return;
        await new Promise<void>((wake) => {
          c.logWaiters.add(wake);
          opts.signal?.addEventListener('abort', () => wake(), { once: true });
        });
      }
    })();
  }

  private wakeLog(c: MemoryContainer): void {
    const waiters = [...c.logWaiters];
    c.logWaiters.clear();
    for (const w of waiters) w();
  }

  /** No in-box agent here: the caller passes the variables with each exec, as on the engine path. */
  /** No services run in memory: every port is one the box did not expose. */
  async dialPort(id: string, port: number): Promise<Duplex> {
    await this.engine('dialPort');
    this.running(id, `dial port ${port} of container ${id}`);
    throw new SbxError('not_available', `port ${port} of container ${id} is not exposed (in-memory runtime)`, {
      details: { id, port, reason: 'port_not_exposed' },
    });
  }

  async setBoxEnv(id: string): Promise<boolean> {
    await this.engine('setBoxEnv');
    this.running(id, `configure container ${id}`);
    return false;
  }

  async execStream(id: string, cmd: string[], options?: ExecStreamOptions): Promise<ExecStream> {
    const opts = validateExecStream(cmd, options);
    await this.engine('execStream');
    const p = this.spawn(this.running(id, `exec in container ${id}`), cmd, opts, opts.tty ?? false);
    let exit: Promise<number> | undefined;
    return {
      stdout: p.out,
      stderr: p.err,
      stdin: p.stdinPipe,
      wait() {
        exit ??= p.exited.then((code) => {
          if (p.failure !== undefined) throw p.failure;
          return code;
        });
        return exit;
      },
      async cancel() {
        p.kill('cancelled');
        await p.exited;
      },
      async resize(size) {
        p.size = { ...size };
      },
    };
  }

  async close(): Promise<void> {
    this.wasClosed = true;
    const queued = this.failures.get('close')?.shift();
    if (queued) throw queued;
  }

  // --- internals -------------------------------------------------------------------------

  /** What every engine call goes through: reachability, injected failures, latency. */
  private async engine(op: RuntimeOp): Promise<void> {
    if (!this.reachable) {
      throw new SbxError('runtime_unavailable', `memory runtime at '${this.address}' is unreachable (setReachable(false))`, {
        details: { address: this.address },
      });
    }
    const queued = this.failures.get(op)?.shift();
    if (queued) throw queued;
    if (this.latencyMs > 0) await sleep(this.latencyMs);
    else await Promise.resolve();
  }

  private find(ref: string, what = `container ${ref}`): MemoryContainer {
    const byId = this.containers.get(ref);
    if (byId) return byId;
    const all = [...this.containers.values()];
    const byName = all.find((c) => c.name === ref);
    if (byName) return byName;
    const byPrefix = ref ? all.filter((c) => c.id.startsWith(ref)) : [];
    if (byPrefix.length === 1) return byPrefix[0]!;
    throw new SbxError('not_found', `${what}: No such container: ${ref}`, { details: { address: this.address } });
  }

  private running(ref: string, what: string): MemoryContainer {
    const c = this.find(ref, what);
    if (c.status !== 'running') throw new SbxError('conflict', `${what}: Container ${c.id} is not running`, { details: { address: this.address } });
    return c;
  }

  private assertNameFree(name: string, what: string): void {
    const holder = [...this.containers.values()].find((c) => c.name === name);
    if (holder) {
      throw new SbxError('conflict', `${what}: the container name "/${name}" is already in use by container "${holder.id}"`, {
        details: { address: this.address },
      });
    }
  }

  private makeId(seq: number): string {
    return createHash('sha256').update(`${this.address}#${seq}`).digest('hex');
  }

  private makeName(seq: number): string {
    let n = seq;
    while ([...this.containers.values()].some((c) => c.name === `memory-${n}`)) n++;
    return `memory-${n}`;
  }

  private run(c: MemoryContainer): void {
    c.status = 'running';
    c.exitCode = null;
    c.startedAt = this.clock();
    c.ports = (c.spec.ports ?? []).map((p) => ({
      containerPort: p.containerPort,
      protocol: p.protocol ?? 'tcp',
      hostIp: p.hostIp ?? '127.0.0.1',
      hostPort: p.hostPort || this.nextHostPort++,
    }));
    this.emit(c, 'started');
  }

  private halt(c: MemoryContainer, exitCode: number): void {
    this.killExecs(c);
    c.status = 'exited';
    c.exitCode = exitCode;
    c.ports = [];
    this.wakeLog(c);
    this.emit(c, 'stopped');
  }

  /** Force-remove: a running container dies first, as on the engine. */
  private delete(c: MemoryContainer): void {
    if (c.status === 'running' || c.status === 'paused') this.halt(c, KILLED_EXIT_CODE);
    this.containers.delete(c.id);
    this.wakeLog(c);
    this.emit(c, 'removed');
  }

  private emit(c: MemoryContainer, action: ContainerEvent['action']): void {
    for (const sub of this.subscribers) {
      if (sub.error || !matches(c.labels, sub.labels)) continue;
      sub.queue.push({ id: c.id, action, labels: { ...c.labels }, at: new Date(this.clock()).toISOString() });
      sub.wake?.();
    }
  }

  /** The engine went away: every open event stream throws once it has handed on what it had. */
  private endEventStreams(): void {
    for (const sub of this.subscribers) {
      sub.error = new SbxError('runtime_unavailable', `events from ${this.address} ended: the engine went away`, { details: { address: this.address } });
      sub.wake?.();
    }
  }

  private killExecs(c: MemoryContainer): void {
    for (const p of this.procs) if (p.containerId === c.id) p.kill('container');
  }

  private spawn(c: MemoryContainer, cmd: string[], opts: ExecOptions | ExecStreamOptions, tty: boolean): MemoryExec {
    const p = new MemoryExec({
      containerId: c.id,
      cmd: [...cmd],
      env: { ...c.spec.env, ...opts.env },
      user: opts.user || c.spec.user || 'root',
      workDir: opts.workDir || c.spec.workDir || '/',
      tty,
      size: tty && 'size' in opts && opts.size ? { ...opts.size } : undefined,
      pid: this.nextPid++,
    });
    this.procs.add(p);
    const timer = opts.timeoutMs && opts.timeoutMs > 0 ? setTimeout(() => p.kill('timeout'), opts.timeoutMs) : undefined;
    const onAbort = () => p.kill('aborted');
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    p.onExit = () => {
      this.procs.delete(p);
      if (timer) clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
    };
    if (opts.signal?.aborted) {
      p.kill('aborted');
      return p;
    }
    const handler = this.onExec;
    new Promise<ExecReply | number | void>((resolve) => resolve(handler(p))).then(
      (reply) => {
        if (typeof reply === 'number') return p.exit(reply);
        if (reply?.stdout !== undefined) p.stdout.write(reply.stdout);
        if (reply?.stderr !== undefined) p.stderr.write(reply.stderr);
        p.exit(reply?.exitCode ?? 0);
      },
      (err: unknown) => p.fail(err),
    );
    return p;
  }
}

/** The process behind one exec: caller-side streams, handler-side guarded writers, the exit. */
class MemoryExec implements MemoryProcess {
  readonly containerId: string;
  readonly cmd: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly user: string;
  readonly workDir: string;
  readonly tty: boolean;
  readonly pid: number;
  size: { cols: number; rows: number } | undefined;
  /** Caller writes, handler reads. */
  readonly stdinPipe = new PassThrough();
  /** Caller reads. */
  readonly out = new PassThrough();
  readonly err = new PassThrough();
  readonly stdout: Writable;
  readonly stderr: Writable;
  readonly exited: Promise<number>;
  code: number | undefined;
  killedBy: KillReason | undefined;
  failure: unknown;
  onExit: () => void = () => undefined;
  private readonly ac = new AbortController();
  private done = false;
  private resolveExit!: (code: number) => void;

  constructor(init: {
    containerId: string;
    cmd: string[];
    env: Record<string, string>;
    user: string;
    workDir: string;
    tty: boolean;
    size: { cols: number; rows: number } | undefined;
    pid: number;
  }) {
    this.containerId = init.containerId;
    this.cmd = init.cmd;
    this.env = init.env;
    this.user = init.user;
    this.workDir = init.workDir;
    this.tty = init.tty;
    this.size = init.size;
    this.pid = init.pid;
    this.stdout = guarded(this.out);
    this.stderr = guarded(init.tty ? this.out : this.err);
    this.exited = new Promise((resolve) => (this.resolveExit = resolve));
    this.stdinPipe.on('error', () => undefined);
  }

  get signal(): AbortSignal {
    return this.ac.signal;
  }

  get stdin(): Readable {
    return this.stdinPipe;
  }

  async readStdin(): Promise<string> {
    const chunks: Buffer[] = [];
    for await (const c of this.stdinPipe) chunks.push(Buffer.from(c as Buffer));
    return Buffer.concat(chunks).toString('utf8');
  }

  exit(code = 0): void {
    if (this.code !== undefined) return;
    this.code = code;
    this.onExit();
    // A clean exit hands on everything the handler wrote (a reader that never reads a big
    // output holds it, as on a real engine); a kill cuts it.
    void Promise.all([endOf(this.stdout), endOf(this.stderr)]).then(() => this.finish());
  }

  kill(reason: KillReason): void {
    if (this.code === undefined) {
      this.killedBy = reason;
      this.ac.abort(new SbxError('cancelled', `exec killed (${reason})`));
      this.code = KILLED_EXIT_CODE;
      this.onExit();
    }
    this.finish();
  }

  /** Closes the output and reports the exit; what the caller writes to stdin from now on is dropped. */
  private finish(): void {
    if (this.done) return;
    this.done = true;
    this.out.end();
    this.err.end();
    this.stdinPipe.resume();
    this.resolveExit(this.code ?? KILLED_EXIT_CODE);
  }

  fail(err: unknown): void {
    if (this.code !== undefined) return;
    this.failure = err;
    this.kill('failed');
  }
}

interface MemoryImagesInit {
  address: string;
  clock: () => number;
  engine: (op: RuntimeOp) => Promise<void>;
  inUse: (normalizedRef: string) => boolean;
  present: Iterable<string>;
  registry: Iterable<string>;
}

/** Images of a MemoryRuntime: a set of references, a registry to pull from. */
export class MemoryImages implements Images {
  private readonly present = new Map<string, number>();
  private readonly registry: Set<string>;

  constructor(private readonly init: MemoryImagesInit) {
    for (const ref of init.present) this.present.set(normalizeRef(ref), init.clock());
    this.registry = new Set([...init.registry].map(normalizeRef));
  }

  /** Without an engine call: for the runtime's own checks and for tests. */
  has(ref: string): boolean {
    return this.present.has(normalizeRef(ref));
  }

  /** Adds an image as if it had been built or loaded; a test hook, no engine call. */
  add(ref: string): void {
    this.present.set(normalizeRef(ref), this.init.clock());
  }

  async exists(ref: string): Promise<boolean> {
    await this.init.engine('images.exists');
    return this.present.has(normalizeRef(ref));
  }

  async *pull(ref: string, _opts: { auth?: RegistryAuth; signal?: AbortSignal } = {}): AsyncGenerator<PullProgress> {
    if (!ref) throw new SbxError('invalid_argument', 'ref: image reference is required', { details: { field: 'ref' } });
    await this.init.engine('images.pull');
    const full = normalizeRef(ref);
    if (!this.registry.has(full)) {
      throw new SbxError('not_found', `pull ${ref}: manifest for ${ref} not found: manifest unknown`, { details: { address: this.init.address } });
    }
    const tag = full.slice(full.lastIndexOf(':') + 1);
    if (this.present.has(full)) {
      yield { status: `Status: Image is up to date for ${full}` };
      return;
    }
    yield { status: `Pulling from ${full.slice(0, full.lastIndexOf(':'))}`, id: tag };
    yield { status: 'Pull complete', id: digestOf(full).slice(0, 12) };
    this.present.set(full, this.init.clock());
    yield { status: `Status: Downloaded newer image for ${full}` };
  }

  async list(): Promise<ImageInfo[]> {
    await this.init.engine('images.list');
    return [...this.present].map(([ref, at]) => ({ id: `sha256:${digestOf(ref)}`, tags: [ref], sizeBytes: 0, createdAt: new Date(at).toISOString() }));
  }

  async remove(ref: string, opts: { force?: boolean } = {}): Promise<void> {
    await this.init.engine('images.remove');
    const full = normalizeRef(ref);
    if (!this.present.has(full)) throw new SbxError('not_found', `image ${ref}: No such image: ${ref}`, { details: { address: this.init.address } });
    if (this.init.inUse(full) && !opts.force) {
      throw new SbxError('conflict', `image ${ref}: image is being used by a container`, { details: { address: this.init.address } });
    }
    this.present.delete(full);
  }

  async *build(context: Readable, tag: string, _opts: { labels?: Record<string, string> } = {}): AsyncGenerator<string> {
    await this.init.engine('images.build');
    for await (const _ of context) {
      /* read the context, as the engine would */
    }
    const full = normalizeRef(tag);
    this.present.set(full, this.init.clock());
    yield `Successfully built ${digestOf(full).slice(0, 12)}\n`;
    yield `Successfully tagged ${full}\n`;
  }
}

/** `busybox` -> `busybox:latest`; references with a tag or a digest are kept. */
function normalizeRef(ref: string): string {
  if (ref.includes('@')) return ref;
  const last = ref.slice(ref.lastIndexOf('/') + 1);
  return last.includes(':') ? ref : `${ref}:latest`;
}

function digestOf(ref: string): string {
  return createHash('sha256').update(ref).digest('hex');
}

/** Every pair must match; a value of '' only asks that the label exists. */
function matches(labels: Record<string, string>, filter: Record<string, string> | undefined): boolean {
  return Object.entries(filter ?? {}).every(([k, v]) => Object.hasOwn(labels, k) && (v === '' || labels[k] === v));
}

/** A writer for the handler that drops what comes after the exit instead of failing. */
function guarded(target: PassThrough): Writable {
  const w = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (target.writableEnded || target.destroyed) return cb();
      if (target.write(chunk)) cb();
      else target.once('drain', () => cb());
    },
  });
  w.on('error', () => undefined);
  return w;
}

function endOf(w: Writable): Promise<void> {
  return new Promise((resolve) => {
    if (w.writableFinished) return resolve();
    w.end(() => resolve());
  });
}

function collect(stream: PassThrough, limit: number): { text(): string; truncated: boolean } {
  const chunks: Buffer[] = [];
  let size = 0;
  const state = {
    truncated: false,
    text: () => Buffer.concat(chunks).toString('utf8'),
  };
  stream.on('data', (chunk: Buffer) => {
    if (size >= limit) {
      state.truncated = true;
      return;
    }
    const room = limit - size;
    if (chunk.length > room) {
      state.truncated = true;
      chunk = chunk.subarray(0, room);
    }
    chunks.push(chunk);
    size += chunk.length;
  });
  return state;
}

function abortError(signal: AbortSignal | undefined): SbxError {
  const reason: unknown = signal?.reason;
  return new SbxError('cancelled', `exec aborted: ${reason instanceof Error ? reason.message : String(reason ?? 'aborted')}`, { cause: reason });
}
