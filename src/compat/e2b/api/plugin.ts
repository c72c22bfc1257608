/**
 * The e2b-compatible control plane under `/e2b/api`: code written for the `e2b` SDK runs against
 * sbx with `E2B_API_URL=<sbx>/e2b/api`. Its own auth (the SDK sends `X-API-KEY`, which is an sbx
 * API key in either spelling, see src/server/keys.ts), its own error body (`{code: <status>,
 * message}`, which the SDK reads), and a 501 for the parts of the e2b API sbx does not serve.
 * Everything else is the Manager, as sbx's own routes use it.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SbxError } from '../../../errors.js';
import type { ServerContext } from '../../../server/context.js';
import { mapError, retryAfterSeconds } from '../../../server/errors.js';
import { sandboxRoutes } from './sandboxes.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The e2b control plane: its plugin authenticates X-API-KEY, not the app's hook. */
    e2bApi?: boolean;
  }
}

export const E2B_API_PREFIX = '/e2b/api';

/** Template name → image, when the server config names none; `base` is what the SDK asks for by default. */
export const DEFAULT_E2B_TEMPLATES: Readonly<Record<string, string>> = Object.freeze({ base: 'sbx-e2b:latest' });

export interface E2bApiOptions {
  /** Template name → image (`server.e2b.templates` in the config file). */
  templates?: Record<string, string>;
}

/** The e2b error body: the SDK turns `code` (a number) and `message` into its error classes. */
function send(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.code(status).type('application/json').send({ code: status, message });
}

async function authenticate(req: FastifyRequest, ctx: ServerContext): Promise<void> {
  const key = req.headers['x-api-key'];
  try {
    req.caller = await req.server.sbxPortAuth.limiter.guard(req.ip, () => {
      const principal = typeof key === 'string' ? ctx.keys.verify(key) : undefined;
      if (principal) return principal;
      throw new SbxError(
        'unauthorized',
        typeof key === 'string' ? 'X-API-KEY is not a valid key (unknown, revoked or mistyped)' : 'missing X-API-KEY: give an sbx API key (e2b_… or sbxk_…)',
      );
    });
  } catch (err) {
    ctx.metrics.authFailures.inc();
    throw err;
  }
}

/**
 * Registers the control plane under {@link E2B_API_PREFIX}. The envd routes (src/compat/e2b/envd)
 * are registered beside it, not inside: they authenticate with the sandbox's access token.
 */
export function e2bApiRoutes(app: FastifyInstance, ctx: ServerContext, opts: E2bApiOptions = {}): void {
  const templates = { ...(opts.templates ?? DEFAULT_E2B_TEMPLATES) };
  void app.register(
    async (api) => {
      api.addHook('onRoute', (route) => {
        route.config = { ...(route.config ?? {}), e2bApi: true };
        // sbx's own API is what /openapi.json describes; this one is e2b's (see docs/e2b.md).
        route.schema = { ...(route.schema ?? {}), hide: true };
      });
      api.addHook('onRequest', async (req) => {
        if (req.routeOptions.url) await authenticate(req, ctx);
      });
      api.setErrorHandler(async (err, req, reply) => {
        const mapped = mapError(err);
        ctx.metrics.errors.inc({ code: mapped.error.code });
        if (mapped.status >= 500 && mapped.error.code === 'internal') ctx.log.error({ reqId: req.id, err }, 'internal error');
        const retryAfter = retryAfterSeconds(mapped.error);
        if (retryAfter) reply.header('retry-after', retryAfter);
        return send(reply, mapped.status, mapped.error.message);
      });
      // Pause, resume, snapshots, fork, templates, volumes, secrets, metrics, network updates:
      // an answer the SDK shows as it is ("501: …"), rather than a 404 it would read as "no such sandbox".
      api.setNotFoundHandler(async (req, reply) => {
        const path = req.url.split('?')[0]!.slice(E2B_API_PREFIX.length);
        return send(reply, 501, `sbx does not implement ${req.method} ${path} of the e2b API (see docs/e2b.md for what it serves)`);
      });
      sandboxRoutes(api, ctx, { templates });
    },
    { prefix: E2B_API_PREFIX },
  );
}
