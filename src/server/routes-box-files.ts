/**
 * The box filesystem (`box.files()`) over HTTP: `/v1/boxes/:id/files/<absolute path>`, with the
 * workspace file routes' query, bodies and answers (routes-workspaces.ts), plus `?user=` (whose
 * permissions) and `?watch` (an NDJSON stream of events: a `{"ready":true}` line once the watch
 * is in place, then one event per line). Owner-scoped like every box route.
 */
import { PassThrough, type Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { userSpec } from '../runtime/bounds.js';
import { fileMode } from '../workspace/schemas.js';
import type { BoxFS } from '../sandbox/box-fs.js';
import { boxFor } from './context.js';
import type { ServerContext } from './context.js';
import { FileOpBody, FileQuery, counting, drain, filePath } from './routes-workspaces.js';
import { binary } from './routes-workspaces.js';
import { COMMON_ERRORS, DirListSchema, FileStatSchema, boxIdParam, flag, noContent, replies } from './schemas.js';

const BOX_FILE_ERRORS = [...COMMON_ERRORS, 409, 504] as const;
/** The workspace read's answers, and ?watch's NDJSON. */
const boxFileReadAnswer = {
  description: 'The file’s bytes; with ?stat a FileStat, with ?list {"entries": [DirEntry]}; with ?watch NDJSON: {"ready":true}, then one event per line',
  content: {
    'application/octet-stream': { schema: binary },
    'application/json': { schema: z.union([FileStatSchema, DirListSchema]) },
    'application/x-ndjson': { schema: z.string() },
  },
} as unknown as z.ZodType;

const boxPathParams = boxIdParam.extend({ '*': z.string().max(4096) }).strict();
const BoxFileQuery = FileQuery.extend({ user: userSpec.optional(), watch: flag.optional() }).strict();
const BoxWriteQuery = BoxFileQuery.pick({ user: true, mode: true }).strict();
const BoxDeleteQuery = z.object({ recursive: flag.optional(), user: userSpec.optional() }).strict();
// The workspace ops but `copy`; mkdir also takes the mode (`mkdirAll(path, mode)`).
const [mkdirOp, renameOp] = FileOpBody.options;
const BoxFileOpBody = z.discriminatedUnion('op', [mkdirOp.extend({ mode: fileMode.optional() }).strict(), renameOp]);

/** The box path of a route: its tail, made absolute ('' is the root directory). */
function boxPath(params: { id: string; '*'?: string }): string {
  return `/${filePath(params)}`;
}

export function boxFileRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  const filesOf = async (caller: Parameters<typeof boxFor>[1], id: string, user: string | undefined): Promise<BoxFS> =>
    (await boxFor(ctx, caller, id)).files(user === undefined ? {} : { user });

  for (const url of ['/v1/boxes/:id/files/*', '/v1/boxes/:id/files']) {
    const params = url.endsWith('*') ? boxPathParams : boxIdParam;
    r.get(
      url,
      {
        schema: {
          summary: 'Read a box file (raw bytes, streamed), ?stat / ?list a path, or ?watch it (NDJSON events)',
          tags: ['box files'],
          params,
          querystring: BoxFileQuery,
          response: replies({ 200: boxFileReadAnswer }, BOX_FILE_ERRORS),
        },
      },
      async (req, reply) => {
        // A client that goes away mid-stream (a watch it ended, a read it stopped) is not an error here.
        req.raw.on('error', () => undefined);
        const path = boxPath(req.params);
        const files = await filesOf(req.caller, req.params.id, req.query.user);
        if (req.query.stat) return files.stat(path);
        if (req.query.list) return { entries: await files.readDir(path, { recursive: req.query.recursive ?? false }) };
        if (req.query.watch)
          return reply.header('content-type', 'application/x-ndjson').send(await watchStream(files, path, req.query.recursive ?? false, req.raw));
        return reply.header('content-type', 'application/octet-stream').send(counting(ctx, 'read', await files.createReadStream(path)));
      },
    );

    r.delete(
      url,
      {
        schema: {
          summary: 'Remove a box file or empty directory (?recursive=true for a tree)',
          tags: ['box files'],
          params,
          querystring: BoxDeleteQuery,
          response: replies({ 204: noContent('Removed') }, BOX_FILE_ERRORS),
        },
      },
      async (req, reply) => {
        const files = await filesOf(req.caller, req.params.id, req.query.user);
        const path = boxPath(req.params);
        if (req.query.recursive) await files.removeAll(path);
        else await files.remove(path);
        return reply.code(204).send();
      },
    );

    r.post(
      url,
      {
        schema: {
          summary: 'mkdir (with parents) or rename a box path: {"op":"mkdir","mode"?:493} | {"op":"rename","to":…}',
          tags: ['box files'],
          params,
          querystring: BoxWriteQuery.pick({ user: true }),
          body: BoxFileOpBody,
          response: replies({ 204: noContent('Done') }, BOX_FILE_ERRORS),
        },
      },
      async (req, reply) => {
        const files = await filesOf(req.caller, req.params.id, req.query.user);
        const body = req.body;
        if (body.op === 'mkdir') await files.mkdirAll(boxPath(req.params), body.mode);
        else if (body.op === 'rename') await files.rename(boxPath(req.params), body.to);
        return reply.code(204).send();
      },
    );
  }

  // The raw body is the file, streamed into the box with bounded memory.
  void app.register(async (raw) => {
    raw.removeAllContentTypeParsers();
    raw.addContentTypeParser('*', { bodyLimit: Number.MAX_SAFE_INTEGER }, (_req, payload, done) => done(null, payload));
    raw.withTypeProvider<ZodTypeProvider>().put(
      '/v1/boxes/:id/files/*',
      {
        bodyLimit: Number.MAX_SAFE_INTEGER,
        schema: {
          summary: 'Write a box file from the raw body (streamed; atomic)',
          tags: ['box files'],
          params: boxPathParams,
          querystring: BoxWriteQuery,
          response: replies({ 204: noContent('Written') }, BOX_FILE_ERRORS),
        },
      },
      async (req, reply) => {
        // A client whose source failed aborts the upload: the write fails on its own, and the
        // socket's late 'aborted' error must not go unhandled.
        req.raw.on('error', () => undefined);
        try {
          const files = await filesOf(req.caller, req.params.id, req.query.user);
          const body = (req.body ?? req.raw) as Readable;
          await files.writeFile(boxPath(req.params), counting(ctx, 'written', body), req.query.mode ? { mode: parseInt(req.query.mode, 8) } : {});
        } catch (err) {
          drain(req.raw);
          throw err;
        }
        return reply.code(204).send();
      },
    );
  });
}

const WATCH_KEEPALIVE_MS = 30_000;

/** The watch as NDJSON; it ends when the client goes away. Errors before it is ready are the request's. */
async function watchStream(files: BoxFS, path: string, recursive: boolean, request: NodeJS.EventEmitter): Promise<Readable> {
  const ac = new AbortController();
  const watch = files.watch(path, { recursive, signal: ac.signal });
  await watch.ready;
  const out = new PassThrough();
  const stop = () => ac.abort();
  request.once('close', stop);
  out.once('close', stop);
  out.write(`${JSON.stringify({ ready: true })}\n`);
  // An empty line now and then: a quiet watch must not look like a dead connection to proxies and fetch's body timeout.
  const keepalive = setInterval(() => out.write('\n'), WATCH_KEEPALIVE_MS);
  out.once('close', () => clearInterval(keepalive));
  void (async () => {
    try {
      for await (const e of watch) if (!out.write(`${JSON.stringify(e)}\n`)) await new Promise((r) => out.once('drain', r));
      out.end();
    } catch (err) {
      out.destroy(err as Error);
    } finally {
      request.removeListener('close', stop);
    }
  })();
  return out;
}
