import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pino from 'pino';
import type { Logger } from 'pino';
import { SbxError, isSbxError } from '../errors.js';
import type { ContainerSpec, PullProgress, RegistryAuth, Runtime } from '../runtime/types.js';
import { mapSettled } from '../util/concurrency.js';
import { WorkspaceManager } from '../workspace/index.js';
import type { WorkspaceNode } from '../workspace/index.js';
import { Box } from './box.js';
import type { BoxHost } from './box.js';
import { resolveConfig, resolvePool } from './config.js';
import type { ManagerConfig, PoolConfig, ResolvedConfig } from './config.js';
import { validateCreateOptions } from './create-options.js';
import { labelsToRecord, managerSelector, recordToLabels } from './labels.js';
import type { BoxRecord } from './labels.js';
import { decideCleanup } from './policy.js';
import { Pool } from './pool.js';
import { DEFAULT_PIDS_LIMIT, securityFor } from './security.js';
import { BoxTokenService } from './tokens.js';
import type { BoxInfo, CleanupStats, CreateOptions, HeartbeatInput, ListOptions, LifecyclePolicy, PoolInfo } from './types.js';
import { DEFAULT_POLICY } from './types.js';

/** The CMD a box runs unless the caller gives one: sleeps, and exits at once on SIGTERM. */
export const GRACEFUL_CMD = ['/bin/sh', '-c', "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done"];

export const DEFAULT_WORKDIR = '/workspace';
/** Engine calls in flight at once during cleanup and pool removal. */
const CLEANUP_PARALLELISM = 5;

interface Reservation {
  id: string;
  pool: string;
  owner: string;
}

