/**
 * Waiting for what a test proves instead of sleeping "long enough": a loaded CI machine makes
 * every fixed wait too short some day, and every elapsed-time bound too tight.
 */
import { setTimeout as sleep } from 'node:timers/promises';

/** Long enough that only a hang reaches it, never a slow machine. */
export const HANG_MS = 60_000;

/**
 * Polls `check` until it returns a value other than `undefined`/`false` and returns that value;
 * throws naming `what` only when `timeoutMs` (default {@link HANG_MS}) passed first: a hang.
 *
 * @example
 * await waitFor(async () => (await engine.list(sel)).length === 0, { what: 'the container to be removed' });
 */
export async function waitFor<T>(
  check: () => T | false | undefined | Promise<T | false | undefined>,
  opts: { what: string; timeoutMs?: number; intervalMs?: number },
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? HANG_MS);
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${opts.timeoutMs ?? HANG_MS} ms waiting for ${opts.what}`);
    await sleep(opts.intervalMs ?? 25);
  }
}

/**
 * `promise`, or an error naming `what` once `timeoutMs` (default {@link HANG_MS}) passed: an
 * event a test waits for fails the test with a message instead of hanging the run.
 */
export async function within<T>(promise: Promise<T>, what: string, timeoutMs = HANG_MS): Promise<T> {
  const timer = new AbortController();
  try {
    return await Promise.race([
      promise,
      sleep(timeoutMs, undefined, { signal: timer.signal }).then(() => {
        throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      }),
    ]);
  } finally {
    timer.abort();
  }
}
