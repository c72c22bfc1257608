/**
 * Startup and recovery: the registry rebuilt from what each pool's engine lists (adopt, sweep,
 * forget, refresh statuses: the plan is reconcile.ts's), the boxes the engine stopped behind sbx
 * started again, and each pool's event stream followed. The Manager owns the state; this is the
 * code that brings it back in line with the engines, at start, on every cleanup pass, when a pool
 * is added and when an engine comes back.
 */
import type { Logger } from 'pino';
import { isSbxError } from '../errors.js';
import type { ContainerEvent, HostEndpoint } from '../runtime/types.js';
import { mapSettled } from '../util/concurrency.js';
import { ManagedBox } from './box.js';
import type { BoxHost } from './box.js';
import type { ClaimStore } from './claims.js';
import { managerSelector } from './labels.js';
import type { LifetimeStore } from './lifetimes.js';
import { checkpointOutcome } from './checkpoints.js';
import type { CheckpointStore } from './checkpoints.js';
import type { Pool } from './pool.js';
import { PoolWatch } from './pool-watch.js';
import { planReconcile, statusOf } from './reconcile.js';
import type { BoxRegistry } from './registry.js';
import type { StopIntents } from './stop-intents.js';
import type { CleanupStats } from './types.js';
import { WARM_LABEL, joinClaims } from './warm.js';

/** Engine calls at once per pool when sweeping or starting boxes. */
export const CLEANUP_PARALLELISM = 5;

/** What recovery reads and changes of the Manager's state. */
export interface RecoveryDeps {
  /** The Manager's instance name. */
  manager: string;
  log: Logger;
  now(): number;
  registry: BoxRegistry;
  claims: ClaimStore;
  lifetimes: LifetimeStore;
  /** Boxes paused with their memory released (their containers read exited). */
  checkpoints: CheckpointStore;
  stopIntents: StopIntents;
  stats: CleanupStats;
  boxHost: BoxHost;
  /** A box id being removed right now. */
  removing(id: string): boolean;
  /** A box id with a create or a removal in flight: the plan leaves it alone. */
  busy(id: string): boolean;
  hostEndpoints(): Promise<HostEndpoint[]>;
  /** Tells a claimed spare's agent the identity of the box it became. */
  handEnv(pool: Pool, box: ManagedBox): Promise<void>;
  forgetLifetime(box: ManagedBox): Promise<void>;
  /** Settles the archives a start found on this pool (src/sandbox/archiver.ts). */
  settleArchives(pool: Pool): Promise<void>;
}

export class Recovery {
  constructor(private readonly d: RecoveryDeps) {}

  /** Follows the pool's engine events (box status, vanished boxes); a broken stream reconciles the pool once it is back. */
  watch(pool: Pool): void {
    if (pool.watch) return;
    pool.watch = new PoolWatch(
      pool.runtime(),
      managerSelector(this.d.manager, pool.name),
      {
        onEvent: (e) => this.onEvent(pool, e),
        onDisconnect: (err) => {
          pool.connected = false;
          this.d.log.warn({ pool: pool.name, err }, 'engine events stopped; reconnecting');
        },
        onReconnect: () => this.reconcile(pool, { revive: true }).then(() => this.d.log.info({ pool: pool.name }, 'engine is back; boxes reconciled')),
      },
      this.d.log,
    );
    pool.watch.start();
  }

  private onEvent(pool: Pool, e: ContainerEvent): void {
    if (e.labels[WARM_LABEL] !== undefined && !this.d.claims.get(e.id)) return pool.warm?.onEvent(e);
    const box = this.d.registry.ofPool(pool.name).find((b) => b.containerId === e.id);
    if (!box) return;
    if (e.action === 'started') box.observe('running', box.statusEpoch);
    else if (e.action === 'stopped') {
      box.observe('stopped', box.statusEpoch);
      box.containerStopped();
    } else if (e.action === 'removed' && !this.d.removing(box.id)) {
      this.d.registry.delete(box);
      this.d.stats.vanished++;
      this.d.log.warn({ box: box.id, pool: pool.name }, 'box removed behind sbx; forgotten');
    }
  }

