import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { connectService } from '../attach/connect.js';
import type { AttachOptions, ServiceConn, SseAttachOptions, SseServiceConn, WsAttachOptions, WsServiceConn } from '../attach/types.js';
import { SbxError, invalidArgument, isSbxError } from '../errors.js';
import { MAX_DURATION_MS } from '../runtime/bounds.js';
import { validateExec, validateExecStream, validateLogs } from '../runtime/spec.js';
import type { ExecOptions, ExecResult, ExecStream, ExecStreamOptions, LogChunk, LogOptions, Runtime } from '../runtime/types.js';
import type { WorkspaceFS } from '../workspace/index.js';
import { attachPath, validateAttach } from './attach-options.js';
import { boxRuntime } from './box-errors.js';
import { BoxFS, type BoxFilesOptions } from './box-fs.js';
import { VNC_PORT } from './box-spec.js';
import type { BoxRecord } from './labels.js';
import { DEFAULT_NETWORK_POLICY, describeEgress, normalizeNetworkPolicy } from './egress-policy.js';
import type { NetworkPolicy } from './egress-policy.js';
import type { SnapshotInfo, SnapshotOptions } from './snapshots.js';
import type { PortGrant } from './port-tokens.js';
import type { BoxInfo, BoxStats, BoxStatus, LifecyclePolicy, PauseOptions } from './types.js';
import { checkpointOutcome } from './checkpoints.js';
import type { CheckpointStore } from './checkpoints.js';
import { checkPort } from '../runtime/ports.js';
import { statusOf } from './reconcile.js';

/**
 * One sandbox, as its user sees it. Exec, stream and workspace calls are use: they keep a
 * session box alive; `info()` is a read and never does (a dashboard must not keep boxes alive).
 * An exec or stream that is open keeps the box alive however long it runs.
 *
 * @example
 * await using box = await manager.create({ image: 'sbx-base:latest' });
 * const { stdout } = await box.exec(['echo', 'hello']);
 */
export interface Box extends AsyncDisposable {
  readonly id: string;
  readonly containerId: string;
  readonly owner: string;
  readonly pool: string;
  readonly policy: LifecyclePolicy;
  readonly image: string;
  readonly workspaceId: string | null;
  /** Where the workspace is mounted inside the box (when it has one). */
  readonly mountPath: string;
  readonly labels: Record<string, string>;
  /** ISO 8601. */
  readonly createdAt: string;
  /** The status the engine last reported (its events and the cleanup passes); `info()` asks it now. */
  readonly status: BoxStatus;
  /** Runs a command to completion. A `timeoutMs` kills it inside the box (`timedOut: true`, exit 137). */
  exec(cmd: string[], opts?: ExecOptions): Promise<ExecResult>;
  /** Starts a command with live stdin/stdout/stderr; the box counts as busy until it exits. */
  stream(cmd: string[], opts?: ExecStreamOptions): Promise<ExecStream>;
  /** The file API of the workspace mounted into this box; not_found when it has none. */
  workspace(): Promise<WorkspaceFS>;
  /**
   * Files anywhere in the box (absolute paths), with the workspace API's calls, run inside the
   * box as its user (or `user`), so what that user may not touch is `forbidden`. Each call is use.
   * not_available when the box cannot have sbx's file tool (docs/box-files.md).
   */
  files(opts?: BoxFilesOptions): BoxFS;
  /**
   * A WebSocket (`ws`) or Server-Sent Events (`sse`) connection to a service listening on a
   * port of the box (one of its `ports`). Resolves once the service answered the handshake,
   * retried until `readyTimeoutMs` (default 10 s); a port not in the box's `ports` is
   * not_available (reason port_not_exposed), one where nothing answers in time not_available
   * (reason port_not_ready), an aborted signal cancelled. The box is in use while it is open.
   */
  attach(port: number, opts: WsAttachOptions): Promise<WsServiceConn>;
  attach(port: number, opts: SseAttachOptions): Promise<SseServiceConn>;
  attach(port: number, opts: AttachOptions): Promise<ServiceConn>;
  /** The box's fields and its status, asked of the engine now. */
  info(): Promise<BoxInfo>;
  /**
   * The box's CPU and memory use now, as the engine measures it (BoxStats). A read, as info() is:
   * not use; a paused box stays paused and an archived one is not restored (nulls for every box
   * not `running` or `paused`).
   */
  stats(): Promise<BoxStats>;
  /**
   * The output of the box's command (its main process: stdout and stderr as the engine logged
   * them; on a pool whose runtime cannot tell them apart, Kubernetes, all is `stdout`). Resolves
   * once the engine answered; the iteration ends at the end of the log, or with `follow` when
   * the command ends, the box is removed or `signal` aborts. `tail` keeps the last lines, `since`
   * (ISO 8601) or `sinceMs` (that long ago) the recent ones. A read: not use, like `info()`.
   *
   * @example
   * for await (const c of await box.logs({ follow: true, tail: 10 })) process[c.stream].write(c.data);
   */
  logs(opts?: LogOptions): Promise<AsyncIterable<LogChunk>>;
  start(): Promise<void>;
  /**
   * Freezes every process of the box in place (the engine's pause: the cgroup freezer): memory and
   * files stay, CPU use drops to zero, status `paused`. Any use of the box (exec, stream, files,
   * workspace through the box, attach, dial, the proxy, VNC) resumes it first; reads (info, logs,
   * list) do not. Pausing a paused box does nothing; a stopped box is conflict; a pool whose
   * runtime has no freezer (Kubernetes) not_available.
   *
   * With `memory: 'release'` the box is checkpointed to disk instead (gVisor pools, `ociRuntime:
   * runsc`): its processes, memory and open files are saved and its container ends, so it holds
   * no memory on the host (`info().pausedMemory` is `released`); a use or `resume()` restores
   * it and its processes go on where they were. A frozen box is released too; a released one
   * stays so under a plain pause(). Other pools: not_available (reason `checkpoint_unsupported`).
   *
   * @example
   * await box.pause({ memory: 'release' });   // a counter in the box stops counting, its RAM is freed
   * await box.exec(['cat', '/tmp/count']);     // restored first: the counter goes on from where it was
   */
  pause(opts?: PauseOptions): Promise<void>;
  /**
   * Brings the box back to running: a paused box is thawed (its processes go on where they were),
   * a stopped one started (its processes start anew, its filesystem kept). A running box: nothing.
   * Counts as use.
   */
  resume(): Promise<void>;
  /**
   * Saves the box's filesystem changes (mounts and tmpfs aside) with its whole record and removes
   * its container, so it costs only disk: status `archived`. Processes end, as with stop. Any use
   * or `resume()` restores it: a new container of the same box (id, record, env, ports, workspace)
   * from the archive, its command started anew. A pool that cannot save a filesystem
   * (Kubernetes): not_available.
   */
  archive(): Promise<void>;
  /**
   * Saves the box's filesystem (not its processes, workspace or tmpfs mounts) as an image owned by
   * the box's owner: pass the snapshot's `id` as `image` to create boxes from it, which start their
   * command anew. A running box is paused for the copy and left running; a paused or stopped one
   * works too. `name` is unique per owner (conflict). Not use. A pool whose runtime cannot
   * (Kubernetes): not_available. docs/lifecycle.md, Snapshots.
   *
   * @example
   * const snap = await box.snapshot({ name: 'deps-installed' });
   * const copy = await manager.create({ image: snap.id, owner: box.owner });
   */
  snapshot(opts?: SnapshotOptions): Promise<SnapshotInfo>;
  /**
   * SIGTERM, then SIGKILL after the box's stop timeout. The box stays registered, unless its
   * runtime cannot start it again (Kubernetes deletes the pod): then the box is removed.
   */
  stop(): Promise<void>;
  /** Force-removes the container and forgets the box. */
  remove(): Promise<void>;
  /**
   * Moves the end of the box's max lifetime to `lifetimeMs` from now, later or sooner than it
   * was (the e2b SDK's `setTimeout`): `maxLifetimeMs` becomes the time since creation plus
   * `lifetimeMs`, and the Manager removes the box at that deadline (within a timer's precision,
   * not at a later cleanup pass), or pauses it with `maxLifetimeAction: 'pause'`. Kept in the
   * data directory, so a restarted Manager keeps the new deadline. Counts as use. A persistent
   * box has no max lifetime: conflict.
   */
  renewLifetime(lifetimeMs: number): Promise<void>;
  /**
   * Replaces where the box may connect to (docs/network.md): new connections follow the new
   * policy at once, and open connections to what it now denies are cut (TCP gets a reset). A bad
   * policy is invalid_argument naming the entry; anything but `'all'` on a pool whose runtime
   * cannot enforce egress is not_available (reason `egress`); a box without a network takes only
   * `'all'` or `'none'`. An archived box keeps it for its restore. Not use. `info().networkPolicy`
   * shows it.
   *
   * @example
   * await box.setNetwork({ egress: { allow: ['pypi.org:443', '*.pythonhosted.org:443'] } });
   */
  setNetwork(policy: NetworkPolicy): Promise<void>;
  /**
   * A URL for `path` on `port` of this box (a port the box published at create). With a public
   * URL (sbx serve, or ManagerConfig.publicUrl) it is the server's authenticated proxy,
   * `<publicUrl>/v1/boxes/<id>/ports/<port>/<path>` (or `<scheme>://<port>-<id>.<proxyDomain>/<path>`
   * with a proxy domain), carrying `?sbx_token=` when `signed` (lifetime `ttlMs`, default 15 min,
   * at most 24 h). A library Manager without a public URL returns the published port itself,
   * `http://127.0.0.1:<hostPort>/<path>`: no proxy, no auth; `signed` there is invalid_argument.
   * not_available (details.reason port_not_exposed) when the port was not published. Counts as use.
   */
  proxy(port: number, path?: string, opts?: ProxyUrlOptions): Promise<string>;
  /**
   * The URL of the box's VNC viewer page on sbx serve, `<publicUrl>/v1/boxes/<id>/vnc/`, with a
   * signed access token for the box's VNC port (lifetime `ttlMs`, default 15 min, at most 24 h) that
   * the page swaps for a cookie, so a browser can open it as it is. not_available when the box was
   * created without `vnc: true` or the Manager has no public URL (the viewer is served by sbx serve).
   */
  vnc(opts?: VncUrlOptions): Promise<string>;
}

