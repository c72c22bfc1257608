import type { Logger } from 'pino';
import type { ContainerEvent, Runtime } from '../runtime/types.js';

const MIN_BACKOFF_MS = 200;
const MAX_BACKOFF_MS = 5000;

export interface PoolWatchHandlers {
  onEvent(e: ContainerEvent): void;
  /** The engine answers again after the stream broke: time to reconcile. */
  onReconnect(): Promise<void>;
  onDisconnect(err: unknown): void;
}

/**
 * Follows one pool's container events so box status stays true between cleanup passes, and
 * notices an engine that went away and came back (the event stream breaks, then reconnects).
 */
export class PoolWatch {
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;

  constructor(
    private readonly runtime: Runtime,
    private readonly labels: Record<string, string>,
    private readonly handlers: PoolWatchHandlers,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
  }

  private async run(): Promise<void> {
    const signal = this.abort.signal;
    let backoff = MIN_BACKOFF_MS;
    let broken = false;
    while (!signal.aborted) {
      if (broken) {
        // Reconciled before events are followed again: a stream that connects while the
        // reconcile failed (an engine still starting) would otherwise wait for an event to retry.
        try {
          await this.runtime.ping();
          await this.handlers.onReconnect();
          broken = false;
          backoff = MIN_BACKOFF_MS;
        } catch (err) {
          this.log.debug({ err }, 'engine still unreachable');
          await sleep(backoff, signal);
          backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
          continue;
        }
      }
      try {
        for await (const e of this.runtime.events({ labels: this.labels, signal })) {
          backoff = MIN_BACKOFF_MS;
          this.handlers.onEvent(e);
        }
        if (signal.aborted) return;
      } catch (err) {
        if (signal.aborted) return;
        if (!broken) this.handlers.onDisconnect(err);
        broken = true;
      }
      await sleep(backoff, signal);
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    t.unref();
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}
