import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import pino from 'pino';
import type { Logger } from 'pino';
import { SbxError, isSbxError, withOptionHint } from '../errors.js';
import { parseImageRef } from '../runtime/image-ref.js';
import type { EgressSpec, HostEndpoint, ImageInfo, NodeRuntimes, PullProgress, RegistryAuth, BoxHeartbeat, UserNamespaceMap } from '../runtime/types.js';
import { isNodeAddress } from '../runtime/remote/address.js';
import { IMAGE_NODE_LABEL } from '../runtime/remote/node-set.js';
import type { NodeHub, NodeInfo } from '../runtime/remote/hub.js';
import { TrustStore } from '../runtime/remote/trust-store.js';
import type { JoinRequest } from '../runtime/remote/trust-store.js';
import type { EngineCall, EngineCallObserver } from '../runtime/timed-runtime.js';
import { ActionLimiter, mapSettled } from '../util/concurrency.js';
import { WorkspaceManager } from '../workspace/index.js';
import type { WorkspaceNode } from '../workspace/index.js';
import { ManagedBox } from './box.js';
import { boxRuntime } from './box-errors.js';
import type { BoxHost, LocalBox, ProxyBase } from './box.js';
import { boxNetworkPolicy, buildContainerSpec, checkEgress, checkNetwork, newBoxRecord } from './box-spec.js';
import { compileEgress } from './egress-policy.js';
import type { NetworkPolicy } from './egress-policy.js';
import { ArchiveStore } from './archives.js';
import { Archiver } from './archiver.js';
import { CleanupLoop, DeadlineTimers, cleanupInput, planCleanup, retryAt } from './cleanup.js';
import type { PlannedCleanup } from './cleanup.js';
import { decideCleanup, nextDue } from './policy.js';
import { resolveConfig, resolvePool, loadConfig } from './config.js';
import type { ManagerConfig, PoolConfig, ResolvedConfig, ResolvedPool, WarmTemplate } from './config.js';
import { validateCreateOptions } from './create-options.js';
import { recordToLabels } from './labels.js';
import type { BoxRecord } from './labels.js';
import { Pool } from './pool.js';
import { egressEndpoints, hostEndpoints } from './host-endpoints.js';
import { CLEANUP_PARALLELISM, Recovery } from './recovery.js';
import { GENERATED_ID_BYTES } from './box-id.js';
import { BoxRegistry } from './registry.js';
import { BoxSecrets } from './secrets.js';
import { BoxTokenService } from './tokens.js';
import { StopIntents } from './stop-intents.js';
import { LifetimeStore } from './lifetimes.js';
import { CheckpointStore } from './checkpoints.js';
import { ClaimStore } from './claims.js';
import { WarmPool } from './warm-pool.js';
import { templateOptions } from './warm.js';
import { Snapshots } from './snapshots.js';
import { WorkspaceVolumes, hasWorkspaceVolumes } from './workspace-volumes.js';
import type { BoxInfo, CleanupStats, CreateOptions, HeartbeatInput, ListOptions, PoolInfo, ServerEndpoints, WarmInfo } from './types.js';

/** Engine calls in flight at once during cleanup and pool removal. */
const DEFAULT_OWNER = 'default';

/** Logged when a claimed box's agent could not be told its identity. */
const IDENTITY_NOT_TOLD = 'could not hand a claimed box its identity; no heartbeats until it is recovered again';

/**
 * Keeps pools of container runtimes and the boxes on them, as the seed's table of operations:
 * create, get, getOrCreate, list, remove, heartbeat; pools; images; and the lifecycle policies,
 * applied at each box's deadlines (a timer per box) with a periodic cleanup pass as the safety
 * net (docs/lifecycle.md, Deadlines). Every lookup is async, as it is in the SDK, so code moves between
 * the two unchanged.
 *
 * @example
 * const manager = new Manager();          // SBX_CONFIG / SBX_* or one pool `local` on the local engine
 * await manager.start();                  // recover existing boxes, arm their deadlines, start the cleanup loop
 * const box = await manager.create({ image: 'sbx-base:latest', owner: 'alice' });
 * console.log((await box.exec(['uname', '-a'])).stdout);
 * await box.remove();
 * await manager.close();
 */
export class Manager {
  readonly config: ResolvedConfig;
  readonly log: Logger;
  /** Workspaces on this Manager's nodes (a node is a pool's host); wired to its boxes' mounts. */
  readonly workspaces: WorkspaceManager;
  /** Box tokens, port access tokens and per-feature keys, all from one secret (src/sandbox/secrets.ts). */
  readonly secrets: BoxSecrets;
  /** Boxes' filesystems saved as images (box.snapshot()): list, get, delete, owner-scoped (src/sandbox/snapshots.ts). */
  readonly snapshots: Snapshots;
  readonly cleanupStats: CleanupStats = {
    ticks: 0,
    removedIdle: 0,
    removedLifetime: 0,
    removedOneshot: 0,
    stoppedIdle: 0,
    pausedIdle: 0,
    pausedLifetime: 0,
    archivedIdle: 0,
    vanished: 0,
    adopted: 0,
    swept: 0,
    errors: 0,
  };
  /** observeEngineCalls's observers; they run on every engine call, so they must be cheap. */
  private readonly engineCallObservers = new Set<EngineCallObserver>();
  private readonly observeEngineCall = (call: EngineCall): void => {
    for (const observe of this.engineCallObservers) observe(call);
  };
  /** The servers in front of this Manager (registerServer), latest last. */
  private readonly servers: ServerEndpoints[] = [];
  private readonly now: () => number;
  private readonly poolsByName = new Map<string, Pool>();
  private readonly registry = new BoxRegistry((box) => this.armDeadline(box));
  /** Creates with a known id in flight: getOrCreate joins them instead of racing them. */
  private readonly creating = new Map<string, Promise<ManagedBox>>();
  /** Removals in progress: a second remove() of the same box waits for the first. */
  private readonly removing = new Map<string, Promise<void>>();
  private readonly loop: CleanupLoop;
  /** Each box's next lifecycle deadline, acted on when it comes (armDeadline); the loop is the safety net. */
  private readonly deadlines: DeadlineTimers<ManagedBox>;
  /** Boxes whose deadline fired, acted on together at the next turn of the event loop. */
  private readonly due = new Set<ManagedBox>();
  /** Those batches while they run: close() waits for them. */
  private readonly dueRuns = new Set<Promise<void>>();
  /** Boxes a cleanup action (a pass's or a deadline's) is working on: nothing else acts on them meanwhile. */
  private readonly acting = new Set<ManagedBox>();
  /**
   * Per pool, the cleanup actions in flight (CLEANUP_PARALLELISM at most), the pass's and the
   * timers' together. Per pool as the pass always was: a pool is an engine of its own, and a slow
   * one does not hold up the others.
   */
  private readonly actionLimiters = new Map<string, ActionLimiter>();
  /** Boxes whose last cleanup actions failed: how many in a row, and when their timer tries again. */
  private readonly failedActions = new WeakMap<ManagedBox, { failures: number; retryAt: number }>();
  private started = false;
  private readonly boxHost: BoxHost;
  /** Brings the registry in line with the engines (src/sandbox/recovery.ts). */
  private readonly recovery: Recovery;
  /** Boxes sbx stopped on purpose; every other stopped restartable box is started again. */
  private readonly stopIntents: StopIntents;
  /** What claims gave warm spares: their records and env, which container labels cannot hold. */
  private readonly claims: ClaimStore;
  /** Max lifetimes renewed after create (box.renewLifetime), which labels cannot hold. */
  private readonly lifetimes: LifetimeStore;
  /** Boxes paused with their memory released: their checkpoints (box.pause({ memory: 'release' })). */
  private readonly checkpoints: CheckpointStore;
  /** The workspace storage of each pool whose runtime keeps workspaces in its cluster (Kubernetes). */
  private readonly workspaceVolumes = new Map<Pool, WorkspaceVolumes>();
  /**
   * Remote nodes: their trust, their connections (src/runtime/remote/hub.ts, docs/nodes.md).
   * Loaded by `hub()` when nodes are used (a remote pool, a listener, nodes joined before, a
   * node call): the wire's libraries (Connect, protobuf) are nothing a Manager without them pays.
   */
  private nodeHub: NodeHub | undefined;
  private nodeHubLoading: Promise<NodeHub> | undefined;
  /** What `sbx://` pools open their runtime with: the hub, once loaded (start() or addPool() loads it first). */
  private readonly nodeRuntimes: NodeRuntimes = {
    runtimeFor: (addr) => {
      if (!this.nodeHub) throw new SbxError('not_available', `'${addr}' is on remote nodes, which a Manager reaches once started (manager.start())`);
      return this.nodeHub.runtimeFor(addr);
    },
  };
  /** Archived boxes: their images and records (src/sandbox/archiver.ts). */
  private readonly archiver: Archiver;