/**
 * A box of a Manager in this process (what Manager.create, get and list return): the portable Box
 * (which the SDK's remote box implements too) and what only the process holding the box can
 * offer. sbx serve stands on these.
 */
export interface LocalBox extends Box {
  /** The max lifetime now (create's, or what renewLifetime set); 0: none (persistent). */
  readonly maxLifetimeMs: number;
  /** Whether start() can undo a stop() (not on Kubernetes, where a stop deletes the pod and so the box). */
  readonly restartable: boolean;
  /**
   * pause(), and the box's max lifetime over (0: none, on disk first), as the end of a lifetime
   * whose action is `pause` does: a paused box waits, however long, until renewLifetime sets a new
   * one (e2b's pause, which keeps a sandbox until it is resumed or killed). A stopped box only has
   * its lifetime ended; a pool that cannot pause is not_available, as for pause().
   */
  pauseAndEndLifetime(): Promise<void>;
  /**
   * A TCP connection to a port a service of the box listens on (attach, the proxy and VNC stand
   * on it). While it is open the box counts as in use; its close ends that.
   */
  dial(port: number, opts?: { signal?: AbortSignal }): Promise<Duplex>;
  /** box.proxy() with the token's expiry (epoch ms, when signed), issued by `issuer` if given. */
  proxyUrl(port: number, path?: string, opts?: ProxyUrlOptions, issuer?: PortUrlIssuer): Promise<{ url: string; expiresAt?: number }>;
  /** box.vnc() with the token's expiry (epoch ms), issued by `issuer` if given. */
  vncUrl(opts?: VncUrlOptions, issuer?: PortUrlIssuer): Promise<{ url: string; expiresAt: number }>;
}

/**
 * The server a URL is issued by, when it is not the Manager's own (`ManagerConfig.publicUrl`, or
 * the sbx serve registered last): each sbx serve in front of a Manager hands out URLs under its
 * own address, signed for the API key that asked, which it checks is still live on every use.
 */
export interface PortUrlIssuer {
  publicUrl: string;
  proxyDomain?: string | undefined;
  /** The API key the URL is signed for; '' for none. */
  keyId: string;
}

export interface VncUrlOptions {
  /** The token's lifetime; default 15 min, at most 24 h. */
  ttlMs?: number;
}

export interface ProxyUrlOptions {
  /** Carry a signed access token scoped to this box and port, for a browser. */
  signed?: boolean;
  /** The token's lifetime; default 15 min, at most 24 h. Only with `signed`. */
  ttlMs?: number;
}

export const PROXY_TTL_DEFAULT_MS = 15 * 60_000;
export const PROXY_TTL_MAX_MS = 24 * 3_600_000;

