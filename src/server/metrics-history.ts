/**
 * The server's recent metrics as a time series (GET /v1/metrics/history, the console's charts):
 * a sampler reads a few of the registry's metrics every `intervalMs` and keeps the last hour of
 * samples in a ring buffer. Rates are the counters' differences between two readings, latency
 * quantiles the request histogram's bucket differences; nothing here touches a box (the box
 * gauge reads the Manager's table, as a /metrics scrape does).
 */
import type { Registry } from 'prom-client';

/** One point of the history: the state at `at` and the rates over the interval that ended then. */
export interface MetricsSample {
  /** When it was read (ISO 8601). */
  at: string;
  /** Boxes registered with the Manager, all pools. */
  boxes: number;
  /** The same by status (as the engine last reported it); statuses with no box are left out. */
  boxesByStatus: Record<string, number>;
  createsPerMin: number;
  removesPerMin: number;
  execsPerMin: number;
  requestsPerMin: number;
  errorsPerMin: number;
  /** Request latency over the interval (HTTP API, every route), from the histogram's buckets; null when no request ended in it. */
  latencyMsP50: number | null;
  latencyMsP95: number | null;
  latencyMsMean: number | null;
  /** Creates that claimed a warm spare. */
  warmHitsPerMin: number;
  /** Warm spares started and unclaimed now, all templates. */
  warmReady: number;
}

export interface MetricsHistoryJson {
  intervalMs: number;
  samples: MetricsSample[];
}

/** The raw numbers of one reading: counters as totals since the server started. */
export interface Reading {
  atMs: number;
  boxesByStatus: Record<string, number>;
  creates: number;
  removes: number;
  execs: number;
  errors: number;
  warmHits: number;
  warmReady: number;
  /** The request histogram summed over its labels: cumulative count per upper bound (seconds, Infinity last), its sum and count. */
  latency: { buckets: Array<[number, number]>; sum: number; count: number };
}

export const DEFAULT_HISTORY_INTERVAL_MS = 10_000;
export const HISTORY_KEEP_MS = 3_600_000;
/** At most this many samples, whatever the interval (a test's small interval keeps less than an hour). */
const MAX_SAMPLES = 3600;

/** A fixed-size ring: push drops the oldest once full. */
export class Ring<T> {
  private readonly items: T[] = [];
  private start = 0;
  constructor(readonly capacity: number) {
    if (!(capacity >= 1)) throw new RangeError('capacity must be at least 1');
  }
  push(item: T): void {
    if (this.items.length < this.capacity) this.items.push(item);
    else {
      this.items[this.start] = item;
      this.start = (this.start + 1) % this.capacity;
    }
  }
  get size(): number {
    return this.items.length;
  }
  /** Oldest first. */
  toArray(): T[] {
    return [...this.items.slice(this.start), ...this.items.slice(0, this.start)];
  }
}

type MetricValue = { value: number; labels: Record<string, string | number>; metricName?: string };

async function valuesOf(registry: Registry, name: string): Promise<MetricValue[]> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return [];
  return (await metric.get()).values as MetricValue[];
}

const sum = (values: MetricValue[]): number => values.reduce((s, v) => s + v.value, 0);

/** Reads the metrics the history needs from a ServerMetrics registry (metrics.ts names them). */
export async function readRegistry(registry: Registry, atMs: number): Promise<Reading> {
  const [boxes, creates, removes, execs, errors, warmHits, warmReady, requests] = await Promise.all([
    valuesOf(registry, 'sbx_boxes'),
    valuesOf(registry, 'sbx_box_creates_total'),
    valuesOf(registry, 'sbx_box_removes_total'),
    valuesOf(registry, 'sbx_execs_total'),
    valuesOf(registry, 'sbx_errors_total'),
    valuesOf(registry, 'sbx_warm_hits'),
    valuesOf(registry, 'sbx_warm_spares_ready'),
    valuesOf(registry, 'sbx_http_request_duration_seconds'),
  ]);
  const boxesByStatus: Record<string, number> = {};
  for (const v of boxes) if (v.value > 0) boxesByStatus[String(v.labels['status'])] = (boxesByStatus[String(v.labels['status'])] ?? 0) + v.value;
  const byBound = new Map<number, number>();
  let latencySum = 0;
  let latencyCount = 0;
  for (const v of requests) {
    if (v.metricName?.endsWith('_bucket')) {
      const le = v.labels['le'] === '+Inf' ? Infinity : Number(v.labels['le']);
      byBound.set(le, (byBound.get(le) ?? 0) + v.value);
    } else if (v.metricName?.endsWith('_sum')) latencySum += v.value;
    else if (v.metricName?.endsWith('_count')) latencyCount += v.value;
  }
  return {
    atMs,
    boxesByStatus,
    creates: sum(creates),
    removes: sum(removes),
    execs: sum(execs),
    errors: sum(errors),
    warmHits: sum(warmHits),
    warmReady: sum(warmReady),
    latency: { buckets: [...byBound.entries()].sort((a, b) => a[0] - b[0]), sum: latencySum, count: latencyCount },
  };
}

