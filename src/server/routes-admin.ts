/** Admin-only: pools, images, API keys. */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SbxError } from '../errors.js';
import { imageRef } from '../runtime/spec.js';
import type { PoolConfig } from '../sandbox/index.js';
import { PoolConfigSchema } from '../sandbox/config.js';
import { OWNER_PATTERN } from '../sandbox/create-options.js';
import { requireAdmin } from './auth.js';
import type { ServerContext } from './context.js';
import { mapError } from './errors.js';
import { COMMON_ERRORS, CreatedKeySchema, KeyListSchema, PoolInfoSchema, PoolListSchema, flag, noContent, replies } from './schemas.js';
import { startSse } from './sse.js';

const poolName = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,31}$/, 'must be 1-32 of [a-z0-9_-]');

/** The library's pool schema: what `pools()` returns and `addPool()` takes, less the in-process `runtime`. */
const AddPoolBody = PoolConfigSchema;

const CreateKeyBody = z
  .object({
    name: z
      .string()
      .min(1)
      .max(128)
      .regex(/^[\x20-\x7e]+$/, 'must be printable ASCII'),
    role: z.enum(['admin', 'user']),
    /** The owner a user key acts as; default its name. */
    owner: z.string().regex(OWNER_PATTERN, 'must be 1-128 of [A-Za-z0-9_.@-]').optional(),
  })
  .strict();

const PullBody = z
  .object({
    ref: imageRef,
    pool: poolName.optional(),
    auth: z
      .object({ username: z.string().min(1), password: z.string().min(1), server: z.string().min(1).optional() })
      .strict()
      .optional(),
  })
  .strict();

export function adminRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  const defaultPool = async () => {
    const first = (await ctx.manager.pools())[0];
    if (!first) throw new SbxError('not_available', 'no pools configured');
    return first.name;
  };

  // --- pools
  r.get('/v1/pools', { schema: { summary: 'List pools (admin)', tags: ['pools'], response: replies({ 200: PoolListSchema }) } }, async (req) => {
    requireAdmin(req.caller);
    return { pools: await ctx.manager.pools() };
  });
  r.post(
    '/v1/pools',
    { schema: { summary: 'Add a pool (admin)', tags: ['pools'], body: AddPoolBody, response: replies({ 201: PoolInfoSchema }, [...COMMON_ERRORS, 409, 504]) } },
    async (req, reply) => {
      requireAdmin(req.caller);
      return reply.code(201).send(await ctx.manager.addPool(req.body as PoolConfig));
    },
  );
  r.delete(
    '/v1/pools/:name',
    {
      schema: {
        summary: 'Remove a pool (admin; ?force=true removes its boxes first)',
        tags: ['pools'],
        params: z.object({ name: poolName }).strict(),
        querystring: z.object({ force: flag.optional() }).strict(),
        response: replies({ 204: noContent('Removed') }, [...COMMON_ERRORS, 409, 504]),
      },
    },
    async (req, reply) => {
      requireAdmin(req.caller);
      await ctx.manager.removePool(req.params.name, { force: req.query.force ?? false });
      return reply.code(204).send();
    },
  );

  // --- images
  r.get(
    '/v1/images/exists',
    {
      schema: {
        summary: 'Whether a pool has an image (admin)',
        tags: ['images'],
        querystring: z.object({ ref: imageRef, pool: poolName.optional() }).strict(),
        response: replies({ 200: z.object({ pool: z.string(), ref: z.string(), exists: z.boolean() }) }, [...COMMON_ERRORS, 504]),
      },
    },
    async (req) => {
      requireAdmin(req.caller);
      const pool = req.query.pool ?? (await defaultPool());
      return { pool, ref: req.query.ref, exists: await ctx.manager.imageExists(pool, req.query.ref) };
    },
  );
  r.post(
    '/v1/images/pull',
    {
      schema: {
        summary: 'Pull an image; progress as Server-Sent Events (admin)',
        tags: ['images'],
        body: PullBody,
        response: replies({
          200: {
            description: 'Server-Sent Events: progress (the engine’s), then done ({"pool","ref"}) or error (the error body)',
            content: { 'text/event-stream': { schema: z.string() } },
          } as unknown as z.ZodType,
        }),
      },
    },
    async (req, reply) => {
      requireAdmin(req.caller);
      const pool = req.body.pool ?? (await defaultPool());
      if (!(await ctx.manager.pools()).some((p) => p.name === pool)) throw new SbxError('pool_not_found', `pool '${pool}' not found`, { details: { pool } });
      const controller = new AbortController();
      const sse = startSse(req, reply);
      void sse.onClose.then(() => controller.abort());
      let resolveDone!: () => void;
      const done = new Promise<void>((resolve) => (resolveDone = resolve));
      ctx.streams.add({
        done,
        abort(reason) {
          sse.event('error', { error: reason.toJSON() });
          sse.end();
          controller.abort();
        },
      });
      try {
        for await (const progress of ctx.manager.pullImage(pool, req.body.ref, {
          ...(req.body.auth ? { auth: req.body.auth } : {}),
          signal: controller.signal,
        })) {
          if (!sse.event('progress', progress)) await sse.drained();
          if (sse.closed) break;
        }
        sse.event('done', { pool, ref: req.body.ref });
      } catch (err) {
        sse.event('error', mapError(err).body);
      } finally {
        sse.end();
        resolveDone();
      }
      return reply;
    },
  );

  // --- keys
  r.get(
    '/v1/keys',
    { schema: { summary: 'List API keys (admin; never the secrets)', tags: ['keys'], response: replies({ 200: KeyListSchema }) } },
    async (req) => {
      requireAdmin(req.caller);
      return { keys: ctx.keys.list() };
    },
  );
  r.post(
    '/v1/keys',
    {
      schema: {
        summary: 'Create an API key (admin); the key is in this answer only',
        tags: ['keys'],
        body: CreateKeyBody,
        response: replies({ 201: CreatedKeySchema }, [...COMMON_ERRORS, 409]),
      },
    },
    async (req, reply) => {
      requireAdmin(req.caller);
      return reply.code(201).send(await ctx.keys.create(req.body));
    },
  );
  r.delete(
    '/v1/keys/:id',
    {
      schema: {
        summary: 'Revoke an API key (admin; effective at once)',
        tags: ['keys'],
        params: z.object({ id: z.string().regex(/^[0-9a-f]{16}$/, 'is not a key id') }).strict(),
        response: replies({ 204: noContent('Revoked') }, [...COMMON_ERRORS, 409]),
      },
    },
    async (req, reply) => {
      requireAdmin(req.caller);
      const target = ctx.keys.list().find((k) => k.id === req.params.id);
      if (target?.role === 'admin' && ctx.keys.list().filter((k) => k.role === 'admin').length === 1) {
        throw new SbxError('conflict', 'this is the last admin key; create another admin key before revoking it');
      }
      await ctx.keys.remove(req.params.id);
      return reply.code(204).send();
    },
  );
}
