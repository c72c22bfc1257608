import type { ManagedBox } from './box.js';
import type { BoxActivity, CleanupAction } from './policy.js';
import { decideCleanup } from './policy.js';

export type PlannedCleanup = { box: ManagedBox } & Exclude<CleanupAction, { action: 'keep' }>;

/** What the policy table reads of a box at `now`. */
export function cleanupInput(box: ManagedBox, now: number): BoxActivity {
  return {
    policy: box.policy,
    now,
    createdAt: box.record.createdAt,
    lastActive: box.activity.lastActive(now),
    inFlight: box.activity.inFlight,
    execsCompleted: box.activity.execsCompleted,
    // A paused or restarting container is still there, alive: idle rules apply as when running.
    running: box.status === 'running' || box.status === 'paused' || box.status === 'restarting',
    idleTimeoutMs: box.record.idleTimeoutMs,
    idlePauseMs: box.record.idlePauseMs,
    idleArchiveMs: box.record.idleArchiveMs,
    archived: box.status === 'archived',
    archivable: box.archivable,
    paused: box.status === 'paused',
    pausable: box.pausable,
    maxLifetimeMs: box.record.maxLifetimeMs,
    maxLifetimeAction: box.record.maxLifetimeAction,
    restartable: box.restartable,
  };
}

/** What the policy table says to do with each box of one pass. */
export function planCleanup(boxes: ManagedBox[], now: number): PlannedCleanup[] {
  const planned: PlannedCleanup[] = [];
  for (const box of boxes) {
    const decision = decideCleanup(cleanupInput(box, now));
    if (decision.action !== 'keep') planned.push({ box, ...decision });
  }
  return planned;
}

/**
 * The first retry of a deadline action that failed, by the box's timer; each further failure in a
 * row doubles it, up to the cleanup interval (the pass retries it then anyway). Without it a box
 * whose removal failed waited for the next pass; retried at once, it would spin against an engine
 * that keeps refusing.
 */
export const DEADLINE_RETRY_MS = 1_000;

/** When a box whose last `failures` actions in a row failed is tried again: `now` plus the back-off. */
export function retryAt(now: number, failures: number, maxMs: number): number {
  return now + Math.min(maxMs, DEADLINE_RETRY_MS * 2 ** Math.min(failures - 1, 30));
}

/** The longest delay a Node timer takes (2^31-1 ms, about 24.8 days); a later deadline is armed in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * One timer per box, armed for the time the policy table next acts on it (`nextDue`), so a
 * deadline is acted on at the deadline, not at the next pass. A Node timer per box is cheap: about
 * 470 bytes and 2–9 µs to re-arm, measured with 1,000 and 100,000 distinct delays (Node keeps one
 * list per delay under a single libuv timer), so 1,000 boxes cost about half a megabyte. A
 * timer may fire early (a box used since, a clock that differs, a delay longer than a timer takes):
 * `fire` re-checks and arms again; it must never fire late, so whatever can make a deadline
 * sooner arms it again (`arm`). Timers are unref'd: they keep no process alive.
 */
export class DeadlineTimers<K> {
  private readonly timers = new Map<K, { at: number; timer: NodeJS.Timeout }>();

  constructor(
    private readonly now: () => number,
    private readonly fire: (key: K) => void,
  ) {}

  /** Arms `key`'s timer for `at` (epoch ms), replacing the one before; undefined clears it. */
  arm(key: K, at: number | undefined): void {
    const armed = this.timers.get(key);
    if (armed?.at === at) return;
    if (armed) clearTimeout(armed.timer);
    if (at === undefined) {
      this.timers.delete(key);
      return;
    }
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, at - this.now()));
    const timer = setTimeout(() => {
      if (this.timers.get(key)?.timer !== timer) return;
      this.timers.delete(key);
      this.fire(key);
    }, delay);
    timer.unref();
    this.timers.set(key, { at, timer });
  }

  /** Clears every timer. */
  clear(): void {
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }
}

/** Runs a pass every `intervalMs`; one pass at a time, however often it is asked for. */
export class CleanupLoop {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly intervalMs: number,
    private readonly pass: () => Promise<void>,
  ) {}

  start(): void {
    if (this.timer || this.intervalMs <= 0) return;
    this.timer = setInterval(() => void this.runOnce().catch(() => undefined), this.intervalMs);
    this.timer.unref();
  }

  runOnce(): Promise<void> {
    this.running ??= this.pass().finally(() => (this.running = undefined));
    return this.running;
  }

  /** Stops the timer and waits for a pass in progress. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => undefined);
  }
}
