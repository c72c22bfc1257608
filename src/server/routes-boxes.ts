/** Boxes, buffered and SSE exec, and the heartbeat route. */
import { StringDecoder } from 'node:string_decoder';
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SbxError } from '../errors.js';
import { DEFAULT_MAX_OUTPUT_BYTES } from '../runtime/bounds.js';
import { dropExecOutput } from '../runtime/collect-text.js';
import type { ExecResult, ExecStream } from '../runtime/types.js';
import { CreateOptionsSchema } from '../sandbox/create-options.js';
import { normalizeNetworkPolicy } from '../sandbox/egress-policy.js';
import type { Box, BoxInfo, CreateOptions } from '../sandbox/index.js';
import { mapSettled } from '../util/concurrency.js';
import { actingOwner, mayAccess, requireKey } from './auth.js';
import { boxFor, boxNotFound, issuerFor, lookupBox } from './context.js';
import type { ServerContext } from './context.js';
import { mapError } from './errors.js';
import { EXEC_FRAMES_TYPE, execAnswer } from './exec-json.js';
import { authenticateRequest } from './request-auth.js';
import { DEFAULT_EXEC_OUTPUT_BUDGET_BYTES, ExecOutputBudget } from './output-budget.js';
import { KEY_SECURITY } from './openapi.js';
import {
  BoxInfoSchema,
  BoxListSchema,
  COMMON_ERRORS,
  NetworkPolicyWireSchema,
  ExecBodySchema,
  ExecResultSchema,
  SignedUrlSchema,
  VncUrlSchema,
  noContent,
  replies,
  HeartbeatBodySchema,
  ProxyUrlBodySchema,
  PauseBodySchema,
  RenewLifetimeBodySchema,
  VncUrlBodySchema,
  ListBoxesQuery,
  boxIdParam,
  decodeStdin,
  flag,
  parseLabelFilters,
} from './schemas.js';
import type { ExecBody } from './schemas.js';
import { startSse } from './sse.js';
import { boxLogRoutes } from './routes-box-logs.js';

/** What an operation on a box may also answer: its state forbids it (409), the engine took too long (504). */
const BOX_ERRORS = [...COMMON_ERRORS, 409, 504] as const;

/** Boxes inspected at once for a list. */
const LIST_PARALLELISM = 8;

