/**
 * Images on a pool's engine beside the pull in routes-admin.ts: list and remove, admin only. An
 * engine's images are shared by every owner of its pools, and their names can tell one tenant's
 * work to another, so a user key may neither list them nor remove one another's boxes run from.
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { imageRef } from '../runtime/spec.js';
import { requireAdmin } from './auth.js';
import type { ServerContext } from './context.js';
import { COMMON_ERRORS, ImageListSchema, flag, noContent, replies } from './schemas.js';

const poolName = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,31}$/, 'must be 1-32 of [a-z0-9_-]');

export function imageRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  const poolOrFirst = async (pool: string | undefined) => pool ?? (await ctx.manager.pools())[0]?.name ?? 'local';

  r.get(
    '/v1/images',
    {
      schema: {
        summary: 'List the images of a pool (admin; default the first pool)',
        tags: ['images'],
        querystring: z.object({ pool: poolName.optional() }).strict(),
        response: replies({ 200: ImageListSchema }),
      },
    },
    async (req) => {
      requireAdmin(req.caller);
      const pool = await poolOrFirst(req.query.pool);
      return { pool, images: await ctx.manager.listImages(pool) };
    },
  );
  r.delete(
    '/v1/images',
    {
      schema: {
        summary: 'Remove an image from a pool (admin; the engine refuses one a box uses unless force, which only untags it)',
        tags: ['images'],
        querystring: z.object({ ref: imageRef, pool: poolName.optional(), force: flag.optional() }).strict(),
        response: replies({ 204: noContent('Removed') }, [...COMMON_ERRORS, 409]),
      },
    },
    async (req, reply) => {
      requireAdmin(req.caller);
      await ctx.manager.removeImage(await poolOrFirst(req.query.pool), req.query.ref, { force: req.query.force ?? false });
      return reply.code(204).send();
    },
  );
}
