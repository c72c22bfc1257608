import type { WarmTemplate } from './config.js';
import type { AgentDeliveryChoice, PortSpec } from '../runtime/types.js';
import type { NetworkPolicy } from './egress-policy.js';

/** What the cleanup loop does with a box; see policy.ts for the table. */
/** What the end of a box's max lifetime does (CreateOptions.maxLifetimeAction). */
export type MaxLifetimeAction = 'remove' | 'pause';
export const MAX_LIFETIME_ACTIONS: readonly MaxLifetimeAction[] = ['remove', 'pause'];

export type LifecyclePolicy = 'oneshot' | 'session' | 'longrunning' | 'persistent';
export const LIFECYCLE_POLICIES: readonly LifecyclePolicy[] = ['oneshot', 'session', 'longrunning', 'persistent'];
export const DEFAULT_POLICY: LifecyclePolicy = 'session';

/**
 * Named container hardening presets. `standard`: no-new-privileges, a reduced capability set,
 * a pids limit. `strict`: also no capabilities at all, a read-only root with a tmpfs /tmp,
 * and no network unless one is asked for. `sudo`: `standard` without no-new-privileges, so
 * setuid programs take effect: a box user can become the box's root through the image's `sudo`
 * (E2B's base template, docs/e2b.md), and that root has no more than `standard`'s capabilities.
 */
export type SecurityProfile = 'standard' | 'strict' | 'sudo';
/** The profiles a pool may default to: `sudo` is asked for box by box, never a pool's default. */
export type PoolSecurityProfile = Exclude<SecurityProfile, 'sudo'>;

export type MountMode = 'rw' | 'ro';

export interface CreateOptions {
  /** Given (validated: [a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}, unique) or generated as `sb-…`. */
  id?: string;
  owner?: string;
  labels?: Record<string, string>;
  /** Pool name; default is the first pool (or the workspace's node). */
  pool?: string;
  image: string;
  /** Command replacing the image's; default is the graceful-shutdown sleep. */
  cmd?: string[];
  workDir?: string;
  user?: string;
  env?: Record<string, string>;
  /** Bytes. */
  memory?: number;
  cpus?: number;
  pidsLimit?: number;
  vnc?: boolean;
  /**
   * Every TCP port of the box is reachable through `dial` and so the port proxy (`box.proxy`, the
   * SDK's attach), not only those in `ports`: the runtime routes to the box's own address and
   * publishes nothing more on the host. For services started after create (the e2b endpoints'
   * `getHost` needs it). The library's `attach` still takes a port from `ports`.
   */
  proxyAllPorts?: boolean;
  ports?: PortSpec[];
  policy?: LifecyclePolicy;
  idleTimeoutMs?: number;
  /**
   * The idle ladder's first step: after this long without use the box is paused (memory and
   * files kept, no CPU) and the next use resumes it. 0: never (the pool's default, 0 unless set).
   * It must be shorter than `idleTimeoutMs`, the ladder's next step (except for persistent boxes,
   * which idle never stops). docs/lifecycle.md.
   */
  idlePauseMs?: number;
  /**
   * The idle ladder's second step: after this long without use the box is archived (its
   * filesystem and record kept, its container removed; processes end) and the next use restores
   * it. 0: never (the pool's default, 0 unless set). After `idlePauseMs`, before `idleTimeoutMs`
   * (except for persistent boxes). Skipped where the pool cannot archive (Kubernetes).
   */
  idleArchiveMs?: number;
  stopTimeoutMs?: number;
  maxLifetimeMs?: number;
  /**
   * What the end of the max lifetime does: `remove` the box (default), or `pause` it (e2b's
   * `onTimeout: 'pause'`): frozen, memory and files kept, and its lifetime over (none, until
   * `renewLifetime` sets one again). Where the pool cannot pause (Kubernetes), it is removed.
   */
  maxLifetimeAction?: MaxLifetimeAction;
  /**
   * Default: sbx's isolated network (docs/network.md). `none`: no network. Another name: that
   * engine network, only when the pool lists it (PoolConfig.networks); `host` never.
   */
  network?: string;
  /**
   * Where the box may connect to (docs/network.md): `{ egress: 'all' | 'none' | { allow, deny } }`.
   * Default: the pool's `networkPolicy` (itself `{ egress: 'all' }` unless configured). Anything
   * but `'all'` needs a pool whose runtime enforces egress (`not_available`, reason `egress`,
   * otherwise); a box without a network (`network: 'none'`, the strict profile) takes only
   * `'all'` or `'none'`. Changeable while it runs: `box.setNetwork`.
   */
  networkPolicy?: NetworkPolicy;
  security?: SecurityProfile;
  workspaceId?: string;
  mountMode?: MountMode;
  mountPath?: string;
}