  /** With no argument, the config comes from `SBX_CONFIG` and `SBX_*` (see loadConfig). */
  constructor(config: ManagerConfig = loadConfig()) {
    this.config = resolveConfig(config);
    this.now = config.clock ?? Date.now;
    this.log = config.logger ?? pino({ name: 'sbx', level: process.env['SBX_LOG_LEVEL'] ?? 'warn' }, pino.destination(2));
    for (const p of this.config.pools) this.poolsByName.set(p.name, this.newPool(p));
    this.claims = new ClaimStore(join(this.config.dataDir, 'claims', this.config.name));
    this.stopIntents = new StopIntents(join(this.config.dataDir, 'stopped', `${this.config.name}.json`));
    this.lifetimes = new LifetimeStore(join(this.config.dataDir, 'lifetimes', `${this.config.name}.json`));
    this.checkpoints = new CheckpointStore(join(this.config.dataDir, 'checkpoints', `${this.config.name}.json`));
    this.snapshots = new Snapshots({
      file: join(this.config.dataDir, 'snapshots', `${this.config.name}.json`),
      manager: this.config.name,
      maxPerOwner: this.config.maxSnapshotsPerOwner,
      runtimeFor: (pool) => this.pool(pool).runtime(),
      nodeOf: (pool, containerId) => this.imageNodeOf(pool, containerId),
      boxesUsing: (ref) => this.registry.all().flatMap((b) => (b.image === ref ? [b.id] : [])),
      now: this.now,
      log: this.log,
    });
    this.loop = new CleanupLoop(this.config.cleanupIntervalMs, () => this.cleanupOnce());
    this.deadlines = new DeadlineTimers(this.now, (box) => this.deadlineDue(box));
    this.secrets = new BoxSecrets({
      tokenSecret: this.config.tokenSecret,
      dataDir: this.config.dataDir,
      tokenTtlMs: this.config.tokenTtlMs,
      now: this.now,
      nonceOf: (id) => this.registry.get(id)?.record.tokenNonce,
    });
    this.boxHost = {
      runtimeFor: (pool) => this.pool(pool).runtime(),
      removeBox: (id, opts) => this.removeWith(id, opts?.graceful ?? false),
      workspaceFs: (workspaceId) => this.workspaces.fs(workspaceId),
      now: this.now,
      proxyBase: () => this.proxyBase(),
      signPortToken: (grant) => this.secrets.signPortToken(grant),
      stopIntent: (box, stopped) => this.stopIntents.set(box.id, stopped),
      // An archived box has no container to key it by: its archive's record keeps it.
      saveLifetime: (box, maxLifetimeMs) =>
        box.status === 'archived' ? this.archiver.saveLifetime(box, maxLifetimeMs) : this.lifetimes.set(box.containerId, maxLifetimeMs),
      archiveBox: (box) => this.archiver.archive(box),
      restoreBox: (box) => this.archiver.restore(box),
      archivable: (box) => this.archiver.archivable(box),
      checkpoints: this.checkpoints,
      pauseMemory: (box) => this.pool(box.pool).def.pauseMemory,
      snapshot: async (box, opts) => {
        // A removed box (or another box under its id since) is gone to a snapshot as to every lookup.
        if (this.known(box.id) !== box) throw new SbxError('not_found', `box '${box.id}' not found`, { details: { id: box.id } });
        return this.snapshots.take(box, opts);
      },
      deadlineMoved: (box) => this.armDeadline(box),
      setNetwork: (box, policy) => this.applyNetwork(box, policy),
      onExecFinished: (box) => {
        if (box.policy === 'oneshot' && box.activity.inFlight === 0) {
          this.remove(box.id).catch((err: unknown) => this.log.warn({ box: box.id, err }, 'oneshot removal failed; cleanup will retry'));
        }
      },
    };
    this.archiver = new Archiver({
      manager: this.config.name,
      log: this.log,
      now: this.now,
      store: new ArchiveStore(join(this.config.dataDir, 'archives', `${this.config.name}.json`)),
      registry: this.registry,
      stopIntents: this.stopIntents,
      claims: this.claims,
      lifetimes: this.lifetimes,
      boxHost: this.boxHost,
      pool: (name) => this.pool(name),
      hostEndpoints: () => this.hostEndpoints(),
      imageNodeOf: (pool, containerId) => this.imageNodeOf(pool, containerId),
      sbxEnvOf: (record) => this.sbxEnvOf(record),
      egressOf: (pool, policy) => this.egressOf(pool, policy),
    });
    this.recovery = new Recovery({
      manager: this.config.name,
      log: this.log,
      now: this.now,
      registry: this.registry,
      claims: this.claims,
      lifetimes: this.lifetimes,
      checkpoints: this.checkpoints,
      stopIntents: this.stopIntents,
      stats: this.cleanupStats,
      boxHost: this.boxHost,
      removing: (id) => this.removing.has(id),
      busy: (id) => this.registry.isReserved(id) || this.removing.has(id) || this.creating.has(id) || this.archiver.busy(id),
      hostEndpoints: () => this.hostEndpoints(),
      handEnv: (pool, box) => this.handEnv(pool, box),
      forgetLifetime: (box) => this.forgetLifetime(box),
      settleArchives: (pool) => this.archiver.settlePool(pool),
    });
    this.workspaces = new WorkspaceManager({
      dataDir: this.config.dataDir,
      nodes: () => this.workspaceNodes(),
      isMounted: (workspaceId) => this.registry.all().some((b) => b.workspaceId === workspaceId),
      maxPerOwner: this.config.maxWorkspacesPerOwner,
      userns: (node) => this.usernsOf(node),
    });
  }

