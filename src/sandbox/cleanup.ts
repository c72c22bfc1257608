import type { ManagedBox } from './box.js';
import type { CleanupAction } from './policy.js';
import { decideCleanup } from './policy.js';

export type PlannedCleanup = { box: ManagedBox } & Exclude<CleanupAction, { action: 'keep' }>;

/** What the policy table says to do with each box of one pass. */
export function planCleanup(boxes: ManagedBox[], now: number): PlannedCleanup[] {
  const planned: PlannedCleanup[] = [];
  for (const box of boxes) {
    const decision = decideCleanup({
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
    });
    if (decision.action !== 'keep') planned.push({ box, ...decision });
  }
  return planned;
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