export interface ListOptions {
  owner?: string;
  pool?: string;
  labels?: Record<string, string>;
}

/**
 * What the engine says of a box's main process, one word per state:
 * - `creating`: created, not started yet;
 * - `running`: its process runs;
 * - `paused`: frozen in place by the engine's freezer (`pause()`, the idle ladder, the end of a
 *   lifetime with action `pause`); any use resumes it first;
 * - `restarting`: it ended and the engine is starting it again (a restart policy someone else
 *   gave it: sbx gives none), `exitCode` says how the last run ended;
 * - `stopped`: it ended or was stopped, and nothing starts it again by itself; `exitCode` (and
 *   `oomKilled`) say how, whether it exited on its own or `stop()` ended it;
 * - `archived`: no container, its filesystem and record kept in an archive (`archive()`, the idle
 *   ladder); any use restores it. docs/lifecycle.md.
 */
/** What a paused box keeps in the host's memory (BoxInfo.pausedMemory). */
export type PausedMemory = 'held' | 'released';

/** `box.pause()`'s options. */
export interface PauseOptions {
  /**
   * `hold` (default): the engine's freezer, memory kept, back in milliseconds. `release`: the box
   * is checkpointed to disk with its processes, memory and open files, and its memory freed; it
   * comes back where it was on any use (about a second). Pools on gVisor (`ociRuntime: runsc`)
   * only; others are not_available.
   */
  memory?: 'hold' | 'release';
}

export type BoxStatus = 'creating' | 'running' | 'paused' | 'restarting' | 'stopped' | 'archived';
export const BOX_STATUSES: readonly BoxStatus[] = ['creating', 'running', 'paused', 'restarting', 'stopped', 'archived'];

/**
 * A box's CPU and memory use (`box.stats()`), the same from the library and the SDK. A read: it
 * is not use (no touch, a paused box stays paused, an archived one is not restored). Numbers
 * come from the engine for a `running` or `paused` box (paused: memory kept, CPU 0); every other
 * status has no process to measure and answers nulls. A null is also what a runtime that does
 * not measure a value gives (Kubernetes: `cpuPercent`).
 */
export interface BoxStats {
  /** The box's status when it was read (nulls unless `running` or `paused`). */
  status: BoxStatus;
  /**
   * CPU use in percent of one core (200: two cores busy), since the box's previous read (Docker:
   * a read within a minute before; else over the engine's own 1 s between two samples).
   */
  cpuPercent: number | null;
  /** Memory in use, dropable page cache left out (as `docker stats` counts it). */
  memoryBytes: number | null;
  /** The memory the box is held to (its limit). */
  memoryLimitBytes: number | null;
  /** Processes and threads in the box. */
  pids: number | null;
  /** Page cache of the box's files; null where the engine does not say. */
  memoryCacheBytes: number | null;
  /** Bytes the box wrote over its image (Docker); null where the engine does not say. */
  diskUsedBytes: number | null;
  /** ISO 8601: when it was read. */
  sampledAt: string;
}

/** A server in front of a Manager (Manager.registerServer). */
export interface ServerEndpoints {
  /** Its base URL, where box.proxy() and box.vnc() point. */
  publicUrl: string;
  /** Its host-based proxy domain (`<port>-<id>.<domain>`), if any. */
  proxyDomain?: string | undefined;
  /** The gRPC heartbeat address boxes created from now on dial (SBX_GRPC_ADDR), if it serves one boxes can reach. */
  grpcAddr?: string | undefined;
}

