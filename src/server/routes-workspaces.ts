/** Workspaces: CRUD, usage, and file I/O streamed both ways (raw bytes, tar). */
import { Transform, finished } from 'node:stream';
import type { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SbxError, invalidArgument } from '../errors.js';
import { OWNER_PATTERN } from '../sandbox/create-options.js';
import { actingOwner, requireKey } from './auth.js';
import { workspaceFor } from './context.js';
import { CreateWorkspaceOptionsSchema, UpdateWorkspaceOptionsSchema } from '../workspace/schemas.js';
import type { ServerContext } from './context.js';
import {
  COMMON_ERRORS,
  DirListSchema,
  FileStatSchema,
  ImportResultSchema,
  WorkspaceInfoSchema,
  WorkspaceListSchema,
  WorkspaceUsageSchema,
  flag,
  noContent,
  replies,
  workspaceIdParam,
  workspacePathParams,
} from './schemas.js';

/** What a workspace operation may also answer: a state that forbids it (409: mounted, exists, not empty), and the node's storage timing out. */
const WS_ERRORS = [...COMMON_ERRORS, 409, 504] as const;

/** Raw bytes, in the document. */
export const binary = z.string().meta({ format: 'binary' });

/** GET on a file path: the bytes, or with ?stat / ?list JSON. */
export const fileReadAnswer = {
  description: 'The file’s bytes; with ?stat a FileStat, with ?list {"entries": [DirEntry]}',
  content: { 'application/octet-stream': { schema: binary }, 'application/json': { schema: z.union([FileStatSchema, DirListSchema]) } },
} as unknown as z.ZodType;

// The library's schemas; over HTTP the owner is the caller's unless an admin names one, and the node may be left to the server.
const CreateWorkspaceBody = CreateWorkspaceOptionsSchema.extend({
  owner: z.string().regex(OWNER_PATTERN, 'must be 1-128 of [A-Za-z0-9_.@-], starting with a letter or digit').optional(),
  node: CreateWorkspaceOptionsSchema.shape.node.optional(),
}).strict();

const UpdateWorkspaceBody = UpdateWorkspaceOptionsSchema;

/** The POST ops on a file path; the box filesystem serves all but `copy`. */
export const FileOpBody = z.discriminatedUnion('op', [
  z.object({ op: z.literal('mkdir') }).strict(),
  z.object({ op: z.literal('rename'), to: z.string().min(1).max(4096) }).strict(),
  z.object({ op: z.literal('copy'), to: z.string().min(1).max(4096) }).strict(),
]);

export const FileQuery = z
  .object({
    /** GET: `?stat` describes the entry, `?list` lists a directory (`&recursive=true`). */
    stat: flag.optional(),
    list: flag.optional(),
    recursive: flag.optional(),
    /** PUT: permission bits as octal digits, e.g. 755. */
    mode: z
      .string()
      .regex(/^[0-7]{3,4}$/, 'must be octal permission bits like 644')
      .optional(),
  })
  .strict();

export function counting(ctx: ServerContext, direction: 'read' | 'written', source: Readable): Readable {
  const meter = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      ctx.metrics.workspaceBytes.inc({ direction }, chunk.length);
      cb(null, chunk);
    },
  });
  // A client gone mid-body fails the source and so the meter. Whoever still reads the meter hears
  // it; a write that already ended does not, and an unheard error would end the process. (Not
  // pipeline: it would destroy the request, and with it the socket the refusal is sent on.)
  // A source that closes without ending (a client gone, a request cut by the body timeout) fails
  // the meter too: the write reading it would otherwise wait forever, holding its file and quota.
  meter.on('error', () => undefined);
  finished(source, (err) => {
    if (err) meter.destroy(err);
  });
  return source.pipe(meter);
}

