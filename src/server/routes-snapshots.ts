/** Snapshots: a box's filesystem saved as an image of its owner (docs/lifecycle.md, Snapshots). */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { SnapshotOptionsSchema } from '../sandbox/index.js';
import { actingOwner, requireKey } from './auth.js';
import { boxFor } from './context.js';
import type { ServerContext } from './context.js';
import { COMMON_ERRORS, ListSnapshotsQuery, SnapshotInfoSchema, SnapshotListSchema, boxIdParam, noContent, replies, snapshotIdParam } from './schemas.js';

/**
 * The routes only name the caller: the Manager's snapshots scope every call to the owner the key
 * acts as (an admin's: all, or `?owner=`), and another owner's snapshot answers as a missing one.
 */
export function snapshotRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  const snapshots = () => ctx.manager.snapshots;

  r.post(
    '/v1/boxes/:id/snapshots',
    {
      schema: {
        summary: "Save a box's filesystem as a snapshot of its owner (an image new boxes can be created from)",
        tags: ['snapshots'],
        params: boxIdParam,
        // A POST without a body (fastify reads it as null) takes a snapshot without a name.
        body: SnapshotOptionsSchema.nullish(),
        response: replies({ 201: SnapshotInfoSchema.describe('Taken') }, [...COMMON_ERRORS, 409, 504]),
      },
    },
    async (req, reply) => {
      const box = await boxFor(ctx, req.caller, req.params.id);
      return reply.code(201).send(await box.snapshot(req.body ?? {}));
    },
  );

  r.get(
    '/v1/snapshots',
    {
      schema: {
        summary: "List snapshots: the caller's own (an admin: all, or ?owner=)",
        tags: ['snapshots'],
        querystring: ListSnapshotsQuery,
        response: replies({ 200: SnapshotListSchema }),
      },
    },
    async (req) => {
      const owner = actingOwner(requireKey(req.caller), req.query.owner);
      return { snapshots: await snapshots().list(owner !== undefined ? { owner } : {}) };
    },
  );

  r.get(
    '/v1/snapshots/:id',
    {
      schema: {
        summary: 'Describe a snapshot (by id or name)',
        tags: ['snapshots'],
        params: snapshotIdParam,
        response: replies({ 200: SnapshotInfoSchema }),
      },
    },
    async (req) => {
      const owner = actingOwner(requireKey(req.caller), undefined);
      return snapshots().get(req.params.id, owner !== undefined ? { owner } : {});
    },
  );

  r.delete(
    '/v1/snapshots/:id',
    {
      schema: {
        summary: 'Delete a snapshot and its image (409 while a box created from it exists)',
        tags: ['snapshots'],
        params: snapshotIdParam,
        response: replies({ 204: noContent('Deleted') }, [...COMMON_ERRORS, 409]),
      },
    },
    async (req, reply) => {
      const owner = actingOwner(requireKey(req.caller), undefined);
      await snapshots().delete(req.params.id, owner !== undefined ? { owner } : {});
      return reply.code(204).send();
    },
  );
}
