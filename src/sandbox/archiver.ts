/**
 * Archive and restore: a box's filesystem changes saved as an image (Runtime.commit) with its whole
 * record, and its container removed, so an archived box holds only disk; a restore makes a new
 * container of the same box (same id, record, spec, workspace) from that image. Each step is
 * written to the archive store before it is taken (archives.ts says what each state means), so a
 * Manager killed anywhere comes back to the old box or the new one, never neither.
 */
import type { Logger } from 'pino';
import { SbxError, isSbxError } from '../errors.js';
import { parseImageRef } from '../runtime/image-ref.js';
import type { ContainerSpec, EgressSpec, HostEndpoint, Runtime } from '../runtime/types.js';
import type { ArchiveEntry, ArchiveStore } from './archives.js';
import type { BoxRecord } from './labels.js';
import { ManagedBox } from './box.js';
import type { BoxHost } from './box.js';
import { boxRuntime } from './box-errors.js';
import { withSpecLabel } from './box-spec.js';
import { DEFAULT_NETWORK_POLICY, describeEgress } from './egress-policy.js';
import type { NetworkPolicy } from './egress-policy.js';
import type { ClaimStore } from './claims.js';
import { ARCHIVE_LABEL, MANAGED_BY, MANAGED_BY_VALUE, SPEC_LABEL, boxSelector, containerName, recordToLabels } from './labels.js';
import type { LifetimeStore } from './lifetimes.js';
import type { Pool } from './pool.js';
import { IMAGE_NODE_LABEL } from '../runtime/remote/node-set.js';
import type { BoxRegistry } from './registry.js';
import type { StopIntents } from './stop-intents.js';

export interface ArchiverDeps {
  manager: string;
  log: Logger;
  now(): number;
  store: ArchiveStore;
  registry: BoxRegistry;
  stopIntents: StopIntents;
  claims: ClaimStore;
  lifetimes: LifetimeStore;
  boxHost: BoxHost;
  pool(name: string): Pool;
  hostEndpoints(): Promise<HostEndpoint[]>;
  /** On a pool of nodes, the node a container id names (where its commit's image is). */
  imageNodeOf(pool: string, containerId: string): string | undefined;
  /** The variables sbx gives a box (its id, token, sbx's endpoints), made anew for a restore. */
  sbxEnvOf(record: BoxRecord): Promise<Record<string, string>>;
  /** A policy as the pool's runtime enforces it (with sbx's endpoints now); undefined where it enforces none. */
  egressOf(pool: Pool, policy: NetworkPolicy): Promise<EgressSpec | undefined>;
}

const ARCHIVE_REPOSITORY = 'sbx-archive';

/** The image an archived box's filesystem is kept in. */
export function archiveImage(manager: string, boxId: string): string {
  return `${ARCHIVE_REPOSITORY}/${manager}:${boxId}`;
}

/**
 * Whether an image reference names an archive: such an image holds one box's files (another
 * owner's, maybe), so no create may name it; only a restore uses it.
 */
export function isArchiveImage(ref: string): boolean {
  let parsed;
  try {
    parsed = parseImageRef(ref);
  } catch {
    return false;
  }
  // The engine reads a name without a registry as Docker Hub's, and finds the local image by either.
  const local = parsed.registry === undefined || DOCKER_HUB.includes(parsed.registry);
  return local && (parsed.repository === ARCHIVE_REPOSITORY || parsed.repository.startsWith(`${ARCHIVE_REPOSITORY}/`));
}

const DOCKER_HUB = ['docker.io', 'index.docker.io', 'registry-1.docker.io'];

export class Archiver {
  /** Box ids with an archive or a restore in flight: reconcile leaves them alone. */
  private readonly moving = new Set<string>();

  constructor(private readonly d: ArchiverDeps) {}

  busy(id: string): boolean {
    return this.moving.has(id);
  }

  /** Boxes made by an sbx that kept no spec of them: never archivable (asked once). */
  private readonly specless = new Set<string>();

  /** Whether a box's pool can archive it (its runtime commits) and sbx can make it again. */
  archivable(box: ManagedBox): boolean {
    return this.d.pool(box.pool).runtime().capabilities.commit !== false && !this.specless.has(box.id);
  }

