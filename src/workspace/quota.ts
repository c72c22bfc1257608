/**
 * Quota bookkeeping of one workspace. Usage is measured by a contained walk and cached; API
 * writes reserve bytes before they write them and adjust the cache after, so concurrent writes
 * cannot jointly overshoot. Writes a box makes through its mount bypass this and show up at the
 * next measurement (the cache is re-measured when older than `maxAgeMs`).
 */
import { SbxError } from '../errors.js';
import type { WorkspaceUsage } from './types.js';

/** Measures bytes and files of a workspace (a full contained walk). */
export type MeasureUsage = () => Promise<{ bytes: number; files: number }>;

const DEFAULT_MAX_AGE_MS = 10_000;

/**
 * Bytes an in-flight API write has claimed. `add` throws `quota_exceeded` before the bytes are
 * written; exactly one of `commit` / `release` ends it.
 *
 * @example
 * const r = await tracker.reserve(oldSize);
 * try { await write((n) => r.add(n)); r.commit(); } catch (e) { r.release(); throw e; }
 */
export interface Reservation {
  add(bytes: number): void;
  /** The write landed: usage grows by what was added minus `credit` (the bytes it replaced). */
  commit(options?: { filesAdded?: number; exact?: boolean }): void;
  release(): void;
}

/**
 * Cached usage and quota checks for one workspace.
 *
 * @example
 * const tracker = new UsageTracker(() => measureTree(root), 1 << 30);
 * console.log(await tracker.measure());
 */
export class UsageTracker {
  private cached: { bytes: number; files: number; at: number } | undefined;
  private measuring: Promise<{ bytes: number; files: number }> | undefined;
  private reserved = 0;

  constructor(
    private readonly measureUsage: MeasureUsage,
    readonly quotaBytes: number | undefined,
    private readonly workspaceId: string,
    private readonly maxAgeMs = DEFAULT_MAX_AGE_MS,
  ) {}

  /** A fresh measurement (also refreshes the cache). */
  async measure(): Promise<WorkspaceUsage> {
    const { bytes, files } = await this.remeasure();
    return this.quotaBytes === undefined ? { bytes, files } : { bytes, files, quotaBytes: this.quotaBytes };
  }

  /**
   * Starts a write that will replace `creditBytes` of existing content. Without a quota this
   * never measures and never refuses.
   */
  async reserve(creditBytes = 0): Promise<Reservation> {
    const quota = this.quotaBytes;
    if (quota !== undefined && (!this.cached || Date.now() - this.cached.at > this.maxAgeMs)) await this.remeasure();
    let added = 0;
    let open = true;
    const finish = (): void => {
      if (!open) return;
      open = false;
      this.reserved -= added;
    };
    return {
      add: (bytes: number) => {
        if (quota !== undefined) {
          const used = this.cached?.bytes ?? 0;
          const wouldUse = used - creditBytes + this.reserved + bytes;
          if (wouldUse > quota) {
            throw new SbxError(
              'quota_exceeded',
              `workspace ${this.workspaceId} would use ${wouldUse} bytes, over its quota of ${quota}; free some space or raise the quota`,
              {
                details: { quotaBytes: quota, usedBytes: used, reservedBytes: this.reserved },
              },
            );
          }
        }
        added += bytes;
        this.reserved += bytes;
      },
      commit: (options = {}) => {
        const grew = added - creditBytes;
        finish();
        if (options.exact === false) this.invalidate();
        else this.adjust(grew, options.filesAdded ?? 0);
      },
      release: finish,
    };
  }

  /** Applies a change the API made (e.g. a removal) to the cached usage. */
  adjust(bytes: number, files: number): void {
    if (!this.cached) return;
    this.cached.bytes = Math.max(0, this.cached.bytes + bytes);
    this.cached.files = Math.max(0, this.cached.files + files);
  }

  /** Forget the cache; the next quota check measures again. */
  invalidate(): void {
    this.cached = undefined;
  }

  private remeasure(): Promise<{ bytes: number; files: number }> {
    // One walk at a time; concurrent callers share it.
    this.measuring ??= this.measureUsage()
      .then((usage) => {
        this.cached = { ...usage, at: Date.now() };
        return usage;
      })
      .finally(() => {
        this.measuring = undefined;
      });
    return this.measuring;
  }
}
