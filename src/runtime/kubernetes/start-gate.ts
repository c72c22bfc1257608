/**
 * At most N execs starting at once on one runtime. Starting is what is expensive (the kubelet asks
 * the container runtime to exec, a `runc exec` each): 50 execs at once on the 2-core test machine
 * took 28-54 s, as containerd's shim timed out on its own state calls ("context deadline
 * exceeded"), against 3 s with at most 4-16 starting at once. A slot is held only while an exec
 * starts (until its first message or STARTED_AFTER_MS), never for its whole life, so long-running
 * streams do not block new execs.
 */
export const STARTED_AFTER_MS = 1000;

export class StartGate {
  private active = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly limit: number) {}

  /**
   * Waits for a slot; the returned function gives it back (once, whatever calls it). A slot given
   * back goes straight to the first waiter (the count is not dropped and taken again), so a caller
   * arriving before that waiter resumes cannot slip in past the limit.
   */
  async acquire(): Promise<() => void> {
    if (this.active < this.limit) this.active++;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next();
      else this.active--;
    };
  }
}