  /**
   * The nodes workspaces can live on: one per pool. A pool whose runtime mounts this machine's
   * directories keeps them in the data directory; one whose runtime keeps workspaces in its
   * cluster (workspace volumes: Kubernetes) is online with that storage; any other is offline.
   */
  private workspaceNodes(): WorkspaceNode[] {
    return [...this.poolsByName.values()].map((p) => {
      if (p.runtime().capabilities.hostMounts) return { name: p.name, addr: p.def.addr, online: true };
      const storage = this.volumesOf(p);
      return { name: p.name, addr: p.def.addr, online: storage !== undefined, ...(storage ? { storage } : {}) };
    });
  }

  /**
   * The user namespace the boxes of a pool whose runtime mounts this machine's directories run
   * in: the engine's answer, asked once per pool (recovery asks first, when it reaches the engine).
   */
  private async usernsOf(node: string): Promise<UserNamespaceMap | undefined> {
    const pool = this.poolsByName.get(node);
    if (!pool?.runtime().capabilities.hostMounts) return undefined;
    pool.resources ??= await pool
      .runtime()
      .resources()
      .catch((err: unknown) => {
        if (!isSbxError(err)) throw err;
        // Who owns the workspace's files depends on the answer: no guess.
        throw new SbxError(err.code, `${err.message} (a workspace of pool '${node}' is owned by the ids its engine gives boxes, which only it can say)`, {
          cause: err,
          details: { ...err.details, pool: node },
        });
      });
    return pool.resources.userns;
  }

  /** The pool's workspace storage in its cluster (one per pool, made at first use); undefined when its runtime has none. */
  private volumesOf(pool: Pool): WorkspaceVolumes | undefined {
    let storage = this.workspaceVolumes.get(pool);
    if (!storage && hasWorkspaceVolumes(pool.runtime())) {
      storage = new WorkspaceVolumes({ runtime: () => pool.runtime(), manager: this.config.name, node: pool.name, log: this.log });
      this.workspaceVolumes.set(pool, storage);
    }
    return storage;
  }

  /** Deletes the workspace helper pods a crashed run of this Manager left (docs/workspaces.md). */
  private async sweepWorkspaceHelpers(): Promise<void> {
    await Promise.all(
      [...this.poolsByName.values()].map(async (p) => {
        try {
          const removed = (await this.volumesOf(p)?.sweep()) ?? 0;
          if (removed > 0) this.log.warn({ pool: p.name, removed }, 'removed workspace helper pods left by an earlier run');
        } catch (err) {
          this.log.warn({ pool: p.name, err }, 'could not sweep workspace helper pods; the next start tries again');
        }
      }),
    );
  }

  private async closeVolumes(pool: Pool): Promise<void> {
    const storage = this.workspaceVolumes.get(pool);
    this.workspaceVolumes.delete(pool);
    await storage?.close().catch((err: unknown) => this.log.warn({ pool: pool.name, err }, 'could not delete workspace helper pods'));
  }

  // --- Bootstrap -----------------------------------------------------------------------

  /**
   * Connects the pools, adopts every box this Manager's name labelled (all fields come back
   * from the labels), sweeps what a crash left half-made, follows the engines' events, then
   * starts the cleanup loop and arms every box's deadline. A pool that cannot be reached is
   * logged and adopted later.
   */
  /**
   * Tells the Manager of a server in front of it (sbx serve does on listen), until the returned
   * function withdraws it. While registered, box.proxy() and box.vnc() without an issuer point at
   * the latest registered server (unless `ManagerConfig.publicUrl` names one), and boxes created
   * get its `grpcAddr` as SBX_GRPC_ADDR. Several servers may front one Manager: each withdraws
   * only its own entry, and each hands out its own URLs (PortUrlIssuer).
   */
  registerServer(endpoints: ServerEndpoints): () => void {
    const entry = { ...endpoints };
    this.servers.push(entry);
    return () => {
      const i = this.servers.indexOf(entry);
      if (i !== -1) this.servers.splice(i, 1);
    };
  }

  /** Calls `observe` with every engine call's duration and outcome (sbx serve's /metrics) until the returned function. */
  observeEngineCalls(observe: EngineCallObserver): () => void {
    const own = (call: EngineCall): void => observe(call);
    this.engineCallObservers.add(own);
    return () => this.engineCallObservers.delete(own);
  }

  /** Where box.proxy() points without an issuer: the config's public URL, else the server registered last. */
  private proxyBase(): ProxyBase {
    if (this.config.publicUrl) return { publicUrl: this.config.publicUrl, proxyDomain: this.config.proxyDomain };
    const latest = this.servers.at(-1);
    return { publicUrl: latest?.publicUrl, proxyDomain: latest?.proxyDomain ?? this.config.proxyDomain };
  }

  /** The gRPC heartbeat address new boxes get: the latest registered server's that has one. */
  private grpcAddr(): string | undefined {
    return this.servers.findLast((s) => s.grpcAddr !== undefined)?.grpcAddr;
  }

  async start(): Promise<void> {
    this.started = true;
    await this.stopIntents.load().catch((err: unknown) => this.log.error({ err }, 'could not read the boxes stopped on purpose; none is started again'));
    await this.lifetimes
      .load()
      .catch((err: unknown) => this.log.error({ err }, 'could not read renewed lifetimes; boxes keep the lifetime they were created with'));
    await this.checkpoints
      .load()
      .catch((err: unknown) => this.log.error({ err }, 'could not read the checkpoints of boxes paused with their memory released; they read stopped'));
    // Before the pools are reconciled: an archive cut short settles to the box reconcile then finds.
    await this.archiver.recover().catch((err: unknown) => this.log.error({ err }, 'could not read the archived boxes; they come back at the next start'));
    const unreadable = await this.claims.load().catch((err: unknown) => {
      this.log.error({ err }, 'could not read the warm claims; claimed spares are not recovered');
      return [];
    });
    if (unreadable.length > 0) this.log.error({ files: unreadable }, 'unreadable warm claims skipped');
    // Only a Manager with nodes (a listener, a remote pool, nodes joined before) makes its node
    // identity: a fresh one costs an RSA key.
    if (this.config.nodes.listen || [...this.poolsByName.values()].some((p) => isNodeAddress(p.def.addr)) || new TrustStore(this.config.dataDir).exists())
      await (await this.hub()).start().catch((err: unknown) => this.log.error({ err }, 'could not start the node hub; remote pools stay offline'));
    await Promise.all(
      [...this.poolsByName.values()].map((p) => this.recovery.reconcile(p, { revive: true }).catch((err: unknown) => this.recovery.failed(p, err))),
    );
    await this.sweepWorkspaces();
    await this.sweepWorkspaceHelpers();
    for (const p of this.poolsByName.values()) this.recovery.watch(p);
    this.loop.start();
    for (const box of this.registry.all()) this.armDeadline(box);
  }

