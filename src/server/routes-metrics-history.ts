/**
 * The server's recent metrics as time series for the console's charts (GET /v1/metrics/history,
 * any key: the same numbers /metrics gives publicly), and the warm pools as they stand
 * (GET /v1/warm, admin: PoolInfo.warm has the templates, only Manager.warm() their spares).
 * The sampler starts when the app is ready and stops when it closes.
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { requireAdmin, requireKey } from './auth.js';
import type { ServerContext } from './context.js';
import { MetricsHistory, readRegistry } from './metrics-history.js';
import { isoTime, replies } from './schemas.js';

const perMin = z.number().describe('per minute over the interval that ended at `at`');
const latency = z.number().nullable().describe('ms; null when no request ended in the interval');

const MetricsSampleSchema = z
  .object({
    at: isoTime,
    boxes: z.number().int(),
    boxesByStatus: z.record(z.string(), z.number().int()).describe('statuses with no box left out'),
    createsPerMin: perMin,
    removesPerMin: perMin,
    execsPerMin: perMin,
    requestsPerMin: perMin,
    errorsPerMin: perMin,
    latencyMsP50: latency,
    latencyMsP95: latency,
    latencyMsMean: latency,
    warmHitsPerMin: perMin,
    warmReady: z.number().int().describe('warm spares ready now, all templates'),
  })
  .meta({ id: 'MetricsSample' });

const WarmInfoSchema = z
  .object({
    pool: z.string(),
    image: z.string(),
    key: z.string().describe("the template's shape key"),
    size: z.number().int(),
    ready: z.number().int(),
    hits: z.number().int(),
    misses: z.number().int(),
    replaced: z.number().int(),
    failures: z.number().int(),
    lastClaimMs: z.number().optional(),
  })
  .meta({ id: 'WarmInfo' });

export function metricsHistoryRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  const history = new MetricsHistory((atMs) => readRegistry(ctx.metrics.registry, atMs), {
    ...(ctx.metricsHistoryIntervalMs !== undefined ? { intervalMs: ctx.metricsHistoryIntervalMs } : {}),
  });
  app.addHook('onReady', async () => history.start());
  app.addHook('onClose', async () => history.stop());

  r.get(
    '/v1/metrics/history',
    {
      schema: {
        summary: "The server's metrics over the last hour, one sample per interval (any key)",
        tags: ['metrics'],
        querystring: z.object({ after: isoTime.optional().describe('only samples taken after this time') }).strict(),
        response: replies({ 200: z.object({ intervalMs: z.number().int(), samples: z.array(MetricsSampleSchema) }) }),
      },
    },
    async (req) => {
      requireKey(req.caller);
      const after = req.query.after === undefined ? undefined : Date.parse(req.query.after);
      return history.toJSON(after !== undefined && Number.isFinite(after) ? after : undefined);
    },
  );

  r.get(
    '/v1/warm',
    {
      schema: {
        summary: "The warm pools' templates and their spares now (admin)",
        tags: ['pools'],
        response: replies({ 200: z.object({ templates: z.array(WarmInfoSchema) }) }),
      },
    },
    async (req) => {
      requireAdmin(req.caller);
      return { templates: await ctx.manager.warm() };
    },
  );
}