  /** Where a box made from an archive goes: on a pool of nodes, the node that holds the image. */
  private placement(pool: Pool, containerId: string): Record<string, string> {
    const node = this.d.imageNodeOf(pool.name, containerId);
    return node ? { [IMAGE_NODE_LABEL]: node } : {};
  }

  /** A max lifetime set while archived: kept in the archive's record, which a restore makes the box from. */
  async saveLifetime(box: ManagedBox, maxLifetimeMs: number): Promise<void> {
    const entry = this.d.store.get(box.id);
    if (entry) await this.d.store.put({ ...entry, record: { ...entry.record, maxLifetimeMs } });
  }

  /** A network policy set while archived: kept in the archive's record, which a restore makes the box from. */
  async saveNetworkPolicy(box: ManagedBox, networkPolicy: NetworkPolicy): Promise<void> {
    const entry = this.d.store.get(box.id);
    if (entry) await this.d.store.put({ ...entry, record: { ...entry.record, networkPolicy } });
  }

  /**
   * Stops the box, commits its filesystem, then removes its container; the box stays registered,
   * `archived`. Called inside the box's own step (box.archive), so no use runs meanwhile.
   */
  async archive(box: ManagedBox): Promise<void> {
    if (!this.archivable(box)) {
      throw new SbxError('not_available', `box '${box.id}' runs on pool '${box.pool}', whose runtime cannot save a box's filesystem; stop it instead`, {
        details: { id: box.id, pool: box.pool, reason: 'archive_unsupported' },
      });
    }
    const rt = this.runtimeOf(box);
    const old = box.containerId;
    const spec = specOf((await rt.inspect(old)).labels);
    if (!spec) {
      this.specless.add(box.id);
      throw new SbxError('not_available', `box '${box.id}' was created by an sbx that kept no spec of it, so it cannot be made again from an archive`, {
        details: { id: box.id, reason: 'no_spec' },
      });
    }
    // The policy in force goes with the record (a restore puts it in force again): the runtime's
    // when it keeps one, which a Manager restarted since the last setNetwork has in no record.
    const enforced = rt.capabilities.egress === true && rt.getEgress ? await rt.getEgress(old) : undefined;
    const networkPolicy = enforced ? describeEgress(enforced) : box.record.networkPolicy;
    const entry: ArchiveEntry = {
      state: 'archiving',
      record: { ...box.record, ...(networkPolicy ? { networkPolicy } : {}) },
      image: archiveImage(this.d.manager, box.id),
      spec,
      execEnv: { ...box.execEnv },
      containerId: old,
    };
    const wasRunning = box.status === 'running' || box.status === 'paused';
    this.moving.add(box.id);
    try {
      await this.d.store.put({ ...entry, wasRunning });
      // Stopped on purpose: a Manager that dies now and finds the old box does not start it behind the caller.
      await this.d.stopIntents.set(box.id, true);
      try {
        // Thawed first, so the stop is the graceful one (a frozen process cannot run its SIGTERM handler).
        if (box.status === 'paused') await rt.unpause(old);
        await rt.stop(old, { timeoutMs: box.record.stopTimeoutMs });
        box.status = 'stopped';
        await rt.commit(old, entry.image, { labels: { [MANAGED_BY]: MANAGED_BY_VALUE, [ARCHIVE_LABEL]: box.id } });
      } catch (err) {
        await this.undoArchive(box, entry, wasRunning);
        throw err;
      }
      await this.d.store.put({ ...entry, state: 'archived', archivedAt: this.d.now() });
      // The box is the entry now: events of the old container no longer find it.
      box.status = 'archived';
      box.rebind('');
      await this.d.claims.delete(old).catch((err: unknown) => this.d.log.warn({ box: box.id, err }, 'could not forget a claim'));
      await this.d.lifetimes.set(old, undefined).catch((err: unknown) => this.d.log.warn({ box: box.id, err }, 'could not forget a renewed lifetime'));
      await rt.remove(old, { force: true }).catch((err: unknown) => {
        if (!isSbxError(err, 'not_found')) this.d.log.warn({ box: box.id, err }, 'archived box: its old container stays until the next start removes it');
      });
      this.d.log.info({ box: box.id, pool: box.pool, image: entry.image }, 'box archived');
    } finally {
      this.moving.delete(box.id);
    }
  }