  /** Stops the cleanup loop and the deadline timers, and closes connections. Boxes keep running. */
  async close(): Promise<void> {
    this.started = false;
    this.deadlines.clear();
    this.due.clear();
    await this.loop.stop();
    await Promise.allSettled([...this.dueRuns]);
    // A oneshot removal started in the background must finish before its connection closes.
    await Promise.allSettled([...this.removing.values()]);
    await Promise.all([...this.workspaceVolumes.keys()].map((p) => this.closeVolumes(p)));
    await Promise.all([...this.poolsByName.values()].map((p) => p.close()));
    await (await this.nodeHubLoading?.catch(() => undefined))?.close();
  }

  private async sweepWorkspaces(): Promise<void> {
    try {
      const result = await this.workspaces.sweepLeftovers();
      this.log.info({ result }, 'swept workspace leftovers');
    } catch (err) {
      this.log.error({ err }, 'sweeping workspace leftovers failed');
    }
  }

  /**
   * The endpoints of this machine boxes are told to reach (SBX_API_URL, SBX_GRPC_ADDR), address
   * and port, when they are on this machine: the only services of the host open to boxes.
   */
  private hostEndpoints(): Promise<HostEndpoint[]> {
    return hostEndpoints(this.config.apiUrl, this.grpcAddr());
  }

  /** Whether the pool's runtime enforces egress rules (RuntimeCapabilities.egress). */
  private enforcesEgress(pool: Pool): boolean {
    const rt = pool.runtime();
    return rt.capabilities.egress === true && typeof rt.setEgress === 'function';
  }

  /**
   * A policy as the pool's runtime takes it (ContainerSpec.egress, setEgress), with sbx's
   * endpoints every box is told of (SBX_API_URL, SBX_GRPC_ADDR, at every address they resolve
   * to, on this machine or not); undefined where the runtime enforces no egress.
   */
  private async egressOf(pool: Pool, policy: NetworkPolicy): Promise<EgressSpec | undefined> {
    if (!this.enforcesEgress(pool)) return undefined;
    return compileEgress(policy, await egressEndpoints(this.config.apiUrl, this.grpcAddr()));
  }

  /** box.setNetwork's work, inside the box's step: checked, given to the runtime (an archived box keeps it for its restore), recorded. */
  private async applyNetwork(box: ManagedBox, policy: NetworkPolicy): Promise<void> {
    // Removed meanwhile (or another box under its id since): gone, as to every lookup.
    if (this.known(box.id) !== box) throw new SbxError('not_found', `box '${box.id}' not found`, { details: { id: box.id } });
    const pool = this.pool(box.pool);
    checkEgress(policy, { network: box.record.network, egressEnforced: this.enforcesEgress(pool), pool: pool.name, id: box.id });
    if (box.status === 'archived') await this.archiver.saveNetworkPolicy(box, policy);
    else {
      const egress = await this.egressOf(pool, policy);
      if (egress) {
        try {
          await boxRuntime(pool.runtime(), box.containerId, box.id).setEgress!(box.containerId, egress);
        } catch (err) {
          // The runtime may have applied it all the same (a timeout after the commit): the box's
          // info asks the runtime next time rather than show either policy as in force.
          delete box.record.networkPolicy;
          throw err;
        }
      }
    }
    box.record.networkPolicy = policy;
    this.log.info({ box: box.id, pool: pool.name, egress: typeof policy.egress === 'string' ? policy.egress : 'rules' }, 'box network policy set');
  }

  // --- Pools ---------------------------------------------------------------------------

  private pool(name: string): Pool {
    const p = this.poolsByName.get(name);
    if (!p)
      throw new SbxError('pool_not_found', `pool '${name}' not found; known pools: ${[...this.poolsByName.keys()].join(', ') || 'none'}`, {
        details: { pool: name },
      });
    return p;
  }

  private defaultPool(): Pool {
    const first = this.poolsByName.values().next();
    if (first.done) throw new SbxError('not_available', 'no pools configured; add one with addPool()');
    return first.value;
  }

  /**
   * Adds a pool (validated; names are unique). Takes what `pools()` returns; its status fields are
   * ignored. All or nothing: a refused pool (a bad setting, an address no runtime takes) leaves
   * nothing behind, in pools(), the workspaces' nodes or the engine watches. An engine that is
   * merely unreachable is no refusal: the pool is added, disconnected, and adopted when it answers.
   */
  async addPool(def: PoolConfig | PoolInfo): Promise<PoolInfo> {
    const { connected: _c, boxes: _b, ...settings } = def as PoolInfo;
    const resolved = resolvePool(settings);
    if (this.poolsByName.has(resolved.name)) throw new SbxError('conflict', `pool '${resolved.name}' already exists`, { details: { pool: resolved.name } });
    if (isNodeAddress(resolved.addr)) await (await this.hub()).start();
    const pool = this.newPool(resolved);
    // Opening dials nothing, but it parses the address: a bad one is refused before the pool is
    // known. Nothing below throws (a reconcile that fails is logged; the next cleanup pass tries again).
    pool.runtime();
    this.poolsByName.set(resolved.name, pool);
    if (this.started) {
      await this.recovery.reconcile(pool, { revive: true }).catch((err: unknown) => this.recovery.failed(pool, err));
      this.recovery.watch(pool);
    }
    return pool.info(this.registry.ofPool(pool.name).length);
  }

  /** Removes a pool: pool_in_use while it has boxes, unless `force`, which removes them first. */
  async removePool(name: string, opts: { force?: boolean } = {}): Promise<void> {
    const pool = this.pool(name);
    const boxes = this.registry.ofPool(name);
    this.checkNoCreates(name);
    if (boxes.length > 0 && !opts.force) {
      throw withOptionHint('pool_in_use', `pool '${name}' has ${boxes.length} box(es); remove them first, or remove them with the pool:`, 'force', {
        pool: name,
        boxes: boxes.length,
      });
    }
    const results = await mapSettled(boxes, CLEANUP_PARALLELISM, (b) => this.remove(b.id));
    const failed = results.filter((r) => r.status === 'rejected');
    if (failed.length > 0) {
      throw new SbxError('internal', `pool '${name}': ${failed.length} box(es) could not be removed; the pool is kept`, {
        cause: (failed[0] as PromiseRejectedResult).reason,
      });
    }
    // Creates that began while the boxes were being removed would land on a pool that is gone.
    this.checkNoCreates(name);
    this.poolsByName.delete(name);
    await pool.warm?.removeAll();
    await this.closeVolumes(pool);
    await pool.close();
  }

  /** pool_in_use while boxes are being created on the pool: force cannot remove what does not exist yet. */
  private checkNoCreates(name: string): void {
    if (this.registry.hasReservationsIn(name)) {
      throw new SbxError('pool_in_use', `pool '${name}' has boxes being created; try again once they are made`, { details: { pool: name, creating: true } });
    }
  }

