/**
 * GET /v1/boxes/:id/logs: the output of a box's command (Box.logs) as JSON lines, or as
 * Server-Sent Events with Accept: text/event-stream. Reading logs is not use (like GET of the box).
 */
import { PassThrough } from 'node:stream';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SbxError } from '../errors.js';
import { durationMs } from '../runtime/bounds.js';
import { logQueryFields } from '../runtime/spec.js';
import type { LogChunk } from '../runtime/types.js';
import { boxFor } from './context.js';
import type { ServerContext } from './context.js';
import { mapError } from './errors.js';
import { boxIdParam, flag, replies } from './schemas.js';
import { startSse, whenDrained } from './sse.js';

/** While following, a keep-alive this often (an SSE comment, an empty JSON line): proxies and fetch's 300 s body timeout must not cut a quiet log. */
export const LOG_KEEPALIVE_MS = 15_000;

const wholeNumber = (what: string) =>
  z
    .string()
    .regex(/^\d{1,16}$/, `must be a whole number of ${what}`)
    .transform(Number);

export const LogsQuery = z
  .object({
    follow: flag.optional(),
    tail: wholeNumber('lines').pipe(logQueryFields.tail.unwrap()).optional(),
    since: logQueryFields.since,
    sinceMs: wholeNumber('milliseconds').pipe(durationMs).optional(),
  })
  .strict()
  .refine((q) => q.since === undefined || q.sinceMs === undefined, { message: 'give since or sinceMs, not both', path: ['sinceMs'] });

export function boxLogRoutes(app: FastifyInstance, ctx: ServerContext): void {
  app.withTypeProvider<ZodTypeProvider>().get(
    '/v1/boxes/:id/logs',
    {
      schema: {
        summary: "The output of the box's command (stdout and stderr): JSON lines, or Server-Sent Events with Accept: text/event-stream",
        description:
          'Each JSON line (and each SSE `log` event) is `{"stream":"stdout"|"stderr","data":"<text>","time":"<ISO 8601>"}`. ' +
          '`follow` keeps the answer open until the command ends (SSE: an `end` event), `tail` keeps the last lines, `since` (ISO 8601) or ' +
          '`sinceMs` the recent ones. A failure after the answer began is a last line `{"error":{…}}` (SSE: an `error` event). Not use of the box.',
        tags: ['boxes'],
        params: boxIdParam,
        querystring: LogsQuery,
        response: replies({
          200: {
            description: 'JSON lines ({"stream","data","time"} each), or with Accept: text/event-stream Server-Sent Events (log, keepalive, end, error)',
            content: { 'application/x-ndjson': { schema: z.string() }, 'text/event-stream': { schema: z.string() } },
          } as unknown as z.ZodType,
        }),
      },
    },
    async (req, reply) => {
      const box = await boxFor(ctx, req.caller, req.params.id);
      if (ctx.shuttingDown()) throw new SbxError('not_available', 'the server is shutting down');
      const q = req.query;
      const stop = new AbortController();
      const logs = await box.logs({
        ...(q.follow ? { follow: true } : {}),
        ...(q.tail !== undefined ? { tail: q.tail } : {}),
        ...(q.since !== undefined ? { since: q.since } : {}),
        ...(q.sinceMs !== undefined ? { sinceMs: q.sinceMs } : {}),
        signal: stop.signal,
      });
      const sse = (req.headers.accept ?? '').includes('text/event-stream');
      const out = sse ? sseOut(req, reply) : jsonLinesOut(reply);
      reply.raw.once('close', () => stop.abort());
      let resolveDone!: () => void;
      let cut = false;
      ctx.streams.add({
        done: new Promise<void>((resolve) => (resolveDone = resolve)),
        // The server is closing: the reader is told why, not that the log ended.
        abort(reason) {
          cut = true;
          out.error(reason.toJSON());
          stop.abort();
        },
      });
      const keepalive = q.follow ? setInterval(() => out.keepalive(), LOG_KEEPALIVE_MS) : undefined;
      try {
        for await (const chunk of logs) {
          if (!out.chunk(chunk)) await out.drained();
        }
        if (!cut) out.end();
      } catch (err) {
        if (!cut) out.error(mapError(err).body.error); // a shutdown's cut wrote its own last line
      } finally {
        clearInterval(keepalive);
        out.close();
        resolveDone();
      }
      return reply;
    },
  );
}

interface LogOut {
  /** False when the buffer is full (wait for drained()). */
  chunk(c: LogChunk): boolean;
  drained(): Promise<void>;
  keepalive(): void;
  /** The log ended. */
  end(): void;
  error(error: unknown): void;
  close(): void;
}

function sseOut(req: Parameters<typeof startSse>[0], reply: FastifyReply): LogOut {
  const sse = startSse(req, reply);
  return {
    chunk: (c) => sse.event('log', c),
    drained: () => sse.drained(),
    keepalive: () => void sse.event('keepalive', {}),
    end: () => void sse.event('end', {}),
    error: (error) => void sse.event('error', { error }),
    close: () => sse.end(),
  };
}

function jsonLinesOut(reply: FastifyReply): LogOut {
  const out = new PassThrough({ highWaterMark: 64 * 1024 });
  reply.code(200).header('content-type', 'application/x-ndjson; charset=utf-8').header('cache-control', 'no-cache').header('x-accel-buffering', 'no').send(out);
  const open = () => !out.destroyed && !out.writableEnded;
  return {
    chunk: (c) => (open() ? out.write(`${JSON.stringify(c)}\n`) : true),
    drained: () => (open() ? whenDrained(out, reply) : Promise.resolve()),
    keepalive: () => void (open() && out.write('\n')),
    end: () => undefined,
    error: (error) => void (open() && out.write(`${JSON.stringify({ error })}\n`)),
    close: () => {
      if (open()) out.end();
    },
  };
}
