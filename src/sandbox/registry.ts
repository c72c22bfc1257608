import { SbxError } from '../errors.js';
import type { ManagedBox } from './box.js';

interface Reservation {
  id: string;
  pool: string;
  owner: string;
}

/** Limits of one pool, as the registry enforces them (0 = unlimited). */
export interface PoolLimits {
  name: string;
  maxTotal: number;
  maxPerUser: number;
}

/**
 * The boxes a Manager knows, and the slots reserved for creates in flight. Limits are checked
 * and a slot taken in one synchronous step, so concurrent creates can never exceed them.
 */
export class BoxRegistry {
  private readonly boxes = new Map<string, ManagedBox>();
  private readonly reservations = new Map<string, Reservation>();

  /** `onChange`: a box was added or forgotten (the Manager arms or clears its deadline timer). */
  constructor(private readonly onChange: (box: ManagedBox) => void = () => undefined) {}

  get(id: string): ManagedBox | undefined {
    return this.boxes.get(id);
  }

  all(): ManagedBox[] {
    return [...this.boxes.values()];
  }

  ofPool(pool: string): ManagedBox[] {
    return this.all().filter((b) => b.pool === pool);
  }

  isReserved(id: string): boolean {
    return this.reservations.has(id);
  }

  hasReservationsIn(pool: string): boolean {
    return [...this.reservations.values()].some((r) => r.pool === pool);
  }

  /** Boxes plus reservations on a pool: what the limits count. */
  count(pool: string, owner?: string): number {
    const slots = [...this.boxes.values(), ...this.reservations.values()];
    return slots.filter((s) => s.pool === pool && (owner === undefined || s.owner === owner)).length;
  }

  /** Takes a slot for a create, or throws conflict / limit_exceeded; the result releases it. */
  reserve(id: string, pool: PoolLimits, owner: string): () => void {
    if (this.boxes.has(id) || this.reservations.has(id)) throw new SbxError('conflict', `box '${id}' already exists`, { details: { id } });
    if (pool.maxTotal > 0 && this.count(pool.name) >= pool.maxTotal) {
      throw new SbxError('limit_exceeded', `pool '${pool.name}' is full (${pool.maxTotal} boxes)`, {
        details: { pool: pool.name, limit: 'maxTotal', max: pool.maxTotal },
      });
    }
    const mine = this.count(pool.name, owner);
    if (pool.maxPerUser > 0 && mine >= pool.maxPerUser) {
      throw new SbxError('limit_exceeded', `owner '${owner}' has ${mine} box(es) on pool '${pool.name}' (max ${pool.maxPerUser})`, {
        details: { pool: pool.name, owner, limit: 'maxPerUser', max: pool.maxPerUser },
      });
    }
    this.reservations.set(id, { id, pool: pool.name, owner });
    return () => this.reservations.delete(id);
  }

  add(box: ManagedBox): void {
    this.boxes.set(box.id, box);
    this.onChange(box);
  }

  /** Forgets `box` if it is still the one registered under its id. */
  delete(box: ManagedBox): boolean {
    if (this.boxes.get(box.id) !== box) return false;
    this.boxes.delete(box.id);
    this.onChange(box);
    return true;
  }
}