  private newPool(def: ResolvedPool): Pool {
    const pool = new Pool(def, this.observeEngineCall, this.nodeRuntimes);
    if (def.warm.length > 0) {
      // Spares get the pool's policy (a box without a network: 'none' unless it is 'all'); a claim
      // asking for another one sets its own before the spare is handed out.
      const spareEgress = async (template: WarmTemplate) =>
        this.enforcesEgress(pool) ? this.egressOf(pool, boxNetworkPolicy(templateOptions(template), def, true)) : undefined;
      pool.warm = new WarmPool(pool, this.config.name, this.log, spareEgress);
    }
    return pool;
  }

  // --- Remote nodes (docs/nodes.md) --------------------------------------------------------

  /** Every node that joined this Manager: its state, draining, the facts it gave of its machine. A read. */
  nodes(): NodeInfo[] {
    return this.nodeHub?.nodes() ?? [];
  }

  /** The node hub, loaded (with the wire's libraries) at its first use. */
  private hub(): Promise<NodeHub> {
    this.nodeHubLoading ??= import('../runtime/remote/hub.js').then(({ NodeHub }) => {
      this.nodeHub = new NodeHub({
        dataDir: this.config.dataDir,
        log: this.log,
        ...this.config.nodes,
        onNodeOnline: (name) => this.nodeOnline(name),
        onHeartbeat: (node, hb) => this.relayedHeartbeat(node, hb),
      });
      return this.nodeHub;
    });
    return this.nodeHubLoading;
  }

  /** A one-time join token for `sbx node join` (shown once; valid `ttlMs`, default 1 h). */
  async createNodeJoinToken(opts: { ttlMs?: number } = {}): Promise<{ token: string; expiresAt: string }> {
    return (await this.hub()).createJoinToken(opts.ttlMs);
  }

  /** Admits a node that holds a join token (`POST /v1/nodes/join`); its credential and the Manager's certificate. */
  async joinNode(req: JoinRequest): Promise<{ name: string; credential: string; managerCert: string; managerFingerprint: string; listenPort?: number }> {
    return (await this.hub()).join(req);
  }

  /** Stops (or resumes) placing new boxes on a node; its boxes keep running. */
  async drainNode(name: string, draining = true): Promise<NodeInfo> {
    return (await this.hub()).setDraining(name, draining);
  }

  /** Refuses a node from now on (its connection ends at once); its boxes are left as they are. */
  async revokeNode(name: string): Promise<NodeInfo> {
    return (await this.hub()).revoke(name);
  }

  /** A node came (back) online: recover the boxes of the pools that span nodes. */
  private nodeOnline(name: string): void {
    if (!this.started) return;
    for (const p of this.poolsByName.values()) {
      if (!isNodeAddress(p.def.addr)) continue;
      this.recovery.reconcile(p, { revive: true }).catch((err: unknown) => this.recovery.failed(p, err));
    }
    this.log.info({ node: name }, 'recovering the boxes of a node that came online');
  }

  /**
   * A heartbeat a node relayed: it counts only when the box token is the box's own and the box
   * lives on that node (a node cannot speak for boxes elsewhere).
   */
  private relayedHeartbeat(node: string, hb: BoxHeartbeat): void {
    void (async () => {
      const id = await this.secrets.verifyBoxToken(hb.token);
      const box = this.registry.get(id);
      if (id !== hb.boxId || !box || !box.containerId.startsWith(`${node}:`)) throw new SbxError('forbidden', 'a relayed heartbeat for a box of another node');
      await this.heartbeat(id, { active: hb.active, ...(hb.processCount !== undefined ? { processCount: hb.processCount } : {}) });
    })().catch((err: unknown) => this.log.warn({ node, box: hb.boxId, err: (err as Error).message }, 'refused a relayed heartbeat'));
  }

  /** The warm pools' templates, spares ready, hits and misses (docs/warm-pools.md). A read. */
  async warm(): Promise<WarmInfo[]> {
    return [...this.poolsByName.values()].flatMap((p) => p.warm?.info() ?? []);
  }

  async pools(): Promise<PoolInfo[]> {
    return [...this.poolsByName.values()].map((p) => p.info(this.registry.count(p.name)));
  }

  // --- Boxes ---------------------------------------------------------------------------

  /**
   * Creates and starts a box. Limits are checked and the slot reserved in one synchronous
   * step, so concurrent creates can never exceed maxTotal or maxPerUser.
   */
  async create(options: CreateOptions): Promise<LocalBox> {
    return this.createBox(validateCreateOptions(options));
  }

  private async createBox(opts: CreateOptions): Promise<ManagedBox> {
    const id = opts.id ?? `sb-${randomBytes(GENERATED_ID_BYTES).toString('hex')}`;
    if (this.creating.has(id)) throw new SbxError('conflict', `box '${id}' already exists`, { details: { id } });
    const creation = this.placeAndCreate(id, opts).finally(() => this.creating.delete(id));
    this.creating.set(id, creation);
    return creation;
  }

  private async placeAndCreate(id: string, opts: CreateOptions): Promise<ManagedBox> {
    // The id of a box being removed is free once its removal ends (it already reads as gone).
    await this.removing.get(id)?.catch(() => undefined);
    const owner = opts.owner ?? DEFAULT_OWNER;
    // A snapshot (by id or image reference) only for its owner; its box goes where its image is.
    const snapshot = await this.snapshots.resolve(opts.image, owner);
    if (snapshot && opts.pool !== undefined && opts.pool !== snapshot.pool) {
      throw new SbxError('invalid_argument', `pool: snapshot '${opts.image}' lives on pool '${snapshot.pool}'; a box from it is created there`, {
        details: { field: 'pool', pool: snapshot.pool },
      });
    }
    const placed = snapshot ? { ...opts, image: snapshot.image, pool: snapshot.pool } : opts;
    const pool = await this.placement(placed, owner);
    const release = this.registry.reserve(id, pool.def, owner);
    try {
      return await this.createReserved(id, owner, pool, placed, snapshot?.node);
    } finally {
      release();
    }
  }

  /**
   * The pool a box goes on: the one asked for, or the default; storage decides for a workspace.
   * A box mounts only a workspace of its own owner (docs/architecture.md, Security): every entry
   * point (library, HTTP, SDK, jsapi, e2b, getOrCreate, warm claims) creates through here. Another
   * owner's workspace answers exactly as a missing one, so its existence does not leak; an admin
   * mounts one by creating the box as its owner.
   */
  private async placement(opts: CreateOptions, owner: string): Promise<Pool> {
    if (!opts.workspaceId) return opts.pool ? this.pool(opts.pool) : this.defaultPool();
    const missing = () => new SbxError('not_found', `workspace ${opts.workspaceId} not found for owner '${owner}'`, { details: { id: opts.workspaceId } });
    const workspace = await this.workspaces.get(opts.workspaceId).catch((err: unknown) => {
      throw isSbxError(err, 'not_found') ? missing() : err;
    });
    if (workspace.owner !== owner) throw missing();
    const node = workspace.node;
    if (opts.pool && opts.pool !== node) {
      throw new SbxError(
        'conflict',
        `workspace '${opts.workspaceId}' lives on node '${node}'; a box mounting it must run on pool '${node}', not '${opts.pool}'`,
        {
          details: { workspaceId: opts.workspaceId, node, pool: opts.pool },
        },
      );
    }
    return this.pool(node);
  }

