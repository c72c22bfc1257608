import { join } from 'node:path';
import type { Box } from '../../src/sandbox/box.js';
import type { PoolConfig } from '../../src/sandbox/config.js';
import { Manager } from '../../src/sandbox/manager.js';
import type { CreateOptions, WarmInfo } from '../../src/sandbox/types.js';
import { BASE_IMAGE, BENCH_LABEL } from '../core/identity.js';
import type { BoxRef, ExecOutcome, Subject } from './subject.js';

export interface PoolRef extends BoxRef {
  readonly box: Box;
}

/** Boxes through the library on a pool of the given settings (the agent on or off, warm spares). */
export class PoolSubject implements Subject<PoolRef> {
  private constructor(
    readonly name: string,
    readonly manager: Manager,
    private readonly labels: Record<string, string>,
    private readonly image: string,
    /** The pool boxes go on (default: the Manager's first), and whether `close` closes the Manager (false: shared with another subject). */
    private readonly on: { pool?: string; ownsManager: boolean } = { ownsManager: true },
  ) {}

  /** Boxes on pool `pool` of a Manager the caller owns and closes (several subjects, one Manager: the Remote rows' local and remote pools). */
  static onPool(name: string, manager: Manager, pool: string, opts: { runId: string; image?: string }): PoolSubject {
    return new PoolSubject(name, manager, { [BENCH_LABEL]: opts.runId }, opts.image ?? BASE_IMAGE, { pool, ownsManager: false });
  }

  /** `name` names the side in the table and, with `managerName`, the Manager instance. */
  static async open(
    name: string,
    pool: Partial<PoolConfig>,
    opts: { managerName: string; dataDir: string; runId: string; image?: string },
  ): Promise<PoolSubject> {
    const manager = new Manager({
      name: `${opts.managerName}-${name}`,
      pools: [{ name: 'local', addr: 'local', maxPerUser: 0, ...pool }], // a benchmark holds more boxes than one owner may by default
      dataDir: join(opts.dataDir, name),
      cleanupIntervalMs: 0,
    });
    await manager.start();
    return new PoolSubject(name, manager, { [BENCH_LABEL]: opts.runId }, opts.image ?? BASE_IMAGE);
  }

  /** `extra`: more of the box's options (an owner and a workspace to mount), beside the subject's own. */
  async create(extra: Omit<CreateOptions, 'image' | 'labels' | 'pool'> = {}): Promise<PoolRef> {
    const box = await this.manager.create({ ...extra, image: this.image, labels: this.labels, ...(this.on.pool ? { pool: this.on.pool } : {}) });
    return { id: box.id, box };
  }
  async exec(ref: PoolRef, cmd: string[]): Promise<ExecOutcome> {
    const r = await ref.box.exec(cmd);
    return { exitCode: r.exitCode, stdoutBytes: r.stdout.length };
  }
  async info(ref: PoolRef): Promise<void> {
    await ref.box.info();
  }
  stop(ref: PoolRef): Promise<void> {
    return ref.box.stop();
  }
  start(ref: PoolRef): Promise<void> {
    return ref.box.start();
  }
  remove(ref: PoolRef): Promise<void> {
    return ref.box.remove();
  }
  /** The warm pool as it stands (empty for a pool without templates). */
  warm(): Promise<WarmInfo[]> {
    return this.manager.warm();
  }
  /** Until at least one spare is ready (bounded; at once for a pool without templates): a warm op measures a claim, not the refill. */
  async untilSpare(timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (let warm = await this.warm(); warm.length > 0 && warm.every((w) => w.ready === 0); warm = await this.warm()) {
      if (Date.now() > deadline) throw new Error(`${this.name}: no warm spare ready within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  async close(): Promise<void> {
    if (this.on.ownsManager) await this.manager.close();
  }
}
