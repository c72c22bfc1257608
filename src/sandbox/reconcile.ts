/**
 * Engine state against the registry, for one pool: which containers to adopt, which half-made
 * creates to sweep, which boxes vanished, and every known box's status. A pure plan; the
 * Manager applies it at start and on every cleanup pass.
 */
import type { ContainerStatus, ContainerSummary } from '../runtime/types.js';
import type { ManagedBox } from './box.js';
import type { ResolvedPool } from './config.js';
import type { BoxRecord } from './labels.js';
import { labelsToRecord } from './labels.js';
import type { BoxStatus } from './types.js';

export interface ReconcileInput {
  manager: string;
  pool: ResolvedPool;
  list: ContainerSummary[];
  /** When the list was asked for: a box registered after it cannot be in it. */
  listedAt: number;
  known: ManagedBox[];
  /** A create or removal of this box id is in flight in this Manager. */
  busy(id: string): boolean;
  now: number;
}

export interface ReconcilePlan {
  adopt: Array<{ record: BoxRecord; container: ContainerSummary }>;
  /** Containers of this Manager that were created but never started, by nobody alive. */
  sweep: ContainerSummary[];
  vanished: ManagedBox[];
  statuses: Array<{ box: ManagedBox; status: BoxStatus }>;
}

/** A box's status from its container's (docs: BoxStatus): `removing` and `dead` are stopped. */
export function statusOf(status: ContainerStatus): BoxStatus {
  switch (status) {
    case 'created':
      return 'creating';
    case 'running':
    case 'paused':
    case 'restarting':
      return status;
    default:
      return 'stopped';
  }
}

/**
 * A container labelled for this Manager that is in the engine but not in the registry is either
 * a box from before a restart, a create that landed after its Manager died (both adopted), or a
 * create whose Manager died between create and start: such a container stays `created` forever
 * and is swept. The Manager's own creates in flight hold a reservation and are left alone.
 */
export function planReconcile(input: ReconcileInput): ReconcilePlan {
  const plan: ReconcilePlan = { adopt: [], sweep: [], vanished: [], statuses: [] };
  const byContainer = new Map(input.known.map((b) => [b.containerId, b]));
  const knownIds = new Set(input.known.map((b) => b.id));
  const listed = new Set<string>();
  for (const c of input.list) {
    listed.add(c.id);
    const box = byContainer.get(c.id);
    if (box) {
      plan.statuses.push({ box, status: statusOf(c.status) });
      continue;
    }
    const record = labelsToRecord(c.labels, {
      idleTimeoutMs: input.pool.idleTimeoutMs,
      idlePauseMs: input.pool.idlePauseMs,
      idleArchiveMs: input.pool.idleArchiveMs,
      stopTimeoutMs: input.pool.stopTimeoutMs,
      maxLifetimeMs: input.pool.maxLifetimeMs,
      createdAt: Date.parse(c.createdAt) || input.now,
      image: c.image,
    });
    if (!record || record.manager !== input.manager || record.pool !== input.pool.name) continue;
    if (knownIds.has(record.id) || input.busy(record.id)) continue;
    if (c.status === 'created') plan.sweep.push(c);
    else {
      plan.adopt.push({ record, container: c });
      knownIds.add(record.id);
    }
  }
  for (const box of input.known) {
    // An archived box has no container to find: its archive is the box.
    if (box.status === 'archived' || listed.has(box.containerId) || input.busy(box.id) || box.registeredAt >= input.listedAt) continue;
    plan.vanished.push(box);
  }
  return plan;
}