export function boxRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  const execOutput = ctx.execOutput ?? new ExecOutputBudget(DEFAULT_EXEC_OUTPUT_BUDGET_BYTES);
  boxLogRoutes(app, ctx);

  r.post(
    '/v1/boxes',
    {
      schema: {
        summary: 'Create a box (or get it, with ?getOrCreate=true and an id)',
        tags: ['boxes'],
        body: CreateOptionsSchema,
        querystring: z.object({ getOrCreate: flag.optional() }).strict(),
        response: replies({ 201: BoxInfoSchema.describe('Created'), 200: BoxInfoSchema.describe('getOrCreate: the box that was there') }, [
          ...COMMON_ERRORS,
          409,
          504,
        ]),
      },
    },
    async (req, reply) => {
      const p = requireKey(req.caller);
      const owner = actingOwner(p, req.body.owner) ?? p.owner;
      const opts = { ...req.body, owner } as CreateOptions;
      let box: Box;
      let created = true;
      if (req.query.getOrCreate) {
        if (!opts.id) throw new SbxError('invalid_argument', 'id: getOrCreate needs an id', { details: { field: 'id' } });
        // Another owner's box answers as GET /v1/boxes/:id does for it: the not_found of a
        // missing box, so neither its owner nor anything about it leaks (docs/api.md).
        const hidden = async (id: string) => {
          const b = await lookupBox(ctx.manager, id);
          return b !== undefined && !mayAccess(p, b.owner);
        };
        const existing = await lookupBox(ctx.manager, opts.id);
        if (existing && !mayAccess(p, existing.owner)) throw boxNotFound(opts.id);
        created = !existing;
        try {
          box = await ctx.manager.getOrCreate(opts);
        } catch (err) {
          // A create of the same id by another owner was in flight and won.
          if (err instanceof SbxError && err.code === 'conflict' && (await hidden(opts.id))) throw boxNotFound(opts.id);
          throw err;
        }
      } else {
        box = await ctx.manager.create(opts);
      }
      if (created) ctx.metrics.creates.inc({ pool: box.pool });
      return reply.code(created ? 201 : 200).send(await box.info());
    },
  );

  r.get(
    '/v1/boxes',
    { schema: { summary: 'List boxes', tags: ['boxes'], querystring: ListBoxesQuery, response: replies({ 200: BoxListSchema }) } },
    async (req) => {
      const p = requireKey(req.caller);
      const owner = actingOwner(p, req.query.owner);
      const labels = parseLabelFilters(req.query.label);
      const boxes = await ctx.manager.list({
        ...(owner !== undefined ? { owner } : {}),
        ...(req.query.pool !== undefined ? { pool: req.query.pool } : {}),
        ...(labels ? { labels } : {}),
      });
      const infos = await mapSettled(boxes, LIST_PARALLELISM, (b) => b.info());
      const out: BoxInfo[] = [];
      for (const res of infos) {
        if (res.status === 'fulfilled') out.push(res.value);
        else if (!(res.reason instanceof SbxError && res.reason.code === 'not_found')) throw res.reason;
      }
      return { boxes: out };
    },
  );

  r.get(
    '/v1/boxes/:id',
    { schema: { summary: 'Describe a box', tags: ['boxes'], params: boxIdParam, response: replies({ 200: BoxInfoSchema }) } },
    async (req) => {
      return (await boxFor(ctx, req.caller, req.params.id)).info();
    },
  );

  r.delete(
    '/v1/boxes/:id',
    { schema: { summary: 'Remove a box (force)', tags: ['boxes'], params: boxIdParam, response: replies({ 204: noContent('Removed') }, BOX_ERRORS) } },
    async (req, reply) => {
      const box = await boxFor(ctx, req.caller, req.params.id);
      await ctx.manager.remove(box.id);
      ctx.metrics.removes.inc({ pool: box.pool });
      return reply.code(204).send();
    },
  );

  r.post(
    '/v1/boxes/:id/stop',
    {
      schema: {
        summary: 'Stop a box (it stays registered; on a pool that cannot start it again, Kubernetes, it is removed)',
        tags: ['boxes'],
        params: boxIdParam,
        response: replies({ 200: BoxInfoSchema }, BOX_ERRORS),
      },
    },
    async (req) => {
      const box = await boxFor(ctx, req.caller, req.params.id);
      if (box.restartable) {
        await box.stop();
        return box.info();
      }
      // A stopped box that can never run again (a pod) is removed by the stop: its last state, stopped.
      const before = await box.info();
      await box.stop();
      return { ...before, status: 'stopped' as const };
    },
  );

  r.post(
    '/v1/boxes/:id/pause',
    {
      schema: {
        summary:
          'Pause a box: freeze its processes in place (memory and files kept, no CPU), or with memory: release checkpoint it to disk; any use resumes it',
        description:
          "The answer's pausedMemory says which: held or released. A released box holds no memory on the host and comes back with its processes where they were (docs/lifecycle.md).",
        tags: ['boxes'],
        params: boxIdParam,
        // A POST without a body (fastify reads it as null) is a plain pause.
        body: PauseBodySchema.nullish(),
        response: replies({ 200: BoxInfoSchema }, BOX_ERRORS),
      },
    },
    async (req) => {
      const box = await boxFor(ctx, req.caller, req.params.id);
      await box.pause(req.body ?? {});
      return box.info();
    },
  );

  // The lifecycle steps that answer the box as it is after them.
  for (const [verb, summary] of [
    ['start', 'Start a stopped box (a paused one is resumed)'],
    ['resume', 'Resume a box: thaw a paused one, restore an archived one, start a stopped one; a running box is left as it is'],
    ['archive', 'Archive a box: save its filesystem and record, remove its container (processes end); any use or resume restores it'],
  ] as const) {
    r.post(
      `/v1/boxes/:id/${verb}`,
      { schema: { summary, tags: ['boxes'], params: boxIdParam, response: replies({ 200: BoxInfoSchema }, BOX_ERRORS) } },
      async (req) => {
        const box = await boxFor(ctx, req.caller, req.params.id);
        await box[verb]();
        return box.info();
      },
    );
  }

  r.post(
    '/v1/boxes/:id/renew-lifetime',
    {
      schema: {
        summary: "End the box's max lifetime lifetimeMs from now (box.renewLifetime)",
        tags: ['boxes'],
        params: boxIdParam,
        body: RenewLifetimeBodySchema,
        response: replies({ 200: BoxInfoSchema }, BOX_ERRORS),
      },
    },
    async (req) => {
      const box = await boxFor(ctx, req.caller, req.params.id);
      await box.renewLifetime(req.body.lifetimeMs);
      return box.info();
    },
  );

  r.put(
    '/v1/boxes/:id/network',
    {
      schema: {
        summary: 'Replace where the box may connect to (box.setNetwork): { egress: all | none | { allow?, deny? } }',
        description:
          "New connections follow the new policy at once; open connections to what it now denies are cut. Anything but 'all' on a pool whose runtime cannot enforce egress: 503 not_available (details.reason egress). See docs/network.md.",
        tags: ['boxes'],
        params: boxIdParam,
        body: NetworkPolicyWireSchema,
        response: replies({ 200: BoxInfoSchema }, BOX_ERRORS),
      },
    },
    async (req) => {
      const box = await boxFor(ctx, req.caller, req.params.id);
      // Checked here first, so a bad entry is named as the body has it (`egress.allow[1]`).
      await box.setNetwork(normalizeNetworkPolicy(req.body, ''));
      return box.info();
    },
  );

  r.post(
    '/v1/boxes/:id/exec',
    {
      schema: {
        summary: 'Run a command to completion (JSON), or stream its output as Server-Sent Events with Accept: text/event-stream',
        tags: ['exec'],
        params: boxIdParam,
        body: ExecBodySchema,
        response: replies(
          {
            200: {
              description:
                'The result (JSON), or with Accept: text/event-stream the events stdout, stderr ({"text"}), then exit ({"exitCode","durationMs"}) or error; with Accept: application/vnd.sbx.exec-frames the result as frames [channel u8][length u32 BE][payload]: stdout (1) and stderr (2) as UTF-8, then the other fields as JSON (3)',
              content: {
                'application/json': { schema: ExecResultSchema },
                'text/event-stream': { schema: z.string() },
                [EXEC_FRAMES_TYPE]: { schema: z.string() },
              },
            } as unknown as z.ZodType,
          },
          BOX_ERRORS,
        ),
      },
    },
    async (req, reply) => {
      const box = await boxFor(ctx, req.caller, req.params.id);
      if (ctx.shuttingDown()) throw new SbxError('not_available', 'the server is shutting down');
      const started = performance.now();
      if ((req.headers.accept ?? '').includes('text/event-stream')) return execSse(ctx, box, req.body, req, reply, started);
      const { cmd, stdin, ...rest } = req.body;
      // A request without a cap gets the default, or the whole budget when that is smaller.
      const cap = rest.maxOutputBytes ?? Math.min(DEFAULT_MAX_OUTPUT_BYTES, execOutput.totalBytes);
      const lease = execOutput.lease(cap);
      const controller = new AbortController();
      // The output's memory goes back to the budget on every path: the exec failed, or the
      // answer was written, or the client left (during the exec or while the answer was sent).
      let result: ExecResult | undefined;
      let answering = false;
      let gone = false;
      const done = () => {
        lease.release();
        if (result) dropExecOutput(result);
      };
      const onClose = () => {
        gone = true;
        if (answering) done();
        else if (!reply.raw.writableFinished) controller.abort();
      };
      reply.raw.once('close', onClose);
      try {
        result = await box.exec(cmd, {
          ...rest,
          maxOutputBytes: cap,
          outputBudget: lease,
          ...(stdin !== undefined ? { stdin: decodeStdin(stdin)! } : {}),
          signal: controller.signal,
        });
        ctx.metrics.execs.inc({ transport: 'http', outcome: 'exited' });
        answering = true;
        if (gone) done();
        // truncated alone cannot say whether the exec's own cap or the server's budget cut it.
        if (lease.starved) reply.header('x-sbx-output-cut', 'budget');
        const framed = (req.headers.accept ?? '').includes(EXEC_FRAMES_TYPE);
        return reply.type(framed ? EXEC_FRAMES_TYPE : 'application/json; charset=utf-8').send(execAnswer(result, framed));
      } catch (err) {
        ctx.metrics.execs.inc({ transport: 'http', outcome: 'error' });
        throw err;
      } finally {
        if (!answering) {
          done();
          reply.raw.off('close', onClose);
        }
        ctx.metrics.execDuration.observe({ transport: 'http' }, (performance.now() - started) / 1000);
      }
    },
  );

  r.post(
    '/v1/boxes/:id/proxy-url',
    {
      schema: {
        summary: 'A URL on the proxy for a port of the box; signed: true adds a port access token a browser can open',
        tags: ['proxy'],
        params: boxIdParam,
        body: ProxyUrlBodySchema,
        response: replies({ 200: SignedUrlSchema }),
      },
    },
    async (req) => {
      const box = await boxFor(ctx, req.caller, req.params.id);
      const { port, path, ...opts } = req.body;
      // Signed for this key: revoking it ends the URL (src/server/port-auth.ts).
      const res = await box.proxyUrl(port, path, opts, issuerFor(ctx, requireKey(req.caller).keyId));
      return res.expiresAt !== undefined ? { url: res.url, expiresAt: new Date(res.expiresAt).toISOString() } : { url: res.url };
    },
  );

  r.post(
    '/v1/boxes/:id/vnc-url',
    {
      schema: {
        summary: "The URL of the box's VNC viewer page, with a port access token a browser can open (boxes created with vnc: true)",
        tags: ['vnc'],
        params: boxIdParam,
        body: VncUrlBodySchema.optional(),
        response: replies({ 200: VncUrlSchema }),
      },
    },
    async (req) => {
      const box = await boxFor(ctx, req.caller, req.params.id);
      const res = await box.vncUrl(req.body ?? {}, issuerFor(ctx, requireKey(req.caller).keyId));
      return { url: res.url, expiresAt: new Date(res.expiresAt).toISOString() };
    },
  );

  r.post(
    '/v1/boxes/:id/heartbeat',
    {
      config: { auth: 'box' },
      schema: {
        summary: "Heartbeat from inside the box (its box token) or from an owner's key",
        tags: ['boxes'],
        params: boxIdParam,
        body: HeartbeatBodySchema,
        security: KEY_SECURITY,
        response: replies({ 204: noContent('Recorded') }),
      },
    },
    async (req, reply) => {
      // Its box's token, or a key that may see the box.
      const caller = (req.caller = await authenticateRequest(req));
      let id = req.params.id;
      if (caller.kind === 'box') {
        if (caller.boxId !== id) throw new SbxError('forbidden', 'this box token speaks for another box');
      } else {
        id = (await boxFor(ctx, caller, id)).id; // the box the key may see, never the raw path id
      }
      await ctx.manager.heartbeat(id, {
        active: req.body.active,
        ...(req.body.processCount !== undefined ? { processCount: req.body.processCount } : {}),
      });
      ctx.metrics.heartbeats.inc({ transport: 'http' });
      return reply.code(204).send();
    },
  );
}

