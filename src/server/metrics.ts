/**
 * The server's Prometheus metrics, on a registry of its own (several servers can live in one
 * process, e.g. in tests). Gauges about boxes are read from the Manager at scrape time without
 * touching any box (monitoring never counts as activity).
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { BOX_STATUSES } from '../sandbox/types.js';
import type { WarmInfo } from '../sandbox/types.js';

export interface MetricsSource {
  /** Every registered box's pool and last known status (kept by engine events, no inspect). */
  boxes(): Promise<Array<{ pool: string; status: string }>>;
  /** Pools and whether their last check answered. */
  pools(): Promise<Array<{ name: string; connected: boolean }>>;
  /** The Manager's cleanup counters, when it has them. */
  cleanupStats(): Record<string, number> | undefined;
  /** The warm pools' templates as they stand (Manager.warm()). */
  warm(): Promise<WarmInfo[]>;
  /** The budget for buffered exec output: what open execs hold or reserve, and its size. */
  execOutput?(): { usedBytes: number; totalBytes: number };
}

export class ServerMetrics {
  readonly registry = new Registry();
  readonly requests: Histogram<'method' | 'route' | 'status'>;
  readonly creates: Counter<'pool'>;
  readonly removes: Counter<'pool'>;
  readonly errors: Counter<'code'>;
  readonly execs: Counter<'transport' | 'outcome'>;
  readonly execDuration: Histogram<'transport'>;
  readonly heartbeats: Counter<'transport'>;
  readonly workspaceBytes: Counter<'direction'>;
  readonly authFailures: Counter;
  readonly openStreams: Gauge<'transport'>;
  readonly engineCalls: Histogram<'op' | 'outcome'>;

  constructor(source: MetricsSource) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: 'sbx_process_' });
    this.requests = new Histogram({
      name: 'sbx_http_request_duration_seconds',
      help: 'HTTP API request duration by route pattern and status',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
    this.creates = new Counter({ name: 'sbx_box_creates_total', help: 'Boxes created through the API', labelNames: ['pool'], registers });
    this.removes = new Counter({ name: 'sbx_box_removes_total', help: 'Boxes removed through the API', labelNames: ['pool'], registers });
    this.errors = new Counter({ name: 'sbx_errors_total', help: 'Error responses by sbx error code', labelNames: ['code'], registers });
    this.execs = new Counter({
      name: 'sbx_execs_total',
      help: 'Execs by transport (http, sse, ws) and outcome',
      labelNames: ['transport', 'outcome'],
      registers,
    });
    this.execDuration = new Histogram({
      name: 'sbx_exec_duration_seconds',
      help: 'Exec duration from request to exit',
      labelNames: ['transport'],
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    });
    this.heartbeats = new Counter({
      name: 'sbx_heartbeats_total',
      help: 'Heartbeats received by transport (http, grpc)',
      labelNames: ['transport'],
      registers,
    });
    this.workspaceBytes = new Counter({
      name: 'sbx_workspace_bytes_total',
      help: 'Workspace file bytes moved through the API (read, written)',
      labelNames: ['direction'],
      registers,
    });
    this.authFailures = new Counter({ name: 'sbx_auth_failures_total', help: 'Failed authentications', registers });
    this.openStreams = new Gauge({ name: 'sbx_open_streams', help: 'Exec streams open now (sse, ws)', labelNames: ['transport'], registers });
    this.engineCalls = new Histogram({
      name: 'sbx_engine_call_duration_seconds',
      help: 'Runtime (engine) calls by operation and outcome (ok or the error code); exec is the whole exec, execStream until the stream is ready',
      labelNames: ['op', 'outcome'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    new Gauge({
      name: 'sbx_boxes',
      help: 'Boxes registered with the Manager, by pool and status (as the engine last reported it)',
      labelNames: ['pool', 'status'],
      registers,
      async collect() {
        const [pools, boxes] = await Promise.all([source.pools(), source.boxes()]);
        this.reset();
        // Every pool shows every status, 0 included, so a series never vanishes when it empties.
        for (const p of pools) for (const status of BOX_STATUSES) this.set({ pool: p.name, status }, 0);
        for (const b of boxes) this.inc({ pool: b.pool, status: b.status });
      },
    });
    new Gauge({
      name: 'sbx_pool_connected',
      help: '1 when the pool answered its last check',
      labelNames: ['pool'],
      registers,
      async collect() {
        const pools = await source.pools();
        this.reset();
        for (const p of pools) this.set({ pool: p.name }, p.connected ? 1 : 0);
      },
    });
    // Warm pools: one gauge per counter of Manager.warm(), by pool and template key (the image too, for people).
    const warmFields = [
      ['sbx_warm_spares_ready', 'Warm spares started and unclaimed', 'ready'],
      ['sbx_warm_size', 'Spares a warm template keeps', 'size'],
      ['sbx_warm_hits', 'Creates that claimed a warm spare', 'hits'],
      ['sbx_warm_misses', 'Creates that fitted a warm template but found no spare, and went cold', 'misses'],
      ['sbx_warm_replaced', 'Warm spares that died or vanished and were replaced', 'replaced'],
      ['sbx_warm_failures', 'Warm spares that could not be made', 'failures'],
      ['sbx_warm_last_claim_seconds', "Duration of the pool's last warm claim", 'lastClaimMs'],
    ] as const;
    for (const [name, help, field] of warmFields) {
      new Gauge({
        name,
        help,
        labelNames: ['pool', 'template', 'image'],
        registers,
        async collect() {
          this.reset();
          for (const w of await source.warm()) {
            const v = w[field];
            if (v !== undefined) this.set({ pool: w.pool, template: w.key, image: w.image }, field === 'lastClaimMs' ? v / 1000 : v);
          }
        },
      });
    }
    new Gauge({
      name: 'sbx_exec_output_bytes',
      help: 'Buffered exec output the server holds or has reserved now, and its budget (execOutputBudget)',
      labelNames: ['kind'],
      registers,
      collect() {
        const b = source.execOutput?.();
        if (!b) return;
        this.set({ kind: 'used' }, b.usedBytes);
        this.set({ kind: 'budget' }, b.totalBytes);
      },
    });
    new Gauge({
      name: 'sbx_cleanup_actions',
      help: "The Manager's cleanup counters since it started, by reason",
      labelNames: ['reason'],
      registers,
      collect() {
        this.reset();
        for (const [reason, n] of Object.entries(source.cleanupStats() ?? {})) this.set({ reason }, n);
      },
    });
  }
}