/**
 * The quantile `q` of a histogram's observations, as Prometheus' histogram_quantile: linear
 * within the bucket it falls in; the highest finite bound when it falls in +Inf. Null when empty.
 */
export function histogramQuantile(q: number, buckets: Array<[number, number]>): number | null {
  const total = buckets.at(-1)?.[1] ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  let prevBound = 0;
  let prevCount = 0;
  for (const [bound, count] of buckets) {
    if (count >= rank) {
      if (bound === Infinity) return prevBound;
      if (count === prevCount) return bound;
      return prevBound + ((bound - prevBound) * (rank - prevCount)) / (count - prevCount);
    }
    prevBound = bound;
    prevCount = count;
  }
  return prevBound;
}

/** A counter's increase; a smaller value (a template or pool gone, its gauge reset) counts from 0. */
const increase = (now: number, before: number): number => (now >= before ? now - before : now);

/** The sample for the interval from `prev` to `cur` (pure: the unit tests drive it). */
export function sampleOf(prev: Reading, cur: Reading): MetricsSample {
  const minutes = Math.max(cur.atMs - prev.atMs, 1) / 60_000;
  const perMin = (now: number, before: number): number => Math.round((increase(now, before) / minutes) * 100) / 100;
  const before = new Map(prev.latency.buckets);
  const buckets = cur.latency.buckets.map(([le, n]): [number, number] => [le, increase(n, before.get(le) ?? 0)]);
  const count = increase(cur.latency.count, prev.latency.count);
  const ms = (s: number | null): number | null => (s === null ? null : Math.round(s * 1e4) / 10);
  return {
    at: new Date(cur.atMs).toISOString(),
    boxes: Object.values(cur.boxesByStatus).reduce((s, n) => s + n, 0),
    boxesByStatus: cur.boxesByStatus,
    createsPerMin: perMin(cur.creates, prev.creates),
    removesPerMin: perMin(cur.removes, prev.removes),
    execsPerMin: perMin(cur.execs, prev.execs),
    requestsPerMin: perMin(cur.latency.count, prev.latency.count),
    errorsPerMin: perMin(cur.errors, prev.errors),
    latencyMsP50: ms(histogramQuantile(0.5, buckets)),
    latencyMsP95: ms(histogramQuantile(0.95, buckets)),
    latencyMsMean: count > 0 ? ms(increase(cur.latency.sum, prev.latency.sum) / count) : null,
    warmHitsPerMin: perMin(cur.warmHits, prev.warmHits),
    warmReady: cur.warmReady,
  };
}

export interface MetricsHistoryOptions {
  intervalMs?: number;
  /** How much history to keep; default an hour. */
  keepMs?: number;
  now?: () => number;
}

/**
 * Samples `read()` every `intervalMs` once started; its timer never keeps the process alive.
 * The first reading is the baseline the first sample's rates are counted from.
 */
export class MetricsHistory {
  readonly intervalMs: number;
  private readonly ring: Ring<MetricsSample>;
  private readonly now: () => number;
  private last: Reading | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;
  private inFlight: Promise<void> | undefined;

  constructor(
    private readonly read: (atMs: number) => Promise<Reading>,
    opts: MetricsHistoryOptions = {},
  ) {
    this.intervalMs = opts.intervalMs ?? DEFAULT_HISTORY_INTERVAL_MS;
    if (!(this.intervalMs >= 10)) throw new RangeError('intervalMs must be at least 10');
    this.ring = new Ring(Math.min(MAX_SAMPLES, Math.ceil((opts.keepMs ?? HISTORY_KEEP_MS) / this.intervalMs)));
    this.now = opts.now ?? Date.now;
  }

  get capacity(): number {
    return this.ring.capacity;
  }

  get running(): boolean {
    return this.timer !== undefined;
  }

  start(): void {
    if (this.timer) return;
    void this.tick();
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Takes one reading now (a tick skips while the one before it still reads). */
  tick(): Promise<void> {
    this.inFlight ??= (async () => {
      try {
        const cur = await this.read(this.now());
        if (this.last) this.ring.push(sampleOf(this.last, cur));
        this.last = cur;
      } catch {
        // A reading that failed (a pool's list threw) leaves a gap; the next tick tries again.
      } finally {
        this.inFlight = undefined;
      }
    })();
    return this.inFlight;
  }

  /** The samples, oldest first; only those after `afterMs` when given. */
  samples(afterMs?: number): MetricsSample[] {
    const all = this.ring.toArray();
    return afterMs === undefined ? all : all.filter((s) => Date.parse(s.at) > afterMs);
  }

  toJSON(afterMs?: number): MetricsHistoryJson {
    return { intervalMs: this.intervalMs, samples: this.samples(afterMs) };
  }
}