/** The seed's BoxInfo, with camelCase fields and ISO 8601 times. */
export interface BoxInfo {
  id: string;
  containerId: string;
  pool: string;
  owner: string;
  status: BoxStatus;
  policy: LifecyclePolicy;
  labels: Record<string, string>;
  image: string;
  createdAt: string;
  lastActive: string;
  processCount: number;
  vnc: boolean;
  workspaceId: string | null;
  mountPath: string;
  idleTimeoutMs: number;
  idlePauseMs: number;
  idleArchiveMs: number;
  maxLifetimeMs: number;
  maxLifetimeAction: MaxLifetimeAction;
  stopTimeoutMs: number;
  ports: Array<{ containerPort: number; hostIp: string; hostPort: number; protocol: 'tcp' | 'udp' }>;
  /** What serves exec and stream: the box's in-box agent, or the engine's exec (docs/agent.md). */
  execPath: 'agent' | 'engine';
  /**
   * How the box's main process ended, when it is stopped: its exit code (128+N for signal N;
   * 137 with `oomKilled` is the kernel's OOM killer); null while running or never started. The
   * engine does not restart a box whose command exits: it stays stopped and says why.
   */
  exitCode: number | null;
  oomKilled: boolean;
  /**
   * What a paused box holds: `held` (frozen in place, its memory kept on the host) or `released`
   * (`pause({ memory: 'release' })`: checkpointed to disk, no process and no memory on the host);
   * null when the box is not paused.
   */
  pausedMemory: PausedMemory | null;
  /** Where the box may connect to now (its create's policy, or the last `setNetwork`'s), in canonical form. */
  networkPolicy: NetworkPolicy;
}

/**
 * A pool as `pools()` reports it: its settings (what `addPool()` takes; `connected` and `boxes`
 * are status, ignored there) and its state.
 */
export interface PoolInfo {
  name: string;
  addr: string;
  connected: boolean;
  boxes: number;
  maxPerUser: number;
  maxTotal: number;
  idleTimeoutMs: number;
  idlePauseMs: number;
  idleArchiveMs: number;
  maxLifetimeMs: number;
  stopTimeoutMs: number;
  security: PoolSecurityProfile;
  memory: number;
  cpus: number;
  /** New boxes get the in-box agent. */
  agent: boolean;
  /** Docker networks its boxes may name besides `none` (PoolConfig.networks). */
  networks: string[];
  /** The egress policy of a box that names none (PoolConfig.networkPolicy). */
  networkPolicy: NetworkPolicy;
  /** Warm-pool templates (docs/warm-pools.md). */
  warm: WarmTemplate[];
  ociRuntime?: string;
  /** What the Manager's own pauses (idle ladder, end of max lifetime) do with memory: present when `release` (PoolConfig.pauseMemory). */
  pauseMemory?: 'hold' | 'release';
  pidsLimit?: number;
  maxMemory?: number;
  maxCpus?: number;
  /** Kubernetes: the agent's image (PoolConfig.agentImage). */
  agentImage?: string;
  /** Kubernetes: how the agent binary gets into a pod, as configured (PoolConfig.agentDelivery). */
  agentDelivery?: AgentDeliveryChoice;
  readyTimeoutMs?: number;
  storageClass?: string;
}

export interface HeartbeatInput {
  active: boolean;
  processCount?: number;
}

/** One warm-pool template of a pool, as it stands now (`Manager.warm()`). */
export interface WarmInfo {
  pool: string;
  image: string;
  /** The template's shape key: the label of its spares. */
  key: string;
  size: number;
  /** Started spares ready to be claimed. */
  ready: number;
  /** Creates that claimed a spare. */
  hits: number;
  /** Creates that fit the template but found no spare ready, and went cold. */
  misses: number;
  /** Spares that died or vanished and were replaced. */
  replaced: number;
  /** Spares that could not be made. */
  failures: number;
  /** How long the pool's last claim took, ms (the spare's check, the claim on disk). */
  lastClaimMs?: number;
}

/** Counters of what the cleanup loop did since the Manager started. */
export interface CleanupStats {
  ticks: number;
  removedIdle: number;
  removedLifetime: number;
  removedOneshot: number;
  stoppedIdle: number;
  /** Boxes the idle ladder paused. */
  pausedIdle: number;
  /** Boxes paused at the end of their max lifetime (maxLifetimeAction `pause`). */
  pausedLifetime: number;
  /** Boxes the idle ladder archived. */
  archivedIdle: number;
  vanished: number;
  /** Boxes found on the engine after start: creates that landed after their Manager died. */
  adopted: number;
  /** Containers of this Manager created but never started (their creator died in between), removed. */
  swept: number;
  errors: number;
}
