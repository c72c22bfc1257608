/**
 * The e2b-compatible control plane under `/e2b/api`: code written for the `e2b` SDK runs against
 * sbx with `E2B_API_URL=<sbx>/e2b/api`. Its routes are the app's `auth: 'key'` routes (the SDK
 * sends `X-API-KEY`, an sbx API key in either spelling, see src/server/keys.ts), its own error body (`{code: <status>,
 * message}`, which the SDK reads), and a 501 for the parts of the e2b API sbx does not serve.
 * Everything else is the Manager, as sbx's own routes use it.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { ServerContext } from '../../context.js';
import { mapError, retryAfterSeconds } from '../../errors.js';
import { MetricsSampler } from './metrics.js';
import { sandboxRoutes } from './sandboxes.js';
import { trafficGate } from './traffic.js';

export const E2B_API_PREFIX = '/e2b/api';

/** Template name → image, when the server config names none; `base` is what the SDK asks for by default. */
export const DEFAULT_E2B_TEMPLATES: Readonly<Record<string, string>> = Object.freeze({ base: 'sbx-e2b:latest' });

export interface E2bApiOptions {
  /** Template name → image (`server.e2b.templates` in the config file). */
  templates?: Record<string, string>;
  /**
   * `server.e2b.publicTraffic`: the ports of e2b sandboxes that do not ask for
   * `network.allowPublicTraffic: false` are reachable by anyone through the proxy, as on e2b's
   * cloud. Default false: every port needs a credential (the sandbox's traffic access token, a
   * key or a signed port token).
   */
  publicTraffic?: boolean;
  /** How often sandboxes are sampled for metrics (tests); default METRICS_INTERVAL_MS. */
  metricsIntervalMs?: number;
}

/** The e2b error body: the SDK turns `code` (a number) and `message` into its error classes. */
function send(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.code(status).type('application/json').send({ code: status, message });
}

/**
 * Registers the control plane under {@link E2B_API_PREFIX} (src/server/e2b/index.ts registers the
 * envd routes beside it: their credential is the sandbox's access token, not a key).
 */
export function e2bApiRoutes(app: FastifyInstance, ctx: ServerContext, opts: E2bApiOptions = {}): void {
  const templates = { ...(opts.templates ?? DEFAULT_E2B_TEMPLATES) };
  const sampler = new MetricsSampler(ctx, opts.metricsIntervalMs);
  sampler.start();
  app.addHook('onClose', async () => sampler.stop());
  (ctx.portGates ??= []).push(trafficGate(ctx, opts.publicTraffic === true));
  void app.register(
    async (api) => {
      api.addHook('onRoute', (route) => {
        // sbx's own API is what /openapi.json describes; this one is e2b's (see docs/e2b.md).
        route.schema = { ...(route.schema ?? {}), hide: true };
      });
      api.setErrorHandler(async (err, req, reply) => {
        const mapped = mapError(err);
        ctx.metrics.errors.inc({ code: mapped.error.code });
        if (mapped.status >= 500 && mapped.error.code === 'internal') ctx.log.error({ reqId: req.id, err }, 'internal error');
        const retryAfter = retryAfterSeconds(mapped.error);
        if (retryAfter) reply.header('retry-after', retryAfter);
        return send(reply, mapped.status, mapped.error.message);
      });
      // Templates (beyond deleting a snapshot, snapshots.ts), volumes, secrets, network updates:
      // an answer the SDK shows as it is ("501: …"), rather than a 404 it would read as "no such sandbox".
      api.setNotFoundHandler(async (req, reply) => {
        const path = req.url.split('?')[0]!.slice(E2B_API_PREFIX.length);
        return send(reply, 501, `sbx does not implement ${req.method} ${path} of the e2b API (see docs/e2b.md for what it serves)`);
      });
      sandboxRoutes(api, ctx, { templates, publicTraffic: opts.publicTraffic === true, sampler });
    },
    { prefix: E2B_API_PREFIX },
  );
}