  /** `imageNode`: the node of the pool whose engine alone has the image (a snapshot's), where the box must go. */
  private async createReserved(id: string, owner: string, pool: Pool, opts: CreateOptions, imageNode?: string): Promise<ManagedBox> {
    const record = newBoxRecord({ manager: this.config.name, id, owner, pool: pool.def, opts, now: this.now(), tokenNonce: BoxTokenService.newNonce() });
    const sbxEnv = await this.sbxEnvOf(record);
    // Before a spare is claimed: a refused network is refused whichever way the box would come.
    checkNetwork(opts, pool.def);
    // Before any engine call: a policy the box's network or its runtime cannot have is refused.
    record.networkPolicy = boxNetworkPolicy(opts, pool.def, this.enforcesEgress(pool));
    const egress = await this.egressOf(pool, record.networkPolicy);
    // The box (a claimed spare too) must reach sbx's endpoints it is told of, and only those of the host.
    await pool.allowHostEndpoints(await this.hostEndpoints());
    const key = pool.warm?.match(opts);
    if (key !== undefined) {
      const claimed = await this.claimSpare(pool, key, record, { ...(opts.env ?? {}), ...sbxEnv }, egress);
      if (claimed) return claimed;
    }
    const mount = record.workspaceId
      ? { hostPath: await this.workspaces.mountPath(record.workspaceId), containerPath: record.mountPath, readOnly: record.mountMode === 'ro' }
      : undefined;
    const built = buildContainerSpec({
      record,
      opts,
      pool: pool.def,
      sbxEnv,
      mount,
      machine: pool.resources,
      keepSpec: pool.runtime().capabilities.commit !== false,
      egress,
    });
    const spec = imageNode === undefined ? built : { ...built, labels: { ...built.labels, [IMAGE_NODE_LABEL]: imageNode } };
    const runtime = pool.runtime();
    let containerId: string;
    try {
      containerId = await runtime.create(spec);
      pool.connected = true;
    } catch (err) {
      if (isSbxError(err, 'runtime_unavailable')) pool.connected = false;
      if (isSbxError(err, 'conflict')) throw new SbxError('conflict', `box '${id}' already exists on pool '${pool.name}'`, { cause: err, details: { id } });
      throw err;
    }
    try {
      await boxRuntime(runtime, containerId, id).start(containerId);
    } catch (err) {
      // A box that cannot start must not linger half-made.
      await runtime
        .remove(containerId, { force: true })
        .catch((e: unknown) => this.log.error({ box: id, err: e }, 'could not remove a box that failed to start'));
      throw err;
    }
    const box = new ManagedBox(record, containerId, this.boxHost);
    this.registry.add(box);
    this.log.info({ box: id, pool: pool.name, owner, policy: record.policy }, 'box created');
    return box;
  }

  /**
   * Gives a ready spare the new box's identity: the claim on disk first (a restart must find it),
   * then the box is registered as a cold one would be. Undefined when no spare is left.
   */
  private async claimSpare(
    pool: Pool,
    key: string,
    record: BoxRecord,
    env: Record<string, string>,
    egress: EgressSpec | undefined,
  ): Promise<ManagedBox | undefined> {
    const save = (containerId: string) =>
      this.claims.save({ containerId, labels: recordToLabels(record), env }).catch((err: unknown) => {
        throw new SbxError('internal', `could not record the claim of a warm box in ${this.config.dataDir}: ${(err as Error).message}`, { cause: err });
      });
    // The identity goes to the spare's agent before the claim is saved (an answer also proves the
    // spare runs, so no inspect); a spare that fails afterwards is removed with what it was told.
    // Said in the log only for the spare that became the box: a dead one is just replaced.
    let told: unknown;
    const greet = async (containerId: string) => {
      told = await pool
        .runtime()
        .setBoxEnv(containerId, env)
        .catch((err: unknown) => err);
      return told === true;
    };
    const containerId = await pool.warm!.claim(key, save, egress, greet);
    if (containerId === undefined) return undefined;
    if (told === false) this.log.info({ box: record.id }, 'claimed box has no agent to tell its identity; no heartbeats');
    else if (told !== true) this.log.warn({ box: record.id, err: told }, IDENTITY_NOT_TOLD);
    const box = new ManagedBox(record, containerId, this.boxHost, 'running', env);
    this.registry.add(box);
    this.log.info({ box: record.id, pool: pool.name, owner: record.owner, policy: record.policy, warm: key }, 'box created from a warm spare');
    return box;
  }

  /**
   * Tells a claimed spare's agent the identity of the box it became (SBX_SANDBOX_ID, SBX_TOKEN,
   * SBX_API_URL, the caller's env), so its heartbeat speaks for the box. Execs get the same
   * variables from the Manager either way; a box without an agent just sends no heartbeats.
   */
  private async handEnv(pool: Pool, box: ManagedBox): Promise<void> {
    if (Object.keys(box.execEnv).length === 0) return;
    try {
      if (!(await pool.runtime().setBoxEnv(box.containerId, box.execEnv)))
        this.log.info({ box: box.id }, 'claimed box has no agent to tell its identity; no heartbeats');
    } catch (err) {
      this.log.warn({ box: box.id, err }, IDENTITY_NOT_TOLD);
    }
  }

  /** The box with this id; not_found otherwise, also once its removal has begun. A read: it does not count as use. */
  async get(id: string): Promise<LocalBox> {
    return this.known(id);
  }

  private known(id: string): ManagedBox {
    const box = this.registry.get(id);
    // A box being removed is gone to every lookup: the engine may already have dropped it.
    if (!box || this.removing.has(id)) throw new SbxError('not_found', `box '${id}' not found`, { details: { id } });
    return box;
  }

  /**
   * The box with `opts.id`, created if absent. Concurrent calls for one id, and a plain
   * `create()` of the same id in flight, share one creation: N callers, one box. Returning an
   * existing box counts as use (the caller is about to work in it).
   */
  async getOrCreate(options: CreateOptions): Promise<LocalBox> {
    const opts = validateCreateOptions(options);
    if (!opts.id) throw new SbxError('invalid_argument', 'id: getOrCreate needs an id', { details: { field: 'id' } });
    const id = opts.id;
    const existing = this.removing.has(id) ? undefined : this.registry.get(id);
    const box = existing ?? (await (this.creating.get(id) ?? this.createBox(opts)));
    const owner = opts.owner ?? DEFAULT_OWNER;
    if (box.owner !== owner) throw new SbxError('conflict', `box '${box.id}' exists and belongs to another owner`, { details: { id: box.id } });
    box.touch();
    return box;
  }

  /** Boxes matching every given filter. A read: it does not count as use. */
  async list(opts: ListOptions = {}): Promise<LocalBox[]> {
    return this.registry
      .all()
      .filter(
        (b) =>
          !this.removing.has(b.id) &&
          (opts.owner === undefined || b.owner === opts.owner) &&
          (opts.pool === undefined || b.pool === opts.pool) &&
          Object.entries(opts.labels ?? {}).every(([k, v]) => b.record.labels[k] === v),
      );
  }