async function execSse(
  ctx: ServerContext,
  box: Box,
  body: ExecBody,
  req: Parameters<typeof startSse>[0],
  reply: Parameters<typeof startSse>[1],
  started: number,
): Promise<unknown> {
  const { cmd, stdin, workDir, env, user, timeoutMs } = body;
  const stream: ExecStream = await box.stream(cmd, {
    ...(workDir !== undefined ? { workDir } : {}),
    ...(env !== undefined ? { env } : {}),
    ...(user !== undefined ? { user } : {}),
    ...(timeoutMs !== undefined ? { timeoutMs } : {}),
  });
  const sse = startSse(req, reply);
  ctx.metrics.openStreams.inc({ transport: 'sse' });
  let finished = false;
  let resolveDone!: () => void;
  const done = new Promise<void>((resolve) => (resolveDone = resolve));
  ctx.streams.add({
    done,
    abort(reason) {
      if (finished) return;
      sse.event('error', { error: reason.toJSON() });
      sse.end();
      void stream.cancel().catch(() => undefined);
    },
  });
  const pump = (readable: NodeJS.ReadableStream & { pause(): void; resume(): void }, name: 'stdout' | 'stderr') =>
    new Promise<void>((resolve) => {
      const decoder = new StringDecoder('utf8');
      readable.on('data', (chunk: Buffer) => {
        const text = decoder.write(chunk);
        if (text && !sse.event(name, { text })) {
          readable.pause();
          void sse.drained().then(() => readable.resume());
        }
      });
      readable.once('end', () => {
        const rest = decoder.end();
        if (rest) sse.event(name, { text: rest });
        resolve();
      });
      readable.once('error', () => resolve());
      readable.once('close', () => resolve());
    });
  void sse.onClose.then(() => {
    if (!finished) void stream.cancel().catch(() => undefined);
  });
  const input = decodeStdin(stdin);
  stream.stdin.on('error', () => undefined);
  if (input !== undefined) stream.stdin.end(input);
  else stream.stdin.end();
  try {
    const [exitCode] = await Promise.all([stream.wait(), pump(stream.stdout, 'stdout'), pump(stream.stderr, 'stderr')]);
    finished = true;
    sse.event('exit', { exitCode, durationMs: Math.round(performance.now() - started) });
    ctx.metrics.execs.inc({ transport: 'sse', outcome: 'exited' });
  } catch (err) {
    finished = true;
    sse.event('error', mapError(err).body);
    ctx.metrics.execs.inc({ transport: 'sse', outcome: 'error' });
  } finally {
    sse.end();
    resolveDone();
    ctx.metrics.openStreams.dec({ transport: 'sse' });
    ctx.metrics.execDuration.observe({ transport: 'sse' }, (performance.now() - started) / 1000);
  }
  return reply;
}
