/**
 * `GET /sandboxes/:id/metrics?start&end`: CPU, memory and disk of an e2b sandbox over time, as
 * e2b's API answers them. sbx samples the engine's stats (LocalBox.stats: Runtime.stats) of every
 * running e2b sandbox every METRICS_INTERVAL_MS (e2b's own period) into a bounded ring per
 * sandbox, and once at create (and fork), so a fresh sandbox has a sample at once. Sampling is a
 * read: it does not count as use and never wakes a paused sandbox (a paused one is not sampled);
 * a sandbox's ring goes with it.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { invalidArgument } from '../../../errors.js';
import type { LocalBox, PoolInfo } from '../../../sandbox/index.js';
import { ActionLimiter } from '../../../util/concurrency.js';
import type { ServerContext } from '../../context.js';
import { TEMPLATE_LABEL } from './body.js';
import { one } from './list.js';

/** How often a running sandbox is sampled (e2b's period). */
export const METRICS_INTERVAL_MS = 5_000;
/** Samples kept per sandbox: one hour at the interval. */
export const METRICS_KEPT = 720;
/** Samples taken at once, by the passes, creates and reads together (each engine call takes about a second: the engine's own CPU window). */
const SAMPLE_CONCURRENCY = 4;
/** A sample the engine has not answered by then is skipped, so one stuck call cannot stall every sandbox's metrics. */
const SAMPLE_TIMEOUT_MS = 10_000;

interface Sample {
  atMs: number;
  /** Percent of one core, as the engine says. */
  cpuPercent: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
}

/** e2b's SandboxMetric. */
export interface SandboxMetric {
  timestamp: string;
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  /** Optional in the npm SDK's type, required by the Python SDK 2.63's. */
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

/** The CPUs a sandbox has: its pool's default per box (sbx sets none per sandbox), at least one. */
export function cpuCountOf(pool: PoolInfo | undefined): number {
  return Math.max(1, Math.ceil(pool?.cpus ?? 1));
}

export class MetricsSampler {
  private readonly rings = new Map<string, Sample[]>();
  /** Every sample goes through it: the passes, a new sandbox's first and a read's. */
  private readonly limiter = new ActionLimiter(SAMPLE_CONCURRENCY);
  /** The sample of a box in flight: a second ask for it waits for that one. */
  private readonly inFlight = new Map<string, Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private passing = false;

  constructor(
    private readonly ctx: ServerContext,
    private readonly intervalMs = METRICS_INTERVAL_MS,
  ) {}

  start(): void {
    this.timer ??= setInterval(() => void this.pass(), this.intervalMs).unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.rings.clear();
  }

  /** One sample of every running e2b sandbox; the rings of sandboxes that are gone are dropped. */
  async pass(): Promise<void> {
    if (this.passing) return; // the previous pass is still asking the engine
    this.passing = true;
    try {
      const boxes = (await this.ctx.manager.list()).filter((b) => b.labels[TEMPLATE_LABEL] !== undefined);
      const live = new Set(boxes.map((b) => b.id));
      for (const id of this.rings.keys()) if (!live.has(id)) this.rings.delete(id);
      await Promise.all(boxes.filter((b) => b.status === 'running').map((b) => this.sample(b)));
    } catch (err) {
      this.ctx.log.warn({ err }, 'e2b metrics: a sampling pass failed');
    } finally {
      this.passing = false;
    }
  }

  /**
   * Takes one sample of `box` (a read: no touch), or joins the one in flight. A box gone meanwhile
   * leaves no ring; an engine that does not answer within SAMPLE_TIMEOUT_MS leaves no sample.
   */
  sample(box: LocalBox): Promise<void> {
    let running = this.inFlight.get(box.id);
    if (!running) {
      running = this.limiter.run(() => this.take(box)).finally(() => this.inFlight.delete(box.id));
      this.inFlight.set(box.id, running);
    }
    return running;
  }

  private async take(box: LocalBox): Promise<void> {
    let s;
    let timer: NodeJS.Timeout | undefined;
    try {
      s = await Promise.race([
        box.stats(),
        new Promise<never>((_resolve, reject) => {
          timer = setTimeout(() => reject(new Error('the engine did not answer')), SAMPLE_TIMEOUT_MS);
        }),
      ]);
    } catch {
      return; // removed or archived under the pass, or a stuck engine: no sample this time
    } finally {
      clearTimeout(timer);
    }
    // Paused (or stopped) while the engine measured it: a paused sandbox has no samples.
    if (box.status !== 'running') return;
    const ring = this.rings.get(box.id) ?? [];
    ring.push({
      atMs: Date.now(),
      cpuPercent: s.cpuPercent ?? 0,
      memUsed: s.memoryBytes ?? 0,
      memTotal: s.memoryLimitBytes ?? 0,
      memCache: s.memoryCacheBytes ?? 0,
      diskUsed: s.diskUsedBytes ?? 0,
    });
    if (ring.length > METRICS_KEPT) ring.splice(0, ring.length - METRICS_KEPT);
    this.rings.set(box.id, ring);
  }

  /** A first sample of a new sandbox, without holding up the answer that made it. */
  sampleSoon(box: LocalBox): void {
    void this.sample(box);
  }

  /** The samples of `box` in [startMs, endMs]; a running box with none yet is sampled first. */
  async read(box: LocalBox, startMs: number, endMs: number, cpuCount: number): Promise<SandboxMetric[]> {
    if (!this.rings.get(box.id)?.length && box.status === 'running') await this.sample(box);
    return (this.rings.get(box.id) ?? [])
      .filter((s) => s.atMs >= startMs && s.atMs <= endMs)
      .map((s) => ({
        timestamp: new Date(s.atMs).toISOString(),
        timestampUnix: Math.floor(s.atMs / 1000),
        cpuCount,
        // e2b's percentage is of the sandbox's CPUs, the engine's of one core.
        cpuUsedPct: Math.round((s.cpuPercent / cpuCount) * 100) / 100,
        memUsed: s.memUsed,
        memTotal: s.memTotal,
        memCache: s.memCache,
        diskUsed: s.diskUsed,
        // sbx sets no disk size per sandbox (as diskSizeMB is 0 in its details).
        diskTotal: 0,
      }));
  }
}

/** `start`/`end` in Unix seconds, as the SDKs send them (rounded), or the whole range. */
function seconds(q: Record<string, unknown>, name: 'start' | 'end'): number | undefined {
  const text = one(q, name);
  if (text === undefined || text === '') return undefined;
  if (!/^\d{1,12}$/.test(text)) throw invalidArgument(name, 'must be a Unix time in whole seconds');
  return Number(text) * 1000;
}

export interface MetricsRoutesOptions {
  sampler: MetricsSampler;
  sandboxFor(req: FastifyRequest, id: string): Promise<LocalBox>;
}

export function metricsRoutes(api: FastifyInstance, ctx: ServerContext, opts: MetricsRoutesOptions): void {
  api.get('/sandboxes/:id/metrics', async (req: FastifyRequest<{ Params: { id: string } }>) => {
    const box = await opts.sandboxFor(req, req.params.id);
    const q = req.query as Record<string, unknown>;
    // `end` is a whole second: a sample taken within it is in range.
    const end = seconds(q, 'end');
    const pool = (await ctx.manager.pools()).find((p) => p.name === box.pool);
    return opts.sampler.read(box, seconds(q, 'start') ?? 0, end === undefined ? Infinity : end + 999, cpuCountOf(pool));
  });
}