/** Checks box.proxy()'s arguments (the library and the HTTP route share it). */
export function validateProxyArgs(portArg: unknown, path: unknown, opts: unknown): { port: number; path: string; signed: boolean; ttlMs: number } {
  const port = checkPort(portArg);
  const p = path === undefined ? '/' : path;
  if (typeof p !== 'string' || p.length > 4096 || [...p].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f || c === ' ' || c === '#')) {
    throw invalidArgument('path', 'must be a string of at most 4096 characters without spaces, control characters or #');
  }
  const o = (opts ?? {}) as Record<string, unknown>;
  if (typeof o !== 'object' || o === null) throw invalidArgument('opts', 'must be an object');
  for (const k of Object.keys(o)) if (k !== 'signed' && k !== 'ttlMs') throw invalidArgument(k, 'unknown option');
  if (o['signed'] !== undefined && typeof o['signed'] !== 'boolean') throw invalidArgument('signed', 'must be a boolean');
  const signed = o['signed'] === true;
  const ttl = o['ttlMs'];
  if (ttl !== undefined) {
    if (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl < 1_000 || ttl > PROXY_TTL_MAX_MS)
      throw invalidArgument('ttlMs', `must be whole milliseconds, 1000 to ${PROXY_TTL_MAX_MS}`);
    if (!signed) throw invalidArgument('ttlMs', 'only with signed: true');
  }
  return { port, path: p.startsWith('/') ? p : `/${p}`, signed, ttlMs: (ttl as number | undefined) ?? PROXY_TTL_DEFAULT_MS };
}

/** Checks pause()'s options (the library and the HTTP route share it); the memory asked for. */
export function validatePauseOptions(opts: unknown): 'hold' | 'release' {
  if (opts === undefined || opts === null) return 'hold';
  if (typeof opts !== 'object' || Array.isArray(opts)) throw invalidArgument('opts', 'must be an object');
  for (const k of Object.keys(opts)) if (k !== 'memory') throw invalidArgument(k, 'unknown option');
  const memory = (opts as { memory?: unknown }).memory;
  if (memory === undefined) return 'hold';
  if (memory !== 'hold' && memory !== 'release') throw invalidArgument('memory', "must be 'hold' or 'release'");
  return memory;
}

/** Where box.proxy() points: the server's public URL and its proxy domain, when there is one. */
export interface ProxyBase {
  publicUrl: string | undefined;
  proxyDomain: string | undefined;
}

/** What a box needs from the Manager that owns it. */
export interface BoxHost {
  runtimeFor(pool: string): Runtime;
  /** `graceful`: SIGTERM and the stop timeout first (a stop that removes the box). */
  removeBox(id: string, opts?: { graceful?: boolean }): Promise<void>;
  /** Records that sbx stopped the box on purpose (true) or started it again (false). */
  stopIntent(box: ManagedBox, stopped: boolean): Promise<void>;
  /** Called when an exec or stream of the box has finished. */
  onExecFinished(box: ManagedBox): void;
  workspaceFs(workspaceId: string): Promise<WorkspaceFS>;
  now(): number;
  /** Where proxy URLs point when the caller names no issuer: the config's, or the sbx serve registered last. */
  proxyBase(): ProxyBase;
  /** A signed access token for one port of one box (src/sandbox/port-tokens.ts). */
  signPortToken(grant: PortGrant): Promise<string>;
  /** Persists a max lifetime set after create (labels cannot change); resolves once it is on disk. */
  saveLifetime(box: ManagedBox, maxLifetimeMs: number): Promise<void>;
  /** Archives the box (src/sandbox/archiver.ts); called inside its step. */
  archiveBox(box: ManagedBox): Promise<void>;
  /** Restores an archived box; called inside its step. */
  restoreBox(box: ManagedBox): Promise<void>;
  /** Whether the box's pool can archive it. */
  archivable(box: ManagedBox): boolean;
  /** Where memory-release checkpoints stand, on disk (src/sandbox/checkpoints.ts). Absent: none are taken. */
  checkpoints?: CheckpointStore;
  /** What the Manager's own pauses of the box (idle ladder, end of max lifetime) do with its memory: its pool's `pauseMemory`. */
  pauseMemory?(box: ManagedBox): 'hold' | 'release';
  /** Saves the box's filesystem as a snapshot of its owner (src/sandbox/snapshots.ts). */
  snapshot(box: ManagedBox, opts?: SnapshotOptions): Promise<SnapshotInfo>;
  /** Puts a (normalized) egress policy in force on the box: checked, then given to its runtime; called inside its step. */
  setNetwork(box: ManagedBox, policy: NetworkPolicy): Promise<void>;
  /**
   * The box's next lifecycle deadline may have come sooner (its status changed, work in flight
   * ended, its lifetime was renewed): the Manager arms its timer again. Absent: no timers.
   */
  deadlineMoved?(box: ManagedBox): void;
}

/** When the box was last used, and what is in use right now. */
export class BoxActivityState {
  lastCall: number;
  lastHeartbeat = 0;
  inFlight = 0;
  execsCompleted = 0;
  processCount = 0;

  constructor(now: number) {
    this.lastCall = now;
  }

  /** The latest of an external use and a heartbeat; "now" while work is in flight. */
  lastActive(now: number): number {
    return this.inFlight > 0 ? now : Math.max(this.lastCall, this.lastHeartbeat);
  }
}

/** How long an exec may outlive its box's stop before it is ended (ManagedBox.containerStopped). */
const STOPPED_EXEC_GRACE_MS = 2000;
/** The two states the freezer moves a box between: which of them a box is in is sbx's word, not the engine's (observe). */
const FREEZER_STATES: ReadonlySet<BoxStatus> = new Set(['running', 'paused']);

/** The Manager's Box: the record recovery rebuilds, the activity the cleanup loop reads. */
export class ManagedBox implements LocalBox {
  readonly activity: BoxActivityState;
  /** When this Manager learnt of the box's container (a restore makes a new one): a list taken before cannot contain it. */
  registeredAt: number;
  private current: BoxStatus;
  private boxRt: { of: Runtime; rt: Runtime } | undefined;
  private container: string;
  /** The lifecycle steps asked for so far, chained (step()). */
  private steps: Promise<void> = Promise.resolve();
  /** Removed (or being removed): no later step runs. */
  private retired = false;
  private epoch = 0;
  private pendingSteps = 0;
  /**
   * Paused with its memory released: the container was checkpointed and ended (the engine reads
   * it exited, which for this box means paused). Set by recovery for a box found so.
   */
  memoryReleased = false;
  /** Aborted (after a grace) once the engine says the box's container stopped: the execs in flight then end (containerStopped). */
  private stopped = new AbortController();

  constructor(
    readonly record: BoxRecord,
    containerId: string,
    private readonly host: BoxHost,
    status: BoxStatus = 'running',
    /** Env every exec gets under its own: a claimed warm spare's identity (SBX_*, the caller's env). */
    readonly execEnv: Record<string, string> = {},
  ) {
    this.registeredAt = host.now();
    this.activity = new BoxActivityState(this.registeredAt);
    this.current = status;
    this.container = containerId;
  }