  /** A failed archive leaves the box as it was: the half-made image and the entry go, a running box runs again. */
  private async undoArchive(box: ManagedBox, entry: ArchiveEntry, wasRunning: boolean): Promise<void> {
    const rt = this.runtimeOf(box);
    await removeImage(rt, entry.image).catch((err: unknown) => this.d.log.warn({ box: box.id, image: entry.image, err }, 'a failed archive left its image'));
    await this.d.store.delete(box.id).catch((err: unknown) => this.d.log.error({ box: box.id, err }, 'could not forget a failed archive'));
    if (wasRunning) {
      await this.d.stopIntents.set(box.id, false).catch(() => undefined);
      await rt.start(box.containerId).then(
        () => (box.status = 'running'),
        (err: unknown) => this.d.log.warn({ box: box.id, err }, 'a box whose archive failed could not be started again'),
      );
    }
  }

  /** A new container of the box from its archive, started; then the archive goes. Inside the box's step. */
  async restore(box: ManagedBox): Promise<void> {
    const entry = this.d.store.get(box.id);
    if (!entry) throw new SbxError('internal', `box '${box.id}' is archived but its archive entry is gone`, { details: { id: box.id } });
    const pool = this.d.pool(box.pool);
    const rt = pool.runtime();
    this.moving.add(box.id);
    try {
      await this.d.store.put({ ...entry, state: 'restoring' });
      // The old container, should its removal have failed, still holds the box's name.
      await rt.remove(entry.containerId, { force: true }).catch(() => undefined);
      // The box must reach sbx's endpoints as at create.
      await pool.allowHostEndpoints(await this.d.hostEndpoints());
      let created: string | undefined;
      try {
        const egress = await this.d.egressOf(pool, entry.record.networkPolicy ?? DEFAULT_NETWORK_POLICY);
        created = await rt.create(this.restoreSpec(box, entry, pool, await this.d.sbxEnvOf(box.record), egress));
        await boxRuntime(rt, created, box.id).start(created);
      } catch (err) {
        if (created) await rt.remove(created, { force: true }).catch(() => undefined);
        await this.d.store.put({ ...entry, state: 'archived' });
        throw err;
      }
      box.rebind(created);
      if (entry.record.networkPolicy) box.record.networkPolicy = entry.record.networkPolicy;
      box.status = 'running';
      await this.d.stopIntents.set(box.id, false);
      await this.d.store.delete(box.id);
      // Untagged: the layers stay while the new container uses them, and go with it.
      await rt.images.remove(entry.image, { force: true }).catch((err: unknown) => this.d.log.warn({ box: box.id, err }, 'could not untag a restored archive'));
      this.d.log.info({ box: box.id, pool: box.pool }, 'box restored');
    } finally {
      this.moving.delete(box.id);
    }
  }

  /** The box's own spec on its archive's image, with its record's labels (a claimed spare's identity its own now). */
  private restoreSpec(box: ManagedBox, entry: ArchiveEntry, pool: Pool, sbxEnv: Record<string, string>, egress: EgressSpec | undefined): ContainerSpec {
    // The caller's env is in the archive image (commit keeps the box's env, sbx's variables blank):
    // the create gives sbx's anew, and a claimed spare's identity. The egress rules are the box's
    // policy now, with sbx's endpoints now.
    const { egress: _created, ...spec } = entry.spec;
    const made: ContainerSpec = {
      ...spec,
      ...(egress ? { egress } : {}),
      image: entry.image,
      name: containerName(this.d.manager, box.id),
      env: { ...entry.execEnv, ...sbxEnv },
      labels: { ...recordToLabels(box.record), ...this.placement(pool, entry.containerId) },
    };
    return withSpecLabel(made);
  }

