/**
 * A clock that moves only when a test says so. The core takes a plain `() => number`
 * (milliseconds since the epoch, like `Date.now`); `now` is an arrow property, so it can be
 * handed over unbound.
 *
 * @example
 * const clock = new ManualClock();
 * const rt = new MemoryRuntime({ clock: clock.now });
 * clock.advance(30 * 60_000); // half an hour later, at once
 */
export class ManualClock {
  /** 2025-01-01T00:00:00.000Z: a fixed start, so timestamps in tests are the same every run. */
  static readonly DEFAULT_START = Date.UTC(2025, 0, 1);

  private ms: number;

  constructor(startMs: number = ManualClock.DEFAULT_START) {
    this.ms = checked(startMs, 'startMs');
  }

  /** The current time in ms since the epoch. Bound: pass `clock.now` where a `() => number` is wanted. */
  readonly now = (): number => this.ms;

  /** Moves the clock forward by `ms` (never backward: use `set` for that). */
  advance(ms: number): number {
    if (checked(ms, 'ms') < 0) throw new RangeError(`advance(${ms}): a clock only advances; use set() to go back`);
    this.ms += ms;
    return this.ms;
  }

  /** Sets the clock to `ms` since the epoch, backward or forward. */
  set(ms: number): number {
    this.ms = checked(ms, 'ms');
    return this.ms;
  }

  /** The current time as an ISO 8601 string, for comparing with timestamps a runtime reports. */
  iso(): string {
    return new Date(this.ms).toISOString();
  }
}

function checked(ms: number, name: string): number {
  if (!Number.isFinite(ms)) throw new RangeError(`${name} must be a finite number of milliseconds, got ${ms}`);
  return ms;
}