  /**
   * Lists the pool and applies the reconcile plan: adopt, sweep, forget, refresh statuses. With
   * `revive` (at start and when the engine comes back), also starts the boxes the engine stopped
   * behind sbx.
   */
  async reconcile(pool: Pool, opts: { revive?: boolean } = {}): Promise<ManagedBox[]> {
    const runtime = pool.runtime();
    // First: an archive or restore cut short settles to the box this list then finds.
    await this.d.settleArchives(pool);
    const listedAt = this.d.now();
    // A box's lifecycle step (pause, archive, …) that runs while the list is taken wins over it.
    const epochs = new Map(this.d.registry.ofPool(pool.name).map((b) => [b, b.statusEpoch]));
    let list;
    try {
      [list, pool.resources] = await Promise.all([
        runtime.list({ labels: managerSelector(this.d.manager, pool.name) }),
        pool.resources ? Promise.resolve(pool.resources) : runtime.resources(),
      ]);
      pool.connected = true;
    } catch (err) {
      pool.connected = false;
      this.d.log.warn({ pool: pool.name, err }, 'pool unreachable');
      throw err;
    }
    // Adopted boxes heartbeat too: after a restart sbx's endpoints are open to them before any create.
    await this.d
      .hostEndpoints()
      .then((endpoints) => pool.allowHostEndpoints(endpoints))
      .catch((err: unknown) => this.d.log.warn({ pool: pool.name, err }, "could not open sbx's endpoints to boxes"));
    const { boxes, spares } = joinClaims(list, (id) => this.d.claims.get(id));
    const plan = planReconcile({
      manager: this.d.manager,
      pool: pool.def,
      list: boxes,
      listedAt,
      known: this.d.registry.ofPool(pool.name),
      busy: (id) => this.d.busy(id),
      now: this.d.now(),
    });
    for (const { box, status } of plan.statuses) box.observe(status, epochs.get(box) ?? -1);
    for (const box of plan.vanished) {
      if (!this.d.registry.delete(box)) continue;
      await this.d.claims.delete(box.containerId).catch((err: unknown) => this.d.log.warn({ box: box.id, err }, 'could not forget a claim'));
      await this.d.forgetLifetime(box);
      this.d.stats.vanished++;
      this.d.log.warn({ box: box.id, pool: pool.name }, 'box vanished from its runtime; forgotten');
    }
    for (const { record, container } of plan.adopt) {
      record.maxLifetimeMs = this.d.lifetimes.get(container.id) ?? record.maxLifetimeMs;
      // The idle clock restarts at adoption: a restart never reaps boxes on the spot.
      const execEnv = this.d.claims.get(container.id)?.env;
      const box = new ManagedBox(record, container.id, this.d.boxHost, statusOf(container.status), execEnv);
      this.d.registry.add(box);
      // The agent may be a new one (the engine restarted the container): it learns the box again.
      if (execEnv && box.status === 'running') await this.d.handEnv(pool, box);
      if (pool.recovered) this.d.stats.adopted++;
      this.d.log.info({ box: record.id, pool: pool.name }, pool.recovered ? 'adopted a box created by another process' : 'recovered box');
    }
    const swept = await mapSettled(plan.sweep, CLEANUP_PARALLELISM, (c) => runtime.remove(c.id, { force: true }));
    for (const [i, r] of swept.entries()) {
      if (r.status === 'fulfilled' || isSbxError(r.reason, 'not_found')) {
        this.d.stats.swept++;
        this.d.log.warn({ container: plan.sweep[i]!.id, pool: pool.name }, 'swept a box whose create never finished');
      } else this.d.log.error({ container: plan.sweep[i]!.id, err: r.reason }, 'could not sweep a half-made box');
    }
    pool.recovered = true;
    if (opts.revive) {
      await this.settleCheckpoints(pool);
      await this.reviveStopped(pool);
    }
    await pool.warm?.sync(spares);
    return this.d.registry.ofPool(pool.name);
  }

  /**
   * Boxes whose container reads exited and that have a checkpoint on record are paused with their
   * memory released, not stopped (never started afresh by reviveStopped): what a checkpoint or a
   * restore cut short by a crash came to is read from the engine. Known released boxes are left
   * as they are (observe keeps them paused).
   */
  private async settleCheckpoints(pool: Pool): Promise<void> {
    const runtime = pool.runtime();
    const boxes = this.d.registry
      .ofPool(pool.name)
      .filter((b) => !b.memoryReleased && !b.stepping && b.status !== 'archived' && this.d.checkpoints.get(b.containerId));
    await mapSettled(boxes, CLEANUP_PARALLELISM, async (b) => {
      const entry = this.d.checkpoints.get(b.containerId)!;
      const outcome = await checkpointOutcome(runtime, b.containerId, entry.name);
      if (outcome === 'released') {
        await this.d.checkpoints.set(b.containerId, { name: entry.name, state: 'checkpointed' });
        b.memoryReleased = true;
        b.status = 'paused';
        this.d.log.info({ box: b.id, pool: pool.name }, 'recovered a box paused with its memory released');
        return;
      }
      // Running: the checkpoint never happened, or its restore did. Stopped without it: its files are kept, its processes are not.
      await this.d.checkpoints.set(b.containerId, undefined);
      if (outcome === 'running') await runtime.removeCheckpoint?.(b.containerId, entry.name).catch(() => undefined);
      this.d.log.warn({ box: b.id, pool: pool.name, outcome }, 'a checkpoint cut short settled');
    });
  }

  /** An unreachable pool is logged where it is found and adopted later; anything else is logged here. */
  failed(pool: Pool, err: unknown): void {
    if (!isSbxError(err, 'runtime_unavailable')) this.d.log.error({ pool: pool.name, err }, 'reconciling the pool failed; the next cleanup pass tries again');
  }

  /**
   * Starts the session, longrunning and persistent boxes that are stopped though sbx did not stop
   * them: at start, when a pool is added and when its engine comes back. The engine restarts no
   * box (a command that exits must stay exited and say so, not loop), so after an engine restart,
   * clean or kill -9, this is what brings boxes back; a box whose own command had ended is tried
   * once more at these moments only. Not use: the idle clock is not touched.
   */
  private async reviveStopped(pool: Pool): Promise<void> {
    const runtime = pool.runtime();
    const boxes = this.d.registry
      .ofPool(pool.name)
      .filter((b) => b.policy !== 'oneshot' && b.status === 'stopped' && b.restartable && !this.d.stopIntents.has(b.id) && !this.d.removing(b.id));
    const results = await mapSettled(boxes, CLEANUP_PARALLELISM, async (b) => {
      await runtime.start(b.containerId);
      b.status = 'running';
      await this.d.handEnv(pool, b);
    });
    for (const [i, r] of results.entries()) {
      const box = boxes[i]!;
      if (r.status === 'fulfilled') this.d.log.warn({ box: box.id, pool: pool.name, policy: box.policy }, 'started a box the engine had stopped behind sbx');
      else this.d.log.error({ box: box.id, pool: pool.name, err: r.reason }, 'could not start a box the engine had stopped behind sbx');
    }
  }
}