  /** Removes an archived box's archive (its box is being removed). */
  async discard(box: ManagedBox): Promise<void> {
    const entry = this.d.store.get(box.id);
    if (!entry) return;
    await this.runtimeOf(box)
      .images.remove(entry.image, { force: true })
      .catch((err: unknown) => {
        if (!isSbxError(err, 'not_found')) throw err;
      });
    await this.d.store.delete(box.id);
  }

  /** Entries a start found that their pool's engine has not settled yet: retried at each reconcile of that pool. */
  private readonly unsettled = new Set<string>();

  /**
   * At start: reads the archives; an archived box is registered at once (its entry is the box,
   * whatever its engine says), every entry is settled by its pool's next reconcile (settlePool).
   */
  async recover(): Promise<void> {
    await this.d.store.load();
    for (const entry of this.d.store.all()) {
      if (entry.state === 'archived') this.register(entry);
      this.unsettled.add(entry.record.id);
    }
  }

  /**
   * Before a pool is reconciled: each entry a start found settles to the old box (left for
   * reconcile to adopt), the new one (likewise), or an archived box. An engine that does not
   * answer leaves it for the next reconcile.
   */
  async settlePool(pool: Pool): Promise<void> {
    for (const id of [...this.unsettled]) {
      const entry = this.d.store.get(id);
      if (!entry || this.moving.has(id)) {
        if (!entry) this.unsettled.delete(id);
        continue;
      }
      if (entry.record.pool !== pool.name) continue;
      try {
        await this.settle(pool, entry);
        this.unsettled.delete(id);
      } catch (err) {
        this.d.log.warn({ box: id, state: entry.state, err }, 'could not settle an archive yet; the next reconcile tries again');
      }
    }
  }

  private register(entry: ArchiveEntry): void {
    if (!this.d.registry.get(entry.record.id)) this.d.registry.add(new ManagedBox({ ...entry.record }, '', this.d.boxHost, 'archived'));
  }

  private async settle(pool: Pool, entry: ArchiveEntry): Promise<void> {
    const rt = pool.runtime();
    const id = entry.record.id;
    if (entry.state === 'archiving') {
      // Killed before the image was complete: the old container is the box, and runs again if it ran
      // (no stop intent: the pool's revive starts it).
      await removeImage(rt, entry.image);
      if (entry.wasRunning) await this.d.stopIntents.set(id, false);
      await this.d.store.delete(id);
      this.d.log.warn({ box: id }, 'an archive was cut short; the box stays as it was');
      return;
    }
    if (entry.state === 'restoring') {
      const made = await rt.list({ labels: boxSelector(this.d.manager, pool.name, id) });
      if (made.some((c) => c.status !== 'created')) {
        // The new container started: it is the box (reconcile adopts it).
        await this.d.store.delete(id);
        await removeImage(rt, entry.image);
        this.d.log.warn({ box: id }, 'a restore was cut short after its start; the restored box is kept');
        return;
      }
      for (const c of made) await rt.remove(c.id, { force: true });
      await this.d.store.put({ ...entry, state: 'archived' });
      this.register(entry);
    }
    // Archived: a container left by a removal cut short goes now.
    await rt.remove(entry.containerId, { force: true }).catch((err: unknown) => {
      if (!isSbxError(err, 'not_found')) throw err;
    });
  }

  private runtimeOf(box: ManagedBox): Runtime {
    return boxRuntime(this.d.pool(box.pool).runtime(), box.containerId, box.id);
  }
}

async function removeImage(rt: Runtime, ref: string): Promise<void> {
  await rt.images.remove(ref, { force: true }).catch((err: unknown) => {
    if (!isSbxError(err, 'not_found')) throw err;
  });
}

/** The spec a box was created with, from its labels; undefined when it has none (made by an older sbx). */
function specOf(labels: Record<string, string>): ContainerSpec | undefined {
  const text = labels[SPEC_LABEL];
  if (!text) return undefined;
  try {
    const spec = JSON.parse(text) as ContainerSpec;
    return spec && typeof spec === 'object' && typeof spec.image === 'string' ? spec : undefined;
  } catch {
    return undefined;
  }
}
