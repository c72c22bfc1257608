/**
 * sbx serve's budget for buffered exec output held at once (`execOutputBudgetBytes`). Every
 * buffered exec takes a lease: the lease is refused up front when the exec's cap does not fit
 * what is free now, and the memory of its output is taken from the budget as it arrives (a
 * slab at a time, src/runtime/collect-text.ts) and given back when the lease is released,
 * after the answer was written or the exec failed. Leases count what execs hold, not their
 * caps, so many small execs with the default cap run side by side.
 */
import { SbxError } from '../errors.js';
import type { OutputBudget } from '../runtime/types.js';

export const DEFAULT_EXEC_OUTPUT_BUDGET_BYTES = 256 * 1024 * 1024;

export interface OutputLease extends OutputBudget {
  /** Gives back everything this lease took; only the first call counts. */
  release(): void;
}

export class ExecOutputBudget {
  private held = 0;

  constructor(readonly totalBytes: number) {}

  /** Bytes held by the leases open now. */
  get heldBytes(): number {
    return this.held;
  }

  /**
   * A lease for an exec that keeps up to `capBytes` per stream. limit_exceeded (429) when the
   * cap is more than the whole budget, or more than is free now.
   */
  lease(capBytes: number): OutputLease {
    const free = this.totalBytes - this.held;
    if (capBytes > free) {
      const never = capBytes > this.totalBytes;
      const why = never
        ? `maxOutputBytes ${capBytes} is more than this server's budget for buffered exec output (${this.totalBytes} bytes)`
        : `maxOutputBytes ${capBytes} does not fit what is left of this server's budget for buffered exec output (${free} of ${this.totalBytes} bytes free; other execs hold the rest)`;
      throw new SbxError('limit_exceeded', `${why}: lower maxOutputBytes, or use the streaming exec (Accept: text/event-stream, or the WebSocket exec)`, {
        details: { field: 'maxOutputBytes', reason: 'exec_output_budget', maxOutputBytes: capBytes, budgetBytes: this.totalBytes, freeBytes: free },
      });
    }
    let taken = 0;
    let released = false;
    return {
      take: (bytes) => {
        if (released) return 0;
        const n = Math.max(0, Math.min(bytes, this.totalBytes - this.held));
        this.held += n;
        taken += n;
        return n;
      },
      release: () => {
        if (released) return;
        released = true;
        this.held -= taken;
        taken = 0;
      },
    };
  }
}
