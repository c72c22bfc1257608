/**
 * sbx serve's budget for buffered exec output held at once (`execOutputBudgetBytes`). Every
 * buffered exec takes a lease when it starts, refused up front (429 limit_exceeded) when its
 * cap does not fit what is left. A cap above the default 64 MiB is reserved whole for the
 * exec's run: a large exec either gets all it asked for or is refused before it runs. Caps up
 * to the default are not reserved: their output takes memory from the budget as it arrives (a
 * slab at a time, src/runtime/collect-text.ts), so many small execs run side by side, and when
 * the budget runs dry their output is cut (`truncated`). A lease gives everything back when it
 * is released: after the answer was written, the exec failed, or the client left.
 */
import { SbxError } from '../errors.js';
import { DEFAULT_MAX_OUTPUT_BYTES } from '../runtime/bounds.js';
import type { OutputBudget } from '../runtime/types.js';

export const DEFAULT_EXEC_OUTPUT_BUDGET_BYTES = 256 * 1024 * 1024;

export interface OutputLease extends OutputBudget {
  /** Gives back everything this lease holds; only the first call counts. */
  release(): void;
  /** True once the budget refused this lease memory its cap allowed (its output was cut by the budget). */
  readonly starved: boolean;
}

export class ExecOutputBudget {
  /** Held or reserved by the leases open now. */
  private used = 0;

  constructor(readonly totalBytes: number) {}

  /** Bytes the open leases hold or reserve. */
  get usedBytes(): number {
    return this.used;
  }

  /** A lease for an exec that keeps up to `capBytes` per stream; limit_exceeded when the cap does not fit. */
  lease(capBytes: number): OutputLease {
    const free = this.totalBytes - this.used;
    if (capBytes > free) {
      const never = capBytes > this.totalBytes;
      const why = never
        ? `maxOutputBytes ${capBytes} is more than this server's budget for buffered exec output (${this.totalBytes} bytes)`
        : `maxOutputBytes ${capBytes} does not fit what is left of this server's budget for buffered exec output (${free} of ${this.totalBytes} bytes free; other execs hold the rest)`;
      throw new SbxError('limit_exceeded', `${why}: lower maxOutputBytes, or use the streaming exec (Accept: text/event-stream, or the WebSocket exec)`, {
        details: { field: 'maxOutputBytes', reason: 'exec_output_budget', maxOutputBytes: capBytes, budgetBytes: this.totalBytes, freeBytes: free },
      });
    }
    const reserved = capBytes > DEFAULT_MAX_OUTPUT_BYTES ? capBytes : 0;
    this.used += reserved;
    let taken = 0;
    let released = false;
    let starved = false;
    return {
      take: (bytes) => {
        if (released) return 0;
        // What the lease already counts in `used`: its reservation, or what it took past it.
        const counted = Math.max(taken, reserved);
        let end = taken + bytes;
        if (end > counted) {
          const more = Math.min(end - counted, this.totalBytes - this.used);
          if (more < end - counted) starved = true;
          this.used += more;
          end = counted + more;
        }
        const n = end - taken;
        taken = end;
        return n;
      },
      release: () => {
        if (released) return;
        released = true;
        this.used -= Math.max(taken, reserved);
      },
      get starved() {
        return starved;
      },
    };
  }
}