  /**
   * Force-removes a box. If the runtime fails, the box stays registered and the error
   * surfaces; a box whose container is already gone is forgotten cleanly.
   */
  async remove(id: string): Promise<void> {
    return this.removeWith(id, false);
  }

  /** `graceful`: SIGTERM and the box's stop timeout first, as a stop (a stop that cannot be undone, on Kubernetes). */
  private async removeWith(id: string, graceful: boolean): Promise<void> {
    const inProgress = this.removing.get(id);
    if (inProgress) return inProgress;
    const box = this.known(id);
    this.deadlines.arm(box, undefined);
    const removal = this.removeBox(box, graceful).then(
      () => void this.removing.delete(id),
      (err: unknown) => {
        this.removing.delete(id);
        // Still registered, so still due when it was: its timer again (a cleanup action's own
        // failure arms it with a back-off when the action settles).
        this.armDeadline(box);
        throw err;
      },
    );
    this.removing.set(id, removal);
    return removal;
  }

  private async removeBox(box: ManagedBox, graceful: boolean): Promise<void> {
    // The box's last step: a pause, archive or restore in flight ends first and the removal takes
    // what it left; one asked for after finds the box gone.
    await box.retire(async () => {
      // An archived box is its archive: that is what goes.
      if (box.status === 'archived') await this.archiver.discard(box);
      else await this.removeContainer(box, graceful);
    });
    this.registry.delete(box);
    await this.claims.delete(box.containerId).catch((err: unknown) => this.log.warn({ box: box.id, err }, 'could not forget a claim'));
    await this.stopIntents.set(box.id, false).catch((err: unknown) => this.log.warn({ box: box.id, err }, 'could not forget a stopped box'));
    await this.forgetLifetime(box);
    // Its checkpoint's files went with the container.
    await this.checkpoints.set(box.containerId, undefined).catch((err: unknown) => this.log.warn({ box: box.id, err }, 'could not forget a checkpoint'));
    this.log.info({ box: box.id, pool: box.pool }, 'box removed');
  }

  /** The variables sbx gives a box (a restored one too): its id, its token, sbx's endpoints. */
  private async sbxEnvOf(record: BoxRecord): Promise<Record<string, string>> {
    return {
      ...(this.grpcAddr() !== undefined ? { SBX_GRPC_ADDR: this.grpcAddr()! } : {}),
      SBX_SANDBOX_ID: record.id,
      SBX_TOKEN: await this.secrets.issueBoxToken(record.id, record.tokenNonce),
      ...(this.config.apiUrl ? { SBX_API_URL: this.config.apiUrl } : {}),
      ...(this.config.heartbeatIntervalMs !== undefined ? { SBX_HEARTBEAT_INTERVAL_MS: String(this.config.heartbeatIntervalMs) } : {}),
    };
  }

  /** On a pool of nodes, the node a container id names: a commit's image is made there. */
  private imageNodeOf(pool: string, containerId: string): string | undefined {
    return isNodeAddress(this.pool(pool).def.addr) ? containerId.slice(0, Math.max(0, containerId.indexOf(':'))) || undefined : undefined;
  }

  private async removeContainer(box: ManagedBox, graceful: boolean): Promise<void> {
    try {
      const runtime = boxRuntime(this.pool(box.pool).runtime(), box.containerId, box.id);
      if (graceful) await runtime.stop(box.containerId, { timeoutMs: box.record.stopTimeoutMs });
      await runtime.remove(box.containerId, { force: true });
    } catch (err) {
      if (!isSbxError(err, 'not_found')) throw err;
    }
  }

  private async forgetLifetime(box: ManagedBox): Promise<void> {
    await this.lifetimes.set(box.containerId, undefined).catch((err: unknown) => this.log.warn({ box: box.id, err }, 'could not forget a renewed lifetime'));
  }

  /** Records a heartbeat from inside the box: activity when `active`, and its process count. */
  async heartbeat(id: string, input: HeartbeatInput): Promise<void> {
    const box = this.known(id);
    if (typeof input?.active !== 'boolean') throw new SbxError('invalid_argument', 'active: must be true or false', { details: { field: 'active' } });
    if (input.processCount !== undefined && !(Number.isInteger(input.processCount) && input.processCount >= 0)) {
      throw new SbxError('invalid_argument', 'processCount: must be a non-negative integer', { details: { field: 'processCount' } });
    }
    if (input.active) box.activity.lastHeartbeat = this.now();
    if (input.processCount !== undefined) box.activity.processCount = input.processCount;
  }

  /**
   * box.setNetwork for the box `id`; with `owner`, only a box of that owner (another owner's box
   * answers not_found, as a missing one does).
   *
   * @example
   * await manager.setNetwork('sb-1', { egress: 'none' }, { owner: 'alice' });
   */
  async setNetwork(id: string, policy: NetworkPolicy, opts: { owner?: string } = {}): Promise<void> {
    const box = this.known(id);
    if (opts.owner !== undefined && box.owner !== opts.owner) throw new SbxError('not_found', `box '${id}' not found`, { details: { id } });
    await box.setNetwork(policy);
  }

  /** The box's info, asked of the engine now. A read: it does not count as use. */
  async info(id: string): Promise<BoxInfo> {
    return this.known(id).info();
  }

  // --- Images --------------------------------------------------------------------------

  async imageExists(pool: string, ref: string): Promise<boolean> {
    parseImageRef(ref, 'ref');
    return this.pool(pool).runtime().images.exists(ref);
  }

  pullImage(pool: string, ref: string, opts: { auth?: RegistryAuth; signal?: AbortSignal } = {}): AsyncIterable<PullProgress> {
    parseImageRef(ref, 'ref');
    return this.pool(pool).runtime().images.pull(ref, opts);
  }

  /** The images on a pool's engine. */
  async listImages(pool: string): Promise<ImageInfo[]> {
    return this.pool(pool).runtime().images.list();
  }

  /** Removes an image from a pool's engine; `force` as the engine takes it (docker: untag one a container uses). */
  async removeImage(pool: string, ref: string, opts: { force?: boolean } = {}): Promise<void> {
    parseImageRef(ref, 'ref');
    await this.pool(pool).runtime().images.remove(ref, opts);
  }

  /** Pulls `ref` unless the pool already has it. */
  async ensureImage(pool: string, ref: string, opts: { auth?: RegistryAuth } = {}): Promise<{ pulled: boolean }> {
    if (await this.imageExists(pool, ref)) return { pulled: false };
    for await (const _ of this.pullImage(pool, ref, opts)) {
      /* progress is for callers of pullImage */
    }
    return { pulled: true };
  }

  // --- Cleanup -------------------------------------------------------------------------

  /** One cleanup pass over every pool (the loop calls it; tests and operators may too). */
  cleanup(): Promise<void> {
    return this.loop.runOnce();
  }

