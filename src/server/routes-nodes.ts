/**
 * Remote nodes (docs/nodes.md): list them, make a one-time join token, drain and revoke (admin
 * keys); and the join itself, which a node calls with its join token instead of a key (the token
 * is checked, and spent, in the core: Manager.joinNode).
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { durationMs } from '../runtime/bounds.js';
import { requireAdmin } from './auth.js';
import type { ServerContext } from './context.js';
import { COMMON_ERRORS, isoTime, replies } from './schemas.js';

const nodeName = z.string().regex(/^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/, 'must be 1-40 of a-z, 0-9 and -, starting and ending with a letter or digit');

export const NodeInfoSchema = z
  .object({
    name: z.string(),
    mode: z.enum(['direct', 'reverse']),
    address: z.string().optional(),
    fingerprint: z.string().describe("the node's certificate pin, sha256:<hex>"),
    state: z.enum(['connecting', 'online', 'offline', 'revoked']),
    draining: z.boolean(),
    maxBoxes: z.number().int().optional(),
    joinedAt: isoTime,
    lastSeenAt: isoTime.optional(),
    error: z.string().optional().describe('why it is offline'),
    facts: z
      .object({
        engineVersion: z.string().optional(),
        os: z.string().optional(),
        arch: z.string().optional(),
        cpus: z.number().optional(),
        memoryBytes: z.number().optional(),
        ociRuntimes: z.array(z.string()).optional(),
        freeDiskBytes: z.number().optional(),
        egress: z.boolean().optional().describe("the node's engine enforces egress policies (docs/network.md)"),
      })
      .optional(),
    revokedAt: isoTime.optional(),
  })
  .meta({ id: 'NodeInfo' });

const JoinBodySchema = z
  .object({
    token: z.string().min(1).max(200),
    name: nodeName,
    mode: z.enum(['direct', 'reverse']),
    cert: z.string().min(1).max(16_384).describe("the node's self-signed certificate (PEM); the Manager pins it"),
    address: z
      .string()
      .regex(/^(\[[0-9a-fA-F:]+\]|[a-zA-Z0-9.-]+):\d{1,5}$/, 'must be host:port')
      .optional(),
    maxBoxes: z.number().int().min(1).max(100_000).optional(),
  })
  .strict();

export function nodeRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  const nameParam = z.object({ name: nodeName });

  r.get(
    '/v1/nodes',
    { schema: { summary: 'List the remote nodes (admin)', tags: ['nodes'], response: replies({ 200: z.object({ nodes: z.array(NodeInfoSchema) }) }) } },
    async (req) => {
      requireAdmin(req.caller);
      return { nodes: ctx.manager.nodes() };
    },
  );

  r.post(
    '/v1/nodes/join-tokens',
    {
      schema: {
        summary: 'Make a one-time node join token (admin; shown once)',
        tags: ['nodes'],
        body: z
          .object({ ttlMs: durationMs.refine((v) => v >= 1000 && v <= 7 * 24 * 3_600_000, 'must be between 1 s and 7 days').optional() })
          .strict()
          .optional(),
        response: replies({ 201: z.object({ token: z.string(), expiresAt: isoTime }) }),
      },
    },
    async (req, reply) => {
      requireAdmin(req.caller);
      const made = await ctx.manager.createNodeJoinToken(req.body?.ttlMs !== undefined ? { ttlMs: req.body.ttlMs } : {});
      return reply.code(201).send(made);
    },
  );

  r.post(
    '/v1/nodes/join',
    {
      config: { auth: 'public' },
      schema: {
        summary: 'Join a node (the node calls this with its one-time join token, not a key)',
        tags: ['nodes'],
        body: JoinBodySchema,
        response: replies(
          {
            201: z.object({
              name: z.string(),
              credential: z.string().describe("the node's credential; shown in this answer only (the Manager keeps its hash)"),
              managerCert: z.string(),
              managerFingerprint: z.string(),
              listenPort: z.number().int().optional().describe('the port of the listener reverse nodes dial'),
            }),
          },
          [...COMMON_ERRORS, 409],
        ),
      },
    },
    async (req, reply) => reply.code(201).send(await ctx.manager.joinNode(req.body)),
  );

  r.post(
    '/v1/nodes/:name/drain',
    {
      schema: {
        summary: 'Drain a node, or undo it (admin): no new boxes go there; its boxes keep running',
        tags: ['nodes'],
        params: nameParam,
        body: z
          .object({ draining: z.boolean().default(true) })
          .strict()
          .optional(),
        response: replies({ 200: NodeInfoSchema }),
      },
    },
    async (req) => {
      requireAdmin(req.caller);
      return ctx.manager.drainNode(req.params.name, req.body?.draining ?? true);
    },
  );

  r.post(
    '/v1/nodes/:name/revoke',
    {
      schema: {
        summary: 'Revoke a node (admin): its connection ends at once and it is refused from now on',
        tags: ['nodes'],
        params: nameParam,
        response: replies({ 200: NodeInfoSchema }),
      },
    },
    async (req) => {
      requireAdmin(req.caller);
      return ctx.manager.revokeNode(req.params.name);
    },
  );
}