  get status(): BoxStatus {
    return this.current;
  }

  /** A new status can make a lifecycle step due (a box running again may pause), so its deadline is asked again. */
  set status(status: BoxStatus) {
    if (this.current === status) return;
    this.current = status;
    this.host.deadlineMoved?.(this);
  }

  /** The box's container now: a restore from an archive makes a new one ('' while archived). */
  get containerId(): string {
    return this.container;
  }

  /** @internal the archiver's: the box lives in another container now. */
  rebind(containerId: string): void {
    this.container = containerId;
    this.boxRt = undefined;
    this.registeredAt = this.host.now();
  }

  get id(): string {
    return this.record.id;
  }
  get owner(): string {
    return this.record.owner;
  }
  get pool(): string {
    return this.record.pool;
  }
  get policy(): LifecyclePolicy {
    return this.record.policy;
  }
  get image(): string {
    return this.record.image;
  }
  get workspaceId(): string | null {
    return this.record.workspaceId;
  }
  get mountPath(): string {
    return this.record.mountPath;
  }
  get labels(): Record<string, string> {
    return { ...this.record.labels };
  }
  get createdAt(): string {
    return new Date(this.record.createdAt).toISOString();
  }

  get maxLifetimeMs(): number {
    return this.record.maxLifetimeMs;
  }

  /** The pool's runtime, its errors naming this box rather than its container (box-errors.ts). */
  private get runtime(): Runtime {
    const rt = this.host.runtimeFor(this.record.pool);
    if (this.boxRt?.of !== rt) this.boxRt = { of: rt, rt: boxRuntime(rt, this.container, this.id) };
    return this.boxRt.rt;
  }

  /** Whether a stop can be undone by start on this box's runtime (`capabilities.stopStart`; not on Kubernetes). */
  get restartable(): boolean {
    return this.runtime.capabilities.stopStart !== false;
  }

  /** Whether archive() can save this box on its pool (`capabilities.commit`; not on Kubernetes). */
  get archivable(): boolean {
    return this.host.archivable(this);
  }

  /** Whether pause() can freeze this box on its runtime (`capabilities.pause`; not on Kubernetes). */
  get pausable(): boolean {
    return this.runtime.capabilities.pause !== false;
  }

  /** Marks a use of the box (exec, stream, workspace, attach, proxy, getOrCreate). */
  touch(): void {
    this.activity.lastCall = Math.max(this.activity.lastCall, this.host.now());
  }

  /**
   * Runs one lifecycle step (pause, resume, start, stop, archive, restore) after the one before
   * it, so a use never meets a box half-frozen or half-archived and two steps never cross at the engine.
   */
  private step<T>(fn: () => Promise<T>): Promise<T> {
    // A step queued behind a removal finds the box gone, as any lookup would.
    return this.chain(() => {
      if (this.retired) throw new SbxError('not_found', `box '${this.id}' not found`, { details: { id: this.id } });
      return fn();
    });
  }