  private async cleanupOnce(): Promise<void> {
    this.cleanupStats.ticks++;
    await Promise.all([...this.poolsByName.values()].map((p) => this.cleanupPool(p).catch(() => this.cleanupStats.errors++)));
  }

  private async cleanupPool(pool: Pool): Promise<void> {
    const boxes = await this.recovery.reconcile(pool);
    // Arms every box again as its action settles, or at once if it has none: the safety net for a
    // deadline a timer missed (a change nothing reported).
    await this.applyCleanup(pool.name, boxes);
  }

  /**
   * Whether deadlines are acted on when they come: once started, unless `cleanupIntervalMs` is 0
   * (no automatic cleanup at all: tests and benchmarks call cleanup() themselves).
   */
  private get deadlinesOn(): boolean {
    return this.started && this.config.cleanupIntervalMs > 0;
  }

  /**
   * Arms the box's timer for the time the policy table next acts on it (policy.ts nextDue), or
   * clears it (a box removed or gone). Called wherever that time can come sooner: the box
   * registered (create, claim, adoption, restore), its status changed, its work in flight ended,
   * its lifetime renewed; and after every pass. A use only makes it later, so the timer that fires
   * early finds the box not due and arms again.
   */
  private armDeadline(box: ManagedBox): void {
    if (!this.deadlinesOn || this.registry.get(box.id) !== box || this.removing.has(box.id)) {
      this.deadlines.arm(box, undefined);
      return;
    }
    // The action working on it arms it when it is done.
    if (this.acting.has(box)) return;
    let at: number | undefined;
    try {
      at = nextDue(cleanupInput(box, this.now()));
    } catch (err) {
      // Its pool is going away (its runtime is no longer there to ask): the pass sees to it.
      this.log.warn({ box: box.id, err }, 'could not compute the next deadline of a box; the next cleanup pass sees to it');
    }
    // An action that failed is not tried again before its back-off, whatever re-arms the box.
    const retry = this.failedActions.get(box)?.retryAt;
    if (at !== undefined && retry !== undefined && at < retry) at = retry;
    this.deadlines.arm(box, at);
  }

  /**
   * A box's cleanup action settled: its timer armed again at once, not after the rest of its batch
   * or pass. One that failed is tried again after a back-off (retryAt); one that succeeded is
   * armed for its next deadline, unless it is due again at once (an action that could change
   * nothing: the next pass tries it, so nothing spins).
   */
  private armAfterAction(box: ManagedBox, failed: boolean): void {
    const now = this.now();
    if (failed) {
      const failures = (this.failedActions.get(box)?.failures ?? 0) + 1;
      this.failedActions.set(box, { failures, retryAt: retryAt(now, failures, this.config.cleanupIntervalMs) });
      this.armDeadline(box);
      return;
    }
    this.failedActions.delete(box);
    if (!this.deadlinesOn || this.registry.get(box.id) !== box || this.removing.has(box.id)) return this.armDeadline(box);
    let next: number | undefined;
    try {
      next = nextDue(cleanupInput(box, now));
    } catch {
      return this.armDeadline(box);
    }
    this.deadlines.arm(box, next !== undefined && next <= now ? undefined : next);
  }

  private actionLimiter(poolName: string): ActionLimiter {
    let limiter = this.actionLimiters.get(poolName);
    if (!limiter) this.actionLimiters.set(poolName, (limiter = new ActionLimiter(CLEANUP_PARALLELISM)));
    return limiter;
  }

  /** A box's timer fired: it is acted on with the others due now, at the next turn of the event loop. */
  private deadlineDue(box: ManagedBox): void {
    if (this.due.size === 0) {
      setImmediate(() => {
        const batch = [...this.due];
        this.due.clear();
        if (!this.deadlinesOn) return;
        const byPool = new Map<string, ManagedBox[]>();
        for (const b of batch) byPool.set(b.pool, [...(byPool.get(b.pool) ?? []), b]);
        const run = Promise.all(
          [...byPool].map(([pool, boxes]) =>
            this.applyCleanup(pool, boxes).catch((err: unknown) => {
              this.cleanupStats.errors++;
              this.log.error({ pool, err }, 'acting on a deadline failed; the next cleanup pass tries again');
            }),
          ),
        ).then(() => undefined);
        this.dueRuns.add(run);
        void run.finally(() => this.dueRuns.delete(run));
      });
    }
    this.due.add(box);
  }

  /**
   * What the policy table says to do with `boxes` now, done: the one path of the cleanup pass
   * and of the deadline timers (the same stats, log lines and lifecycle steps). Boxes removed,
   * being removed or acted on already are skipped; a box not due (used since its timer was armed)
   * is armed again for its new deadline, and each box acted on as soon as its action settles
   * (armAfterAction). The actions wait for a slot of their pool's limiter, shared by every pass
   * and batch, and are decided again when they get it: a box used while it waited is kept.
   */
  private async applyCleanup(poolName: string, boxes: ManagedBox[]): Promise<void> {
    const candidates = boxes.filter((b) => this.registry.get(b.id) === b && !this.removing.has(b.id) && !this.acting.has(b));
    const planned = planCleanup(candidates, this.now());
    for (const { box } of planned) this.acting.add(box);
    for (const box of candidates) if (!this.acting.has(box)) this.armDeadline(box);
    const limiter = this.actionLimiter(poolName);
    const results = await Promise.allSettled(
      planned.map(({ box }) =>
        limiter.run(async () => {
          let failed = true;
          try {
            // Removed meanwhile (by its owner, by another path): nothing left to do.
            if (this.registry.get(box.id) === box && !this.removing.has(box.id)) {
              const now = this.now();
              const decision = decideCleanup(cleanupInput(box, now));
              if (decision.action !== 'keep') await this.act(poolName, { box, ...decision }, now);
            }
            failed = false;
          } finally {
            this.acting.delete(box);
            this.armAfterAction(box, failed);
          }
        }),
      ),
    );
    for (const r of results) {
      if (r.status === 'rejected') {
        this.cleanupStats.errors++;
        this.log.error({ pool: poolName, err: r.reason }, 'cleanup action failed');
      }
    }
  }

  private async act(poolName: string, { box, action, reason }: PlannedCleanup, now: number): Promise<void> {
    if (action === 'pause' && reason === 'lifetime') {
      await box.pauseAtLifetimeEnd();
      this.cleanupStats.pausedLifetime++;
    } else if (action === 'archive') {
      if (!(await box.archiveIfIdle(now))) return;
      this.cleanupStats.archivedIdle++;
    } else if (action === 'pause') {
      // A use that came since the plan keeps it awake (checked again inside the box's step).
      if (!(await box.pauseIfIdle(now))) return;
      this.cleanupStats.pausedIdle++;
    } else if (action === 'stop') {
      await box.stop();
      this.cleanupStats.stoppedIdle++;
    } else {
      await this.remove(box.id);
      if (reason === 'idle') this.cleanupStats.removedIdle++;
      else if (reason === 'lifetime') this.cleanupStats.removedLifetime++;
      else this.cleanupStats.removedOneshot++;
    }
    this.log.info({ box: box.id, pool: poolName, policy: box.policy, action, reason }, 'cleanup');
  }
}