export function workspaceRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  const wsm = () => ctx.manager.workspaces;

  r.post(
    '/v1/workspaces',
    { schema: { summary: 'Create a workspace', tags: ['workspaces'], body: CreateWorkspaceBody, response: replies({ 201: WorkspaceInfoSchema }, WS_ERRORS) } },
    async (req, reply) => {
      const p = requireKey(req.caller);
      const owner = actingOwner(p, req.body.owner) ?? p.owner;
      const node =
        req.body.node ??
        wsm()
          .nodes()
          .find((n) => n.online)?.name ??
        wsm().nodes()[0]?.name;
      if (!node) throw new SbxError('not_available', 'no node can hold workspaces');
      const { owner: _o, node: _n, ...rest } = req.body;
      const ws = await wsm().create({ ...rest, owner, node });
      return reply.code(201).send(ws);
    },
  );

  r.get(
    '/v1/workspaces',
    {
      schema: {
        summary: 'List workspaces',
        tags: ['workspaces'],
        querystring: z.object({ owner: z.string().regex(OWNER_PATTERN).optional(), node: z.string().min(1).max(63).optional() }).strict(),
        response: replies({ 200: WorkspaceListSchema }),
      },
    },
    async (req) => {
      const p = requireKey(req.caller);
      const owner = actingOwner(p, req.query.owner);
      return { workspaces: await wsm().list({ ...(owner !== undefined ? { owner } : {}), ...(req.query.node ? { node: req.query.node } : {}) }) };
    },
  );

  r.get(
    '/v1/workspaces/:id',
    { schema: { summary: 'Describe a workspace', tags: ['workspaces'], params: workspaceIdParam, response: replies({ 200: WorkspaceInfoSchema }) } },
    async (req) => {
      return workspaceFor(ctx, requireKey(req.caller), req.params.id);
    },
  );

  r.patch(
    '/v1/workspaces/:id',
    {
      schema: {
        summary: 'Rename or relabel a workspace',
        tags: ['workspaces'],
        params: workspaceIdParam,
        body: UpdateWorkspaceBody,
        response: replies({ 200: WorkspaceInfoSchema }, WS_ERRORS),
      },
    },
    async (req) => {
      await workspaceFor(ctx, requireKey(req.caller), req.params.id);
      return wsm().update(req.params.id, req.body);
    },
  );

  r.delete(
    '/v1/workspaces/:id',
    {
      schema: {
        summary: 'Delete a workspace (?force=true even while a box mounts it)',
        tags: ['workspaces'],
        params: workspaceIdParam,
        querystring: z.object({ force: flag.optional() }).strict(),
        response: replies({ 204: noContent('Deleted') }, WS_ERRORS),
      },
    },
    async (req, reply) => {
      await workspaceFor(ctx, requireKey(req.caller), req.params.id);
      await wsm().delete(req.params.id, { force: req.query.force ?? false });
      return reply.code(204).send();
    },
  );

  r.get(
    '/v1/workspaces/:id/usage',
    {
      schema: {
        summary: 'Bytes and files a workspace holds',
        tags: ['workspaces'],
        params: workspaceIdParam,
        response: replies({ 200: WorkspaceUsageSchema }),
      },
    },
    async (req) => {
      await workspaceFor(ctx, requireKey(req.caller), req.params.id);
      return wsm().usage(req.params.id);
    },
  );

  const fsOf = async (caller: Parameters<typeof requireKey>[0], id: string) => {
    await workspaceFor(ctx, requireKey(caller), id);
    return wsm().fs(id);
  };

  for (const url of ['/v1/workspaces/:id/files/*', '/v1/workspaces/:id/files']) {
    r.get(
      url,
      {
        schema: {
          summary: 'Read a file (raw bytes, streamed), or ?stat / ?list a path',
          tags: ['files'],
          params: url.endsWith('*') ? workspacePathParams : workspaceIdParam,
          querystring: FileQuery,
          response: replies({ 200: fileReadAnswer }, WS_ERRORS),
        },
      },
      async (req, reply) => {
        const path = filePath(req.params);
        const fs = await fsOf(req.caller, req.params.id);
        if (req.query.stat) return fs.stat(path);
        if (req.query.list) return { entries: await fs.readDir(path, { recursive: req.query.recursive ?? false }) };
        const stream = await fs.createReadStream(path);
        return reply.header('content-type', 'application/octet-stream').send(counting(ctx, 'read', stream));
      },
    );

    r.delete(
      url,
      {
        schema: {
          summary: 'Remove a file or an empty directory (?recursive=true for a tree)',
          tags: ['files'],
          params: url.endsWith('*') ? workspacePathParams : workspaceIdParam,
          querystring: z.object({ recursive: flag.optional() }).strict(),
          response: replies({ 204: noContent('Removed') }, WS_ERRORS),
        },
      },
      async (req, reply) => {
        const path = filePath(req.params);
        if (path === '') throw invalidArgument('path', 'name a path inside the workspace; the root cannot be removed');
        const fs = await fsOf(req.caller, req.params.id);
        if (req.query.recursive) await fs.removeAll(path);
        else await fs.remove(path);
        return reply.code(204).send();
      },
    );

    r.post(
      url,
      {
        schema: {
          summary: 'mkdir (with parents), rename or copy a path: {"op":"mkdir"} | {"op":"rename","to":…} | {"op":"copy","to":…}',
          tags: ['files'],
          params: url.endsWith('*') ? workspacePathParams : workspaceIdParam,
          body: FileOpBody,
          response: replies({ 204: noContent('Done') }, WS_ERRORS),
        },
      },
      async (req, reply) => {
        const path = filePath(req.params);
        const fs = await fsOf(req.caller, req.params.id);
        const body = req.body;
        if (body.op === 'mkdir') await fs.mkdirAll(path);
        else if (body.op === 'rename') await fs.rename(path, body.to);
        else await fs.copy(path, body.to);
        return reply.code(204).send();
      },
    );
  }

  r.get(
    '/v1/workspaces/:id/tar/*',
    {
      schema: {
        summary: 'Download a directory as a tar stream',
        tags: ['files'],
        params: workspacePathParams,
        response: replies({ 200: { description: 'a tar stream', content: { 'application/x-tar': { schema: binary } } } as unknown as z.ZodType }, WS_ERRORS),
      },
    },
    async (req, reply) => {
      const fs = await fsOf(req.caller, req.params.id);
      const tar = await fs.exportTar(filePath(req.params));
      return reply.header('content-type', 'application/x-tar').send(counting(ctx, 'read', tar));
    },
  );

  // Raw uploads: the body is the file (or the tar), streamed to the workspace with bounded
  // memory; the workspace quota, not the JSON body limit, bounds it.
  void app.register(async (raw) => {
    raw.removeAllContentTypeParsers();
    raw.addContentTypeParser('*', { bodyLimit: Number.MAX_SAFE_INTEGER }, (_req, payload, done) => done(null, payload));
    const rr = raw.withTypeProvider<ZodTypeProvider>();
    rr.put(
      '/v1/workspaces/:id/files/*',
      {
        bodyLimit: Number.MAX_SAFE_INTEGER,
        schema: {
          summary: 'Write a file from the raw body (streamed; atomic; quota enforced)',
          tags: ['files'],
          params: workspacePathParams,
          querystring: FileQuery,
          response: replies({ 204: noContent('Written') }, WS_ERRORS),
        },
      },
      async (req, reply) => {
        const path = filePath(req.params);
        if (path === '') throw invalidArgument('path', 'name a file inside the workspace');
        const fs = await fsOf(req.caller, req.params.id);
        const body = (req.body ?? req.raw) as Readable;
        try {
          await fs.writeFile(path, counting(ctx, 'written', body), req.query.mode ? { mode: parseInt(req.query.mode, 8) } : {});
        } catch (err) {
          drain(req.raw);
          throw err;
        }
        return reply.code(204).send();
      },
    );
    rr.put(
      '/v1/workspaces/:id/tar/*',
      {
        bodyLimit: Number.MAX_SAFE_INTEGER,
        schema: {
          summary: 'Unpack a tar stream into a directory',
          tags: ['files'],
          params: workspacePathParams,
          response: replies({ 200: ImportResultSchema }, WS_ERRORS),
        },
      },
      async (req) => {
        const fs = await fsOf(req.caller, req.params.id);
        const body = (req.body ?? req.raw) as Readable;
        try {
          return await fs.importTar(filePath(req.params), counting(ctx, 'written', body));
        } catch (err) {
          drain(req.raw);
          throw err;
        }
      },
    );
  });
}

export function filePath(params: { id: string; '*'?: string }): string {
  const p = params['*'] ?? '';
  if (p.includes('\0')) throw invalidArgument('path', 'must not contain NUL');
  return p;
}

/**
 * After a failed upload (quota, bad path), the rest of the body is read and dropped, so the
 * client gets the error answer instead of a reset connection. Nothing is kept in memory.
 */
export function drain(raw: NodeJS.ReadableStream & { unpipe?: () => void }): void {
  raw.unpipe?.();
  raw.on('data', () => undefined);
  raw.resume();
}