  private chain<T>(fn: () => Promise<T>): Promise<T> {
    this.pendingSteps++;
    const counted = async () => {
      this.epoch++;
      try {
        return await fn();
      } finally {
        this.epoch++;
        this.pendingSteps--;
      }
    };
    const run = this.steps.then(counted, counted);
    this.steps = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  /** A lifecycle step runs or waits. */
  get stepping(): boolean {
    return this.pendingSteps > 0;
  }

  /** Moves with every lifecycle step: a status read before a step is stale after it. */
  get statusEpoch(): number {
    return this.epoch;
  }

  /**
   * The status the engine reported to a read begun at `epochBefore` (a list, an inspect, an
   * event): taken only when no step ran or waits since, so a read never undoes a pause or an archive.
   */
  observe(status: BoxStatus, epochBefore: number): void {
    if (this.pendingSteps !== 0 || this.epoch !== epochBefore) return;
    // A checkpointed container reads exited: the box is paused, its memory on disk.
    if (this.memoryReleased && status === 'stopped') status = 'paused';
    else if (this.memoryReleased && status !== 'paused') {
      // Started behind sbx (not from its checkpoint): the checkpoint is of a past the box left.
      this.memoryReleased = false;
      void this.host.checkpoints?.set(this.containerId, undefined).catch(() => undefined);
    } else if (FREEZER_STATES.has(status) && FREEZER_STATES.has(this.status) && status !== this.status) {
      // Paused against running is sbx's to say: every pause and thaw is a step of this box, and
      // the engine's paused flag lags containerd on a busy engine (runtime/docker/freezer.ts),
      // so a read that differs is no news. The box's own state is applied again instead, as
      // containerd confirms it: a box frozen behind sbx's back is thawed, and one it froze stays so.
      // A failure leaves the status as it was; the next use or read meets its cause.
      void this.step(() => this.applyFreeze()).catch(() => undefined);
      return;
    }
    this.status = status;
  }

  /** The box's paused or running state, applied again (observe). */
  private async applyFreeze(): Promise<void> {
    if (this.status === 'paused' && !this.memoryReleased) await this.runtime.pause(this.containerId);
    else if (this.status === 'running') await this.runtime.unpause(this.containerId);
  }

  /**
   * The removal as the box's last step: after any pause, archive or restore in flight, and before
   * any asked for later, which then find the box gone. A removal that fails leaves the box as it was.
   */
  async retire(remove: () => Promise<void>): Promise<void> {
    await this.chain(async () => {
      this.retired = true;
      try {
        await remove();
      } catch (err) {
        this.retired = false;
        throw err;
      }
    });
  }

  /**
   * Before every use: a paused box is thawed first. Callers count the use (hold/begin) before
   * they call this, so the idle ladder, which pauses only a box with nothing in flight, cannot
   * freeze it between this check and the use.
   */
  private async awake(): Promise<void> {
    await this.steps;
    if (this.status === 'paused') await this.step(() => this.thaw());
    else if (this.status === 'archived') await this.step(() => this.unarchive());
  }

  /** An archived box made again from its archive (a restore); nothing when it is not archived (any more). */
  private async unarchive(): Promise<void> {
    if (this.status === 'archived') await this.host.restoreBox(this);
  }

  async archive(): Promise<void> {
    if (!this.archivable) {
      throw new SbxError('not_available', `box '${this.id}' runs on pool '${this.pool}', whose runtime cannot save a box's filesystem; stop it instead`, {
        details: { id: this.id, pool: this.pool, reason: 'archive_unsupported' },
      });
    }
    await this.step(async () => {
      if (this.memoryReleased) await this.forgetMemory();
      if (this.status !== 'archived') await this.host.archiveBox(this);
    });
  }

  private async thaw(): Promise<void> {
    if (this.status !== 'paused') return;
    if (this.memoryReleased) return this.restoreMemory();
    await this.runtime.unpause(this.containerId);
    this.status = 'running';
  }

  /** Whether pause({ memory: 'release' }) can be asked of this box's runtime (`capabilities.checkpoint`). */
  private checkCheckpointable(): void {
    if (this.runtime.capabilities.checkpoint !== true || !this.runtime.checkpoint || !this.host.checkpoints) {
      throw new SbxError(
        'not_available',
        `box '${this.id}' runs on pool '${this.pool}', whose runtime cannot checkpoint a box to release its memory (gVisor pools, ociRuntime: runsc, can); pause it without releasing memory instead`,
        { details: { id: this.id, pool: this.pool, reason: 'checkpoint_unsupported' } },
      );
    }
  }

  /**
   * The memory-release pause: the container checkpointed to disk and ended. The checkpoint's name
   * is on disk before the engine is asked, so a Manager killed during it finds the box paused
   * (the engine finished it) or running (it did not), never a box it would start afresh. An
   * engine error settles the same way, by what the engine then holds.
   */
  private async releaseMemory(): Promise<void> {
    const store = this.host.checkpoints!;
    // The checkpoint needs running processes: a frozen box is thawed for it (its CPU for a moment).
    if (this.status === 'paused') await this.thaw();
    if (this.status !== 'running') {
      throw new SbxError('conflict', `box '${this.id}' is ${this.status}: only a running or paused box can be paused with its memory released`, {
        details: { id: this.id, status: this.status },
      });
    }
    // A name of its own: a checkpoint whose files a failed removal left behind is never met again.
    const name = `sbx-${randomBytes(6).toString('hex')}`;
    await store.set(this.containerId, { name, state: 'checkpointing' });
    try {
      await this.runtime.checkpoint!(this.containerId, name);
    } catch (err) {
      const outcome = await checkpointOutcome(this.runtime, this.containerId, name).catch(() => undefined);
      if (outcome !== 'released') {
        await store.set(this.containerId, undefined).catch(() => undefined);
        if (outcome === 'running') this.status = 'running';
        else if (outcome === 'stopped') this.status = 'stopped';
        throw err;
      }
      // The engine said no, but the checkpoint is whole and the container ended: the box is paused.
    }
    await store.set(this.containerId, { name, state: 'checkpointed' });
    this.memoryReleased = true;
    this.status = 'paused';
  }

  /**
   * A released box restored from its checkpoint: its processes go on. The record stays until the
   * container runs, so a Manager killed during the restore finds the box paused (the start did
   * not happen) or running (it did), and forgets the checkpoint then.
   */
  private async restoreMemory(): Promise<void> {
    const store = this.host.checkpoints!;
    const entry = store.get(this.containerId);
    if (!entry)
      throw new SbxError('internal', `box '${this.id}' is paused with its memory released but its checkpoint is not recorded`, { details: { id: this.id } });
    try {
      await this.runtime.restoreCheckpoint!(this.containerId, entry.name);
    } catch (err) {
      if ((await checkpointOutcome(this.runtime, this.containerId, entry.name).catch(() => undefined)) !== 'running') throw err;
    }
    this.memoryReleased = false;
    this.status = 'running';
    await this.dropCheckpoint(entry.name);
  }

  /**
   * A released box stopped (stop, archive): its container has ended already, so its checkpoint
   * goes, and with it the processes a stop ends anyway. The box reads stopped.
   */
  private async forgetMemory(): Promise<void> {
    const entry = this.host.checkpoints?.get(this.containerId);
    this.memoryReleased = false;
    if (entry) await this.dropCheckpoint(entry.name);
    this.status = 'stopped';
  }

  /** Forgets the box's checkpoint: the record, then its files (best effort: the container's removal takes them too). */
  private async dropCheckpoint(name: string): Promise<void> {
    await this.host.checkpoints?.set(this.containerId, undefined);
    await this.runtime.removeCheckpoint?.(this.containerId, name).catch(() => undefined);
  }

  private checkPausable(): void {
    if (!this.pausable) {
      throw new SbxError('not_available', `box '${this.id}' runs on pool '${this.pool}', whose runtime cannot pause a box (no freezer); stop it instead`, {
        details: { id: this.id, pool: this.pool, reason: 'pause_unsupported' },
      });
    }
  }

  async pause(opts?: PauseOptions): Promise<void> {
    const memory = validatePauseOptions(opts);
    if (memory === 'release') this.checkCheckpointable();
    else this.checkPausable();
    await this.step(async () => {
      if (this.status === 'archived')
        throw new SbxError('conflict', `box '${this.id}' is archived: resume it first`, { details: { id: this.id, status: this.status } });
      if (memory === 'release') {
        if (!this.memoryReleased) await this.releaseMemory();
        return;
      }
      if (this.status === 'paused') return;
      await this.runtime.pause(this.containerId);
      this.status = 'paused';
    });
  }

  /**
   * The idle ladder's pause: only when nothing is in flight and no use came since the pass
   * decided (checked inside the step, where no use can start unseen). Whether it paused.
   */
  async pauseIfIdle(plannedAt: number): Promise<boolean> {
    return this.step(async () => {
      if (this.status !== 'running' || this.activity.inFlight > 0 || this.activity.lastActive(this.host.now()) >= plannedAt) return false;
      await this.autoPause();
      return true;
    });
  }

  /**
   * The end of a max lifetime whose action is `pause`: frozen where it runs (a stopped box stays
   * stopped), and the lifetime over, on disk first, so no later pass ends it again.
   */
  async pauseAtLifetimeEnd(): Promise<void> {
    await this.step(async () => {
      await this.host.saveLifetime(this, 0);
      this.record.maxLifetimeMs = 0;
      if (this.status === 'running') await this.autoPause();
    });
  }

  /**
   * A pause the Manager takes by itself, of a running box: as its pool says (`pauseMemory`), with
   * the memory released where the box can be checkpointed, else (a runc box: not_available)
   * frozen, so an idle box is always paused.
   */
  private async autoPause(): Promise<void> {
    if (this.host.pauseMemory?.(this) === 'release' && this.runtime.capabilities.checkpoint === true && this.host.checkpoints) {
      try {
        return await this.releaseMemory();
      } catch (err) {
        if (!isSbxError(err, 'not_available') || this.status !== 'running') throw err;
      }
    }
    await this.runtime.pause(this.containerId);
    this.status = 'paused';
  }

  /** The idle ladder's archive: as pauseIfIdle, only for a box nothing used since the pass decided. Whether it archived. */
  async archiveIfIdle(plannedAt: number): Promise<boolean> {
    return this.step(async () => {
      if (this.status === 'archived' || this.activity.inFlight > 0 || this.activity.lastActive(this.host.now()) >= plannedAt) return false;
      if (this.memoryReleased) await this.forgetMemory();
      await this.host.archiveBox(this);
      return true;
    });
  }

  async pauseAndEndLifetime(): Promise<void> {
    this.checkPausable();
    await this.pauseAtLifetimeEnd();
  }

  async resume(): Promise<void> {
    this.touch();
    await this.step(async () => {
      if (this.status === 'paused') await this.thaw();
      else if (this.status === 'archived') await this.unarchive();
      else if (this.status === 'stopped') await this.startNow();
    });
  }

  async exec(cmd: string[], opts?: ExecOptions): Promise<ExecResult> {
    const valid = validateExec(cmd, opts);
    const finish = this.begin();
    try {
      await this.awake();
      const lost = this.stopped.signal;
      try {
        return await this.runtime.exec(this.containerId, cmd, this.withEnv(this.endedWithBox(valid, lost)));
      } catch (err) {
        if (lost.aborted && !valid.signal?.aborted) throw lost.reason as SbxError;
        throw err;
      }
    } finally {
      finish();
    }
  }

  /**
   * The engine said the box's container stopped (it exited, was killed, or the OOM killer took
   * it). An exec's connection normally ends with its box; on gVisor a sandbox the host's OOM
   * killer took never closes it (the box's network stack died inside the sandbox: no FIN, no
   * RST) and runsc's engine exec never returns. After a grace in which a live connection
   * would have closed by itself, the execs still in flight are ended.
   */
  containerStopped(): void {
    const ctl = this.stopped;
    this.stopped = new AbortController();
    const reason = new SbxError('conflict', `box ${this.id} stopped while the exec ran`, { details: { id: this.id, reason: 'box_stopped' } });
    setTimeout(() => ctl.abort(reason), STOPPED_EXEC_GRACE_MS).unref();
  }

  /** The exec's options with its abort also firing when the box stops under it. */
  private endedWithBox<T extends { signal?: AbortSignal }>(opts: T, lost: AbortSignal): T {
    return { ...opts, signal: opts.signal ? AbortSignal.any([opts.signal, lost]) : lost };
  }

  async stream(cmd: string[], opts?: ExecStreamOptions): Promise<ExecStream> {
    const valid = validateExecStream(cmd, opts);
    const finish = this.begin();
    let stream: ExecStream;
    try {
      await this.awake();
      stream = await this.runtime.execStream(this.containerId, cmd, this.withEnv(this.endedWithBox(valid, this.stopped.signal)));
    } catch (err) {
      finish();
      throw err;
    }
    stream.wait().then(finish, finish);
    return stream;
  }

  async dial(port: number, opts: { signal?: AbortSignal } = {}): Promise<Duplex> {
    const end = this.hold();
    let socket: Duplex;
    try {
      await this.awake();
      socket = await this.runtime.dialPort(this.containerId, port, opts);
    } catch (err) {
      end();
      throw err;
    }
    socket.once('close', end);
    return socket;
  }

  attach(port: number, opts: WsAttachOptions): Promise<WsServiceConn>;
  attach(port: number, opts: SseAttachOptions): Promise<SseServiceConn>;
  attach(port: number, opts: AttachOptions): Promise<ServiceConn>;
  async attach(port: number, opts: AttachOptions): Promise<ServiceConn> {
    const valid = validateAttach(port, opts);
    const signal = valid.signal;
    if (signal?.aborted) throw new SbxError('cancelled', `attach to port ${port} cancelled`, { details: { id: this.id, port } });
    this.touch();
    // Its address is asked of the box's container before any dial: an archived box must be back.
    await this.awake();
    const scheme = valid.protocol === 'ws' ? 'ws' : 'http';
    const url = `${scheme}://${await this.attachAuthority(port)}${attachPath(valid.path)}`;
    // Every attempt dials a fresh socket, which holds the box in use until it closes: the
    // connection's socket is the one that stays open as long as the ServiceConn.
    return connectService(
      { url, port, ...(valid.headers ? { headers: valid.headers } : {}), dial: () => this.dial(port, signal ? { signal } : {}) },
      { protocol: valid.protocol, ...(valid.readyTimeoutMs !== undefined ? { readyTimeoutMs: valid.readyTimeoutMs } : {}), ...(signal ? { signal } : {}) },
    );
  }

  /**
   * The host:port an attach's requests name (the connection itself always goes through dial):
   * the published address where the runtime publishes ports, else the box's own port
   * (Kubernetes, where dialPort checks that the port is listed).
   */
  private async attachAuthority(port: number): Promise<string> {
    if (this.runtime.capabilities.publishedPorts === false) return `127.0.0.1:${port}`;
    const c = await this.runtime.inspect(this.containerId);
    const published = c.ports.find((p) => p.containerPort === port && p.protocol === 'tcp');
    if (!published) {
      throw new SbxError('not_available', `port ${port} of box '${this.id}' is not exposed: list it in the box's ports at create`, {
        details: { id: this.id, port, reason: 'port_not_exposed' },
      });
    }
    const host = published.hostIp === '' || published.hostIp === '0.0.0.0' || published.hostIp === '::' ? '127.0.0.1' : published.hostIp;
    return `${host.includes(':') ? `[${host}]` : host}:${published.hostPort}`;
  }

  /** Use in progress that is not an exec (an open connection); the returned function ends it (once). */
  private hold(): () => void {
    this.touch();
    this.activity.inFlight++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.activity.inFlight--;
      this.touch();
      // Idle deadlines start to run once nothing is in flight.
      if (this.activity.inFlight === 0) this.host.deadlineMoved?.(this);
    };
  }

