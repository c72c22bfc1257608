/**
 * Runs `fn` over `items` with at most `limit` calls in flight, collecting settled results.
 * The engines sbx talks to slow down past a handful of parallel calls on small machines.
 */
export async function mapSettled<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<PromiseSettledResult<R>[]> {
  const results: PromiseSettledResult<R>[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      try {
        results[i] = { status: 'fulfilled', value: await fn(items[i] as T) };
      } catch (reason) {
        results[i] = { status: 'rejected', reason };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

/**
 * At most `limit` calls of `run` in flight, shared by every caller that holds it (mapSettled bounds
 * one batch only; batches each bounded on their own add up). The Manager's cleanup actions of one
 * pool share one: the pass and every batch of deadline timers (1,000 boxes created over ten
 * minutes come due at 1,000 moments). e2b metrics samples share another. A slot a finished action leaves goes straight to the
 * first in line (no count dropped and taken again), so a caller arriving meanwhile cannot slip in
 * past the limit; waiters are served in order.
 */
export class ActionLimiter {
  private active = 0;
  private readonly queue: Array<() => void> = [];

  constructor(private readonly limit: number) {}

  /** Calls waiting for a slot (every slot taken). */
  get waiting(): number {
    return this.queue.length;
  }

  /** Whether a call now would wait. */
  get full(): boolean {
    return this.active >= this.limit;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active < this.limit) this.active++;
    else await new Promise<void>((resolve) => this.queue.push(resolve));
    try {
      return await fn();
    } finally {
      const next = this.queue.shift();
      if (next) next();
      else this.active--;
    }
  }
}