/**
 * Keeps pools of container runtimes and the boxes on them: creation with limits, lookup,
 * recovery after a restart, and the cleanup loop that applies lifecycle policies.
 *
 * @example
 * const manager = new Manager();          // one pool `local` on the local Docker Engine
 * await manager.start();                  // recover existing boxes, start the cleanup loop
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
  private readonly poolsByName = new Map<string, Pool>();
  private readonly boxes = new Map<string, Box>();
  private readonly reservations = new Map<string, Reservation>();
  private readonly inflightGetOrCreate = new Map<string, Promise<Box>>();
  /** Removals in progress: a second remove() of the same box waits for the first. */
  private readonly removing = new Map<string, Promise<void>>();
  private tokenService: Promise<BoxTokenService> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private tick: Promise<void> | undefined;
  private readonly boxHost: BoxHost;
  readonly cleanupStats: CleanupStats = { ticks: 0, removedIdle: 0, removedLifetime: 0, removedOneshot: 0, stoppedIdle: 0, vanished: 0, errors: 0 };

  constructor(config: ManagerConfig = {}) {
    this.config = resolveConfig(config);
    this.log = config.logger ?? pino({ name: 'sbx', level: process.env['SBX_LOG_LEVEL'] ?? 'warn' }, pino.destination(2));
    for (const p of this.config.pools) this.poolsByName.set(p.name, new Pool(p));
    this.boxHost = {
      runtimeFor: (pool) => this.pool(pool).runtime(),
      removeBox: (id) => this.remove(id),
      workspaceFs: (workspaceId) => this.workspaces.fs(workspaceId),
      onExecFinished: (box) => {
        if (box.policy === 'oneshot' && box.activity.inFlight === 0) {
          this.remove(box.id).catch((err: unknown) => this.log.warn({ box: box.id, err }, 'oneshot removal failed; cleanup will retry'));
        }
      },
    };
    this.workspaces = new WorkspaceManager({
      dataDir: this.config.dataDir,
      nodes: () => this.nodes(),
      isMounted: (workspaceId) => [...this.boxes.values()].some((b) => b.workspaceId === workspaceId),
    });
  }

  /**
   * The nodes workspaces can live on: one per pool. Only pools whose runtime can mount this
   * machine's directories can host workspaces until the node agent serves remote storage.
   */
  nodes(): WorkspaceNode[] {
    return [...this.poolsByName.values()].map((p) => ({ name: p.name, addr: p.def.addr, online: p.runtime().capabilities.hostMounts }));
  }

  // --- Bootstrap -----------------------------------------------------------------------

  /**
   * Connects the pools, adopts every box this Manager's name labelled (all fields come back
   * from the labels), then starts the cleanup loop. A pool that cannot be reached is logged
   * and adopted on a later tick.
   */
  async start(): Promise<void> {
    await Promise.all([...this.poolsByName.values()].map((p) => this.recoverPool(p).catch(() => undefined)));
    if (!this.timer && this.config.cleanupIntervalMs > 0) {
      this.timer = setInterval(() => void this.cleanup().catch(() => undefined), this.config.cleanupIntervalMs);
      this.timer.unref();
    }
  }

  /** Stops the cleanup loop and closes connections. Boxes keep running. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.tick;
    // A oneshot removal started in the background must finish before its connection closes.
    await Promise.allSettled([...this.removing.values()]);
    await Promise.all([...this.poolsByName.values()].map((p) => p.close()));
  }

  private async recoverPool(pool: Pool): Promise<void> {
    const list = await this.listContainers(pool);
    this.adopt(pool, list);
  }

  private async listContainers(pool: Pool) {
    try {
      const list = await pool.runtime().list({ labels: managerSelector(this.config.name, pool.name) });
      pool.connected = true;
      return list;
    } catch (err) {
      pool.connected = false;
      this.log.warn({ pool: pool.name, err }, 'pool unreachable');
      throw err;
    }
  }

  private adopt(pool: Pool, list: Awaited<ReturnType<Runtime['list']>>): void {
    const now = Date.now();
    for (const c of list) {
      const record = labelsToRecord(c.labels, {
        idleTimeoutMs: pool.def.idleTimeoutMs,
        stopTimeoutMs: pool.def.stopTimeoutMs,
        maxLifetimeMs: pool.def.maxLifetimeMs,
        createdAt: Date.parse(c.createdAt) || now,
        image: c.image,
      });
      if (!record || record.manager !== this.config.name || this.boxes.has(record.id)) continue;
      // The idle clock restarts at recovery: a restart never reaps boxes on the spot.
      this.boxes.set(record.id, new Box(record, c.id, this.boxHost, now));
      this.log.info({ box: record.id, pool: pool.name }, 'recovered box');
    }
    pool.recovered = true;
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

  /** Adds a pool (validated; names are unique). Its connection opens on first use. */
  async addPool(def: PoolConfig): Promise<PoolInfo> {
    const resolved = resolvePool(def);
    if (this.poolsByName.has(resolved.name)) throw new SbxError('conflict', `pool '${resolved.name}' already exists`, { details: { pool: resolved.name } });
    const pool = new Pool(resolved);
    this.poolsByName.set(resolved.name, pool);
    if (this.timer) await this.recoverPool(pool).catch(() => undefined);
    return pool.info(0);
  }

  /** Removes a pool: pool_in_use while it has boxes, unless `force`, which removes them first. */
  async removePool(name: string, opts: { force?: boolean } = {}): Promise<void> {
    const pool = this.pool(name);
    const boxes = this.boxesOf(name);
    const pending = [...this.reservations.values()].some((r) => r.pool === name);
    if ((boxes.length > 0 || pending) && !opts.force) {
      throw new SbxError('pool_in_use', `pool '${name}' has ${boxes.length} box(es); remove them or pass force`, {
        details: { pool: name, boxes: boxes.length },
      });
    }
    const results = await mapSettled(boxes, CLEANUP_PARALLELISM, (b) => this.remove(b.id));
    const failed = results.filter((r) => r.status === 'rejected');
    if (failed.length > 0) {
      throw new SbxError('internal', `pool '${name}': ${failed.length} box(es) could not be removed; the pool is kept`, {
        cause: (failed[0] as PromiseRejectedResult).reason,
      });
    }
    this.poolsByName.delete(name);
    await pool.close();
  }

  pools(): PoolInfo[] {
    return [...this.poolsByName.values()].map((p) => p.info(this.boxesOf(p.name).length));
  }

  private boxesOf(pool: string): Box[] {
    return [...this.boxes.values()].filter((b) => b.pool === pool);
  }

  // --- Boxes ---------------------------------------------------------------------------

  /**
   * Creates and starts a box. Limits are checked and the slot reserved in one synchronous
   * step, so concurrent creates can never exceed maxTotal or maxPerUser.
   */
  async create(options: CreateOptions): Promise<Box> {
    const opts = validateCreateOptions(options);
    const pool = await this.placement(opts);
    const owner = opts.owner ?? 'default';
    const id = opts.id ?? `sb-${randomBytes(6).toString('hex')}`;
    const release = this.reserve(id, pool, owner);
    try {
      return await this.createReserved(id, owner, pool, opts);
    } finally {
      release();
    }
  }

  /** The pool a box goes on: the one asked for, or the default; storage decides for a workspace. */
  private async placement(opts: CreateOptions): Promise<Pool> {
    if (!opts.workspaceId) return opts.pool ? this.pool(opts.pool) : this.defaultPool();
    const node = await this.workspaces.nodeForWorkspace(opts.workspaceId);
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

  private reserve(id: string, pool: Pool, owner: string): () => void {
    if (this.boxes.has(id) || this.reservations.has(id)) throw new SbxError('conflict', `box '${id}' already exists`, { details: { id } });
    const inPool = (r: { pool: string }) => r.pool === pool.name;
    const all = [...this.boxes.values(), ...this.reservations.values()];
    const total = all.filter(inPool).length;
    if (pool.def.maxTotal > 0 && total >= pool.def.maxTotal) {
      throw new SbxError('limit_exceeded', `pool '${pool.name}' is full (${pool.def.maxTotal} boxes)`, {
        details: { pool: pool.name, limit: 'maxTotal', max: pool.def.maxTotal },
      });
    }
    const mine = all.filter((r) => inPool(r) && r.owner === owner).length;
    if (pool.def.maxPerUser > 0 && mine >= pool.def.maxPerUser) {
      throw new SbxError('limit_exceeded', `owner '${owner}' has ${mine} box(es) on pool '${pool.name}' (max ${pool.def.maxPerUser})`, {
        details: { pool: pool.name, owner, limit: 'maxPerUser', max: pool.def.maxPerUser },
      });
    }
    this.reservations.set(id, { id, pool: pool.name, owner });
    return () => this.reservations.delete(id);
  }

  private async createReserved(id: string, owner: string, pool: Pool, opts: CreateOptions): Promise<Box> {
    const record: BoxRecord = {
      manager: this.config.name,
      id,
      owner,
      pool: pool.name,
      policy: (opts.policy as LifecyclePolicy | undefined) ?? DEFAULT_POLICY,
      workspaceId: opts.workspaceId ?? null,
      mountMode: opts.mountMode ?? 'rw',
      mountPath: opts.mountPath ?? DEFAULT_WORKDIR,
      idleTimeoutMs: opts.idleTimeoutMs ?? pool.def.idleTimeoutMs,
      stopTimeoutMs: opts.stopTimeoutMs ?? pool.def.stopTimeoutMs,
      maxLifetimeMs: opts.maxLifetimeMs ?? pool.def.maxLifetimeMs,
      createdAt: Date.now(),
      vnc: opts.vnc ?? false,
      image: opts.image,
      tokenNonce: BoxTokenService.newNonce(),
      labels: opts.labels ?? {},
    };
    const tokens = await this.tokens();
    const env: Record<string, string> = {
      ...(opts.env ?? {}),
      SBX_SANDBOX_ID: id,
      SBX_TOKEN: tokens.issue(id, record.tokenNonce, this.config.tokenTtlMs),
      ...(this.config.apiUrl ? { SBX_API_URL: this.config.apiUrl } : {}),
    };
    const binds = record.workspaceId
      ? [{ hostPath: await this.workspaces.mountPath(record.workspaceId), containerPath: record.mountPath, readOnly: record.mountMode === 'ro' }]
      : [];
    const profile = securityFor(opts.security ?? pool.def.security);
    const network = opts.network ?? profile.network;
    const spec: ContainerSpec = {
      image: opts.image,
      name: `sbx-${this.config.name}-${id}`,
      cmd: opts.cmd ?? GRACEFUL_CMD,
      env,
      workDir: opts.workDir ?? DEFAULT_WORKDIR,
      labels: recordToLabels(record),
      pidsLimit: opts.pidsLimit ?? pool.def.pidsLimit ?? DEFAULT_PIDS_LIMIT,
      security: profile.security,
      ...(opts.user ? { user: opts.user } : {}),
      ...(opts.memory ? { memory: opts.memory } : {}),
      ...(opts.cpus ? { cpus: opts.cpus } : {}),
      ...(opts.ports?.length ? { ports: opts.ports } : {}),
      ...(binds.length ? { binds } : {}),
      ...(network ? { network } : {}),
      ...(pool.def.ociRuntime ? { ociRuntime: pool.def.ociRuntime } : {}),
    };
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
      await runtime.start(containerId);
    } catch (err) {
      // A box that cannot start must not linger half-made.
      await runtime
        .remove(containerId, { force: true })
        .catch((e: unknown) => this.log.error({ box: id, err: e }, 'could not remove a box that failed to start'));
      throw err;
    }
    const box = new Box(record, containerId, this.boxHost);
    this.boxes.set(id, box);
    this.log.info({ box: id, pool: pool.name, owner, policy: record.policy }, 'box created');
    return box;
  }

  /** The box with this id; not_found otherwise. Counts as activity. */
  async get(id: string): Promise<Box> {
    const box = this.boxes.get(id);
    if (!box) throw new SbxError('not_found', `box '${id}' not found`, { details: { id } });
    box.touch();
    return box;
  }

  /**
   * The box with `opts.id`, created if absent. Concurrent calls for one id share one creation:
   * N callers, one box.
   */
  async getOrCreate(opts: CreateOptions): Promise<Box> {
    if (!opts?.id) throw new SbxError('invalid_argument', 'id: getOrCreate needs an id', { details: { field: 'id' } });
    const id = opts.id;
    const existing = this.boxes.get(id);
    if (existing) return this.checkOwner(existing, opts);
    const pending = this.inflightGetOrCreate.get(id);
    if (pending) return pending.then((b) => this.checkOwner(b, opts));
    const creation = this.create(opts).finally(() => this.inflightGetOrCreate.delete(id));
    this.inflightGetOrCreate.set(id, creation);
    return creation;
  }

  private checkOwner(box: Box, opts: CreateOptions): Box {
    const owner = opts.owner ?? 'default';
    if (box.owner !== owner) throw new SbxError('conflict', `box '${box.id}' exists and belongs to another owner`, { details: { id: box.id } });
    box.touch();
    return box;
  }

  /** Boxes matching every given filter. */
  list(opts: ListOptions = {}): Box[] {
    return [...this.boxes.values()].filter(
      (b) =>
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
    const inProgress = this.removing.get(id);
    if (inProgress) return inProgress;
    const box = this.boxes.get(id);
    if (!box) throw new SbxError('not_found', `box '${id}' not found`, { details: { id } });
    const removal = this.removeBox(box).finally(() => this.removing.delete(id));
    this.removing.set(id, removal);
    return removal;
  }

  private async removeBox(box: Box): Promise<void> {
    try {
      await this.pool(box.pool).runtime().remove(box.containerId, { force: true });
    } catch (err) {
      if (!isSbxError(err, 'not_found')) throw err;
    }
    if (this.boxes.get(box.id) === box) this.boxes.delete(box.id);
    this.log.info({ box: box.id, pool: box.pool }, 'box removed');
  }

  /** Records a heartbeat from inside the box: activity when `active`, and its process count. */
  heartbeat(id: string, input: HeartbeatInput): void {
    const box = this.boxes.get(id);
    if (!box) throw new SbxError('not_found', `box '${id}' not found`, { details: { id } });
    if (input.active) box.activity.lastHeartbeat = Date.now();
    if (input.processCount !== undefined) box.activity.processCount = Math.max(0, Math.floor(input.processCount));
  }

  async info(id: string): Promise<BoxInfo> {
    return (await this.get(id)).info();
  }

  // --- Box tokens ----------------------------------------------------------------------

  private tokens(): Promise<BoxTokenService> {
    this.tokenService ??= this.loadTokenSecret().then((secret) => new BoxTokenService(secret));
    return this.tokenService;
  }

  private async loadTokenSecret(): Promise<Buffer> {
    if (this.config.tokenSecret) return Buffer.from(this.config.tokenSecret);
    const file = join(this.config.dataDir, 'box-token.key');
    try {
      return Buffer.from((await readFile(file, 'utf8')).trim(), 'base64');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    await mkdir(this.config.dataDir, { recursive: true, mode: 0o700 });
    const secret = randomBytes(32);
    try {
      await writeFile(file, secret.toString('base64'), { mode: 0o600, flag: 'wx' });
    } catch (err) {
      // Another Manager on the same data dir won the race: use its secret.
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return Buffer.from((await readFile(file, 'utf8')).trim(), 'base64');
      throw err;
    }
    await chmod(file, 0o600);
    return secret;
  }

  /** The box a token speaks for; unauthorized if forged, expired, or its box is gone. */
  async verifyBoxToken(token: string): Promise<string> {
    const claims = (await this.tokens()).verify(token);
    const box = this.boxes.get(claims.boxId);
    if (!box || box.record.tokenNonce !== claims.nonce) throw new SbxError('unauthorized', 'box token does not belong to a live box');
    return box.id;
  }

  /** A fresh token for the same box, given a valid one. */
  async refreshBoxToken(token: string): Promise<string> {
    const id = await this.verifyBoxToken(token);
    const box = this.boxes.get(id)!;
    return (await this.tokens()).issue(id, box.record.tokenNonce, this.config.tokenTtlMs);
  }

  // --- Images --------------------------------------------------------------------------

  async imageExists(pool: string, ref: string): Promise<boolean> {
    return this.pool(pool).runtime().images.exists(ref);
  }

  pullImage(pool: string, ref: string, opts: { auth?: RegistryAuth; signal?: AbortSignal } = {}): AsyncIterable<PullProgress> {
    return this.pool(pool).runtime().images.pull(ref, opts);
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
    this.tick ??= this.cleanupOnce().finally(() => (this.tick = undefined));
    return this.tick;
  }

  private async cleanupOnce(): Promise<void> {
    this.cleanupStats.ticks++;
    await Promise.all([...this.poolsByName.values()].map((p) => this.cleanupPool(p).catch(() => this.cleanupStats.errors++)));
  }

  private async cleanupPool(pool: Pool): Promise<void> {
    const listedAt = Date.now();
    const list = await this.listContainers(pool);
    if (!pool.recovered) this.adopt(pool, list);
    const byId = new Map(list.map((c) => [c.id, c]));
    const now = Date.now();
    const work: Array<() => Promise<void>> = [];
    for (const box of this.boxesOf(pool.name)) {
      if (this.removing.has(box.id)) continue;
      const c = byId.get(box.containerId);
      if (!c) {
        // Created after the list was taken: not vanished, just new.
        if (box.activity.lastCall >= listedAt || this.reservations.has(box.id)) continue;
        this.boxes.delete(box.id);
        this.cleanupStats.vanished++;
        this.log.warn({ box: box.id, pool: pool.name }, 'box vanished from its runtime; forgotten');
        continue;
      }
      const decision = decideCleanup({
        policy: box.policy,
        now,
        createdAt: box.record.createdAt,
        lastActive: box.activity.lastActive(now),
        inFlight: box.activity.inFlight,
        execsCompleted: box.activity.execsCompleted,
        running: c.running,
        idleTimeoutMs: box.record.idleTimeoutMs,
        maxLifetimeMs: box.record.maxLifetimeMs,
      });
      if (decision.action === 'keep') continue;
      const { action, reason } = decision;
      work.push(async () => {
        if (action === 'stop') {
          await pool.runtime().stop(box.containerId, { timeoutMs: box.record.stopTimeoutMs });
          this.cleanupStats.stoppedIdle++;
        } else {
          await this.remove(box.id);
          if (reason === 'idle') this.cleanupStats.removedIdle++;
          else if (reason === 'lifetime') this.cleanupStats.removedLifetime++;
          else this.cleanupStats.removedOneshot++;
        }
        this.log.info({ box: box.id, pool: pool.name, policy: box.policy, action, reason }, 'cleanup');
      });
    }
    const results = await mapSettled(work, CLEANUP_PARALLELISM, (w) => w());
    for (const r of results) {
      if (r.status === 'rejected') {
        this.cleanupStats.errors++;
        this.log.error({ pool: pool.name, err: r.reason }, 'cleanup action failed');
      }
    }
  }
}