  async proxy(port: number, path?: string, opts?: ProxyUrlOptions): Promise<string> {
    return (await this.proxyUrl(port, path, opts)).url;
  }

  async vnc(opts?: VncUrlOptions): Promise<string> {
    return (await this.vncUrl(opts)).url;
  }

  async vncUrl(opts: VncUrlOptions = {}, issuer?: PortUrlIssuer): Promise<{ url: string; expiresAt: number }> {
    const v = validateProxyArgs(VNC_PORT, '/', { ...opts, signed: true });
    if (!this.record.vnc) {
      throw new SbxError('not_available', `box '${this.id}' was created without vnc; create it with vnc: true (and a desktop image such as sbx-desktop)`, {
        details: { id: this.id, reason: 'vnc_not_enabled' },
      });
    }
    const { publicUrl, keyId } = this.issuer(issuer);
    if (!publicUrl) {
      throw new SbxError('not_available', 'the VNC viewer is served by sbx serve: this Manager has no public URL (publicUrl)', {
        details: { id: this.id, reason: 'no_public_url' },
      });
    }
    this.touch();
    await this.awake();
    const pub = new URL(publicUrl);
    const expiresAt = this.host.now() + v.ttlMs;
    const token = await this.host.signPortToken({ boxId: this.id, nonce: this.record.tokenNonce, port: VNC_PORT, expiresAt, keyId });
    const page = `${pub.origin}${pub.pathname.replace(/\/+$/, '')}/v1/boxes/${encodeURIComponent(this.id)}/vnc/`;
    return { url: `${page}?sbx_token=${token}`, expiresAt };
  }

