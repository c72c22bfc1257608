/**
 * The timeout and abort handling every exec path shares (the engine's exec and the in-box
 * agent's): whichever fires first kills the exec once, and a cancelled exec gets one error shape.
 */
import { SbxError } from '../errors.js';

/**
 * `ended`: the box ended under the exec, whose end the engine then never reported; `lost`: the
 * exec's process ended and the engine lost its exit (both docker/exec.ts).
 */
export type KillReason = 'timeout' | 'aborted' | 'cancelled' | 'ended' | 'lost';

export interface KillWatch {
  reason: KillReason | undefined;
  /** Resolves when a kill starts. */
  fired: Promise<void>;
  /** Resolves when the kill has run (killer done, output closed or cut). */
  done: Promise<void>;
  kill(reason: KillReason): Promise<void>;
  stop(): void;
}

/** Arms the timeout and abort signal of one exec; the first to fire kills it inside the box. */
export function watchForKill(session: { kill(): Promise<void> }, opts: { timeoutMs?: number; signal?: AbortSignal }): KillWatch {
  let fire!: () => void;
  let finish!: () => void;
  const state: KillWatch = {
    reason: undefined,
    fired: new Promise<void>((resolve) => (fire = resolve)),
    done: new Promise<void>((resolve) => (finish = resolve)),
    async kill(reason) {
      if (state.reason) return state.done;
      state.reason = reason;
      state.stop();
      fire();
      await session.kill().finally(finish);
    },
    stop() {
      if (timer) clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
    },
  };
  const onAbort = () => void state.kill('aborted');
  const timer = opts.timeoutMs && opts.timeoutMs > 0 ? setTimeout(() => void state.kill('timeout'), opts.timeoutMs) : undefined;
  if (opts.signal?.aborted) onAbort();
  else opts.signal?.addEventListener('abort', onAbort, { once: true });
  return state;
}

export function abortError(signal: AbortSignal | undefined): SbxError {
  const reason: unknown = signal?.reason;
  return new SbxError('cancelled', `exec aborted: ${reason instanceof Error ? reason.message : String(reason ?? 'aborted')}`, { cause: reason });
}