  /**
   * The port's published address (`http://127.0.0.1:<host port><path>`), checking that the port was
   * published. A runtime that publishes none (Kubernetes) has no such address: its ports are reached
   * through the proxy only, whose dial checks the port, so then only a caller that needs the
   * address (`needed`: no public URL) gets an error.
   */
  private async publishedUrl(port: number, path: string, needed: boolean): Promise<string | undefined> {
    if (this.runtime.capabilities.publishedPorts === false) {
      if (!needed) return undefined;
      throw new SbxError(
        'not_available',
        `box '${this.id}' runs on pool '${this.pool}', which publishes no ports: reach port ${port} through sbx serve's proxy (publicUrl)`,
        {
          details: { id: this.id, port, reason: 'port_not_published' },
        },
      );
    }
    const c = await this.runtime.inspect(this.containerId);
    const published = c.ports.find((p) => p.containerPort === port && p.protocol === 'tcp');
    if (!published) {
      throw new SbxError('not_available', `box '${this.id}' did not publish port ${port}; create it with ports: [{ containerPort: ${port} }]`, {
        details: { id: this.id, port, reason: 'port_not_exposed' },
      });
    }
    return `http://127.0.0.1:${published.hostPort}${path}`;
  }

  async proxyUrl(port: number, path?: string, opts?: ProxyUrlOptions, issuer?: PortUrlIssuer): Promise<{ url: string; expiresAt?: number }> {
    const v = validateProxyArgs(port, path, opts);
    const base = this.issuer(issuer);
    const keyId = base.keyId;
    if (!base.publicUrl && v.signed) {
      throw new SbxError('invalid_argument', 'signed: this Manager has no public URL (publicUrl), so there is no proxy to sign for; sbx serve sets one', {
        details: { field: 'signed' },
      });
    }
    // A use: an archived box is restored (its ports are published anew), a paused one thawed.
    await this.awake();
    const direct = await this.publishedUrl(v.port, v.path, !base.publicUrl);
    this.touch();
    if (!base.publicUrl) return { url: direct! };
    const pub = new URL(base.publicUrl);
    // Host names are lower case: an id with capitals is reachable by path only.
    const url =
      base.proxyDomain && this.id === this.id.toLowerCase()
        ? `${pub.protocol}//${v.port}-${this.id}.${base.proxyDomain}${pub.port ? `:${pub.port}` : ''}${v.path}`
        : `${pub.origin}${pub.pathname.replace(/\/+$/, '')}/v1/boxes/${encodeURIComponent(this.id)}/ports/${v.port}${v.path}`;
    if (!v.signed) return { url };
    const expiresAt = this.host.now() + v.ttlMs;
    const token = await this.host.signPortToken({ boxId: this.id, nonce: this.record.tokenNonce, port: v.port, expiresAt, keyId });
    const q = url.indexOf('?');
    const sep = q === -1 ? '?' : q === url.length - 1 ? '' : '&';
    return { url: `${url}${sep}sbx_token=${token}`, expiresAt };
  }

  /** Who the URL is for: the caller's issuer, else the Manager's own base (signed for no key). */
  private issuer(given: PortUrlIssuer | undefined): ProxyBase & { keyId: string } {
    if (given === undefined) return { ...this.host.proxyBase(), keyId: '' };
    return { publicUrl: given.publicUrl, proxyDomain: given.proxyDomain, keyId: given.keyId };
  }

  private withEnv<T extends { env?: Record<string, string> }>(opts: T): T {
    return Object.keys(this.execEnv).length === 0 ? opts : { ...opts, env: { ...this.execEnv, ...opts.env } };
  }

  /** Registers work in flight; the returned function ends it (once). */
  private begin(): () => void {
    const end = this.hold();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      end();
      this.activity.execsCompleted++;
      this.host.onExecFinished(this);
    };
  }

  files(opts?: BoxFilesOptions): BoxFS {
    return new BoxFS(
      {
        boxId: this.id,
        // Asked before the run: an archived box must be back to have a tool (a use anyway).
        tool: async () => {
          await this.awake();
          return (await this.runtime.boxTool?.(this.containerId)) ?? null;
        },
        run: (cmd, o, hold) => this.runFileTool(cmd, o, hold),
      },
      opts,
    );
  }

  /** One run of the file tool: in use until it exits, except a watch, which only counts as a use when it starts. */
  private async runFileTool(cmd: string[], opts: { user?: string }, hold: boolean): Promise<ExecStream> {
    const end = hold ? this.hold() : (this.touch(), () => undefined);
    let stream: ExecStream;
    try {
      await this.awake();
      stream = await this.runtime.execStream(this.containerId, cmd, opts);
    } catch (err) {
      end();
      throw err;
    }
    stream.wait().then(end, end);
    return stream;
  }

  async workspace(): Promise<WorkspaceFS> {
    if (!this.record.workspaceId) throw new SbxError('not_found', `box '${this.id}' has no workspace`, { details: { id: this.id } });
    this.touch();
    // The workspace's files live outside the box, but a use is a use: a paused box wakes for it too.
    await this.awake();
    return this.host.workspaceFs(this.record.workspaceId);
  }

  async info(): Promise<BoxInfo> {
    const before = this.epoch;
    // An archived box has no container to ask: its record is all there is.
    const c =
      this.status === 'archived'
        ? { status: 'archived' as const, ports: [], execPath: undefined, exitCode: null, oomKilled: false }
        : await this.runtime.inspect(this.containerId);
    this.observe(c.status === 'archived' ? 'archived' : statusOf(c.status), before);
    return {
      id: this.id,
      containerId: this.containerId,
      pool: this.pool,
      owner: this.owner,
      status: this.status,
      policy: this.policy,
      labels: this.labels,
      image: this.record.image,
      createdAt: this.createdAt,
      lastActive: new Date(this.activity.lastActive(this.host.now())).toISOString(),
      processCount: this.activity.processCount,
      vnc: this.record.vnc,
      workspaceId: this.record.workspaceId,
      mountPath: this.record.mountPath,
      idleTimeoutMs: this.record.idleTimeoutMs,
      idlePauseMs: this.record.idlePauseMs,
      idleArchiveMs: this.record.idleArchiveMs,
      maxLifetimeMs: this.record.maxLifetimeMs,
      maxLifetimeAction: this.record.maxLifetimeAction,
      stopTimeoutMs: this.record.stopTimeoutMs,
      ports: c.ports,
      execPath: c.execPath ?? 'engine',
      exitCode: this.status === 'stopped' || this.status === 'restarting' ? c.exitCode : null,
      oomKilled: (this.status === 'stopped' || this.status === 'restarting') && c.oomKilled,
      pausedMemory: this.status === 'paused' ? (this.memoryReleased ? 'released' : 'held') : null,
      networkPolicy: await this.networkPolicy(),
    };
  }

  /**
   * The egress policy in force: the one this Manager last set (its record: create, setNetwork, an
   * archive's), else, for a box adopted after a restart, what the runtime enforces
   * (Runtime.getEgress, asked once: a list of boxes must not cost a helper or sidecar call per
   * box), else `'all'` (a runtime that enforces no egress holds no other).
   */
  private async networkPolicy(): Promise<NetworkPolicy> {
    if (this.record.networkPolicy) return this.record.networkPolicy;
    if (this.status !== 'archived' && this.runtime.capabilities.egress === true && this.runtime.getEgress) {
      const spec = await this.runtime.getEgress(this.containerId);
      if (spec) return (this.record.networkPolicy = describeEgress(spec));
    }
    return DEFAULT_NETWORK_POLICY;
  }

  async stats(): Promise<BoxStats> {
    // A read, as info() is: no touch, no thaw, no restore.
    const measured = (status: BoxStatus) => status === 'running' || status === 'paused';
    if (this.memoryReleased && this.status === 'paused') {
      // Checkpointed: no process and no memory on the host, which is the point.
      return {
        status: this.status,
        cpuPercent: 0,
        memoryBytes: 0,
        memoryLimitBytes: null,
        pids: 0,
        memoryCacheBytes: 0,
        diskUsedBytes: null,
        sampledAt: new Date(this.host.now()).toISOString(),
      };
    }
    if (measured(this.status)) {
      const s = await this.runtime.stats(this.containerId);
      // Stopped while the engine measured it: what it said is of no process.
      if (measured(this.status)) {
        return {
          status: this.status,
          cpuPercent: s.cpuPercent,
          memoryBytes: s.memoryBytes,
          memoryLimitBytes: s.memoryLimitBytes,
          pids: s.pids,
          memoryCacheBytes: s.memoryCacheBytes ?? null,
          diskUsedBytes: s.diskUsedBytes ?? null,
          sampledAt: new Date(this.host.now()).toISOString(),
        };
      }
    }
    return {
      status: this.status,
      cpuPercent: null,
      memoryBytes: null,
      memoryLimitBytes: null,
      pids: null,
      memoryCacheBytes: null,
      diskUsedBytes: null,
      sampledAt: new Date(this.host.now()).toISOString(),
    };
  }

  async logs(opts?: LogOptions): Promise<AsyncIterable<LogChunk>> {
    // A read, as info() is: no touch (and no restore).
    const valid = validateLogs(opts);
    if (this.status === 'archived') {
      throw new SbxError('conflict', `box '${this.id}' is archived: its log went with its container (a restored box logs anew)`, {
        details: { id: this.id, status: this.status },
      });
    }
    return this.runtime.logs(this.containerId, valid);
  }

  async start(): Promise<void> {
    this.touch();
    await this.step(async () => {
      if (this.status === 'paused') await this.thaw();
      else if (this.status === 'archived') await this.unarchive();
      else await this.startNow();
    });
  }

  private async startNow(): Promise<void> {
    if (!this.restartable && this.status === 'stopped') {
      throw new SbxError(
        'not_available',
        `box '${this.id}' has ended and pool '${this.pool}' cannot start a box again (a pod never runs twice); create a new box`,
        {
          details: { id: this.id, pool: this.pool, reason: 'stop_start' },
        },
      );
    }
    await this.runtime.start(this.containerId);
    this.status = 'running';
    await this.host.stopIntent(this, false);
  }

  /**
   * SIGTERM, then SIGKILL after the stop timeout. Where the runtime cannot start a box again
   * (Kubernetes: the pod is deleted) the stopped box is gone, so the box is removed with it.
   */
  async stop(): Promise<void> {
    if (!this.restartable) {
      await this.host.removeBox(this.id, { graceful: true });
      this.status = 'stopped';
      return;
    }
    await this.step(async () => {
      // Before the engine is asked, so a box caught stopped half-way is never started behind the caller.
      await this.host.stopIntent(this, true);
      // Thawed first: a frozen process cannot run its SIGTERM handler, so the stop would always
      // end in the SIGKILL after the timeout.
      // An archived box has no processes to stop.
      if (this.status === 'archived') return;
      if (this.memoryReleased) return this.forgetMemory();
      if (this.status === 'paused') await this.thaw();
      await this.runtime.stop(this.containerId, { timeoutMs: this.record.stopTimeoutMs });
      this.status = 'stopped';
    });
  }

  async remove(): Promise<void> {
    await this.host.removeBox(this.id);
  }

  async snapshot(opts?: SnapshotOptions): Promise<SnapshotInfo> {
    // A step: the engine pauses the container for the copy, and a reconcile listing it meanwhile
    // must not record the box as paused after the copy has thawed it (observe skips during steps).
    return this.step(() => this.host.snapshot(this, opts));
  }

  async renewLifetime(lifetimeMs: number): Promise<void> {
    if (typeof lifetimeMs !== 'number' || !Number.isInteger(lifetimeMs) || lifetimeMs < 1 || lifetimeMs > MAX_DURATION_MS) {
      throw invalidArgument('lifetimeMs', `must be whole milliseconds, 1 to ${MAX_DURATION_MS}`);
    }
    if (this.policy === 'persistent') {
      throw new SbxError('conflict', `box '${this.id}' is persistent: it has no max lifetime to renew`, { details: { id: this.id, policy: this.policy } });
    }
    const now = this.host.now();
    const maxLifetimeMs = Math.max(0, now - this.record.createdAt) + lifetimeMs;
    // On disk first: a deadline the caller was told about must survive a restart.
    await this.host.saveLifetime(this, maxLifetimeMs);
    this.record.maxLifetimeMs = maxLifetimeMs;
    this.touch();
    this.host.deadlineMoved?.(this);
  }

  async setNetwork(policy: NetworkPolicy): Promise<void> {
    const valid = normalizeNetworkPolicy(policy, 'networkPolicy');
    // A step: an archive or restore in flight ends first, so the policy lands on the container the box has.
    await this.step(() => this.host.setNetwork(this, valid));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.remove();
    } catch (err) {
      if (!(err instanceof SbxError && err.code === 'not_found')) throw err;
    }
  }
}
