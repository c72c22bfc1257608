/**
 * WebSocket exec: `GET /v1/boxes/:id/exec/ws`. Binary messages whose first byte is the channel:
 * 0 stdin, 1 stdout, 2 stderr, 3 control (UTF-8 JSON: `{"exit":N}`, `{"error":{code,message}}`,
 * `{"resize":{cols,rows}}`, and from the client first `{"exec":{cmd,...}}` when the query has no
 * `cmd`), 4 stdin-EOF (a real half-close of the process's stdin).
 *
 * Backpressure both ways: output is paused while more than HIGH_WATER bytes wait for the socket,
 * and the socket is paused while the process's stdin is full.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { WebSocket } from 'ws';
import { z } from 'zod';
import { SbxError, invalidArgument } from '../errors.js';
import type { ExecStream } from '../runtime/types.js';
import { parseOrThrow } from '../util/validation.js';
import { boxFor } from './context.js';
import type { ServerContext } from './context.js';
import { mapError } from './errors.js';
import { COMMON_ERRORS, WsExecSchema, boxIdParam, flag, noContent, replies } from './schemas.js';
import type { WsExec } from './schemas.js';

export const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, control: 3, stdinEof: 4 } as const;
const HIGH_WATER = 1024 * 1024;
const LOW_WATER = 256 * 1024;
/** How long a client has to send its `{"exec":…}` frame. */
const START_TIMEOUT_MS = 10_000;

const repeated = z.union([z.string(), z.array(z.string())]).transform((v) => (Array.isArray(v) ? v : [v]));
const numeric = z
  .string()
  .regex(/^\d{1,9}$/, 'must be a whole number')
  .transform(Number);

export const WsExecQuery = z
  .object({
    cmd: repeated.optional(),
    tty: flag.optional(),
    cols: numeric.optional(),
    rows: numeric.optional(),
    workDir: z.string().optional(),
    user: z.string().optional(),
    timeoutMs: numeric.optional(),
    /** `env=K=V`, repeatable. */
    env: repeated.optional(),
  })
  .strict();

function frame(channel: number, data: Buffer | string): Buffer {
  const body = typeof data === 'string' ? Buffer.from(data) : data;
  const out = Buffer.allocUnsafe(body.length + 1);
  out[0] = channel;
  body.copy(out, 1);
  return out;
}

export function control(obj: unknown): Buffer {
  return frame(CHANNEL.control, JSON.stringify(obj));
}

function fromQuery(q: z.infer<typeof WsExecQuery>): WsExec | undefined {
  if (!q.cmd) return undefined;
  const env: Record<string, string> = {};
  for (const item of q.env ?? []) {
    const i = item.indexOf('=');
    if (i <= 0) throw invalidArgument('env', `must be NAME=value, got ${JSON.stringify(item)}`);
    env[item.slice(0, i)] = item.slice(i + 1);
  }
  const spec: Record<string, unknown> = { cmd: q.cmd };
  if (q.env) spec['env'] = env;
  if (q.tty !== undefined) spec['tty'] = q.tty;
  if (q.cols !== undefined || q.rows !== undefined) spec['size'] = { cols: q.cols ?? 80, rows: q.rows ?? 24 };
  if (q.workDir !== undefined) spec['workDir'] = q.workDir;
  if (q.user !== undefined) spec['user'] = q.user;
  if (q.timeoutMs !== undefined) spec['timeoutMs'] = q.timeoutMs;
  return parseOrThrow(WsExecSchema, spec, 'exec');
}

export function wsExecRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  r.get(
    '/v1/boxes/:id/exec/ws',
    {
      websocket: true,
      schema: {
        summary:
          'Interactive exec over a WebSocket (channel framing; see docs/api.md). Browsers without an Authorization header offer the subprotocols sbx.v1 and sbx.bearer.<key>',
        tags: ['exec'],
        params: boxIdParam,
        querystring: WsExecQuery,
        response: replies(
          { 101: noContent('Switching Protocols: the WebSocket (subprotocol sbx.v1), framed as docs/api.md says; errors after it are control frames') },
          [...COMMON_ERRORS, 409, 504],
        ),
      },
      // Authorization, ownership and the query are checked before the upgrade: a bad request
      // gets a plain HTTP error, never a socket.
      preHandler: async (req) => {
        const { id } = req.params as { id: string };
        await boxFor(ctx, req.caller, id);
        fromQuery(req.query as z.infer<typeof WsExecQuery>);
        if (ctx.shuttingDown()) throw new SbxError('not_available', 'the server is shutting down');
      },
    },
    (socket, req) => {
      void runSession(ctx, socket, req as FastifyRequest);
    },
  );
}

async function runSession(ctx: ServerContext, ws: WebSocket, req: FastifyRequest): Promise<void> {
  const started = performance.now();
  const { id } = req.params as { id: string };
  let stream: ExecStream | undefined;
  let finished = false;
  let resolveDone!: () => void;
  const done = new Promise<void>((resolve) => (resolveDone = resolve));
  let pending = 0;
  const paused: Array<{ pause(): void; resume(): void }> = [];
  let outputPaused = false;

  const send = (buf: Buffer) => {
    if (ws.readyState !== ws.OPEN) return;
    pending += buf.length;
    ws.send(buf, { binary: true }, () => {
      pending -= buf.length;
      if (outputPaused && pending <= LOW_WATER) {
        outputPaused = false;
        for (const s of paused) s.resume();
      }
    });
    if (!outputPaused && pending > HIGH_WATER) {
      outputPaused = true;
      for (const s of paused) s.pause();
    }
  };

  const fail = (err: unknown, closeCode = 1011) => {
    if (finished) return;
    finished = true;
    const { body } = mapError(err);
    send(control(body));
    // A socket paused for stdin would never read the client's close frame.
    ws.resume();
    ws.close(closeCode, body.error.code);
    if (stream) void stream.cancel().catch(() => undefined);
    resolveDone();
  };

  ctx.streams.add({ done, abort: (reason) => fail(reason, 1001) });
  ctx.metrics.openStreams.inc({ transport: 'ws' });
  void done.then(() => {
    ctx.metrics.openStreams.dec({ transport: 'ws' });
    ctx.metrics.execDuration.observe({ transport: 'ws' }, (performance.now() - started) / 1000);
  });

  let startTimer: NodeJS.Timeout | undefined;
  const queued: Buffer[] = [];
  let onMessage: (data: Buffer) => void = (data) => queued.push(data);
  ws.on('message', (data: Buffer, isBinary: boolean) => {
    if (!isBinary) return fail(invalidArgument('frame', 'send binary frames: first byte is the channel'), 1003);
    onMessage(data);
  });
  ws.on('close', () => {
    clearTimeout(startTimer);
    if (!finished) {
      finished = true;
      // The client went away: the process is killed inside the box, not left running.
      if (stream) void stream.cancel().catch(() => undefined);
      ctx.metrics.execs.inc({ transport: 'ws', outcome: 'client_closed' });
      resolveDone();
    }
  });
  ws.on('error', () => undefined);
  // While the socket is paused (the process's stdin is full) nothing is read, so a client that
  // left or cut the connection is never seen; a ping is a write, which fails once the peer is gone
  // and closes the socket, and the close handler above kills the process.
  const watchdog = setInterval(() => {
    if (ws.isPaused && ws.readyState === ws.OPEN) ws.ping();
  }, PAUSED_PING_MS);
  void done.then(() => clearInterval(watchdog));

  try {
    let spec = fromQuery(req.query as z.infer<typeof WsExecQuery>);
    if (!spec) {
      spec = await new Promise<WsExec>((resolve, reject) => {
        startTimer = setTimeout(() => reject(new SbxError('timeout', `send the {"exec":{...}} control frame within ${START_TIMEOUT_MS} ms`)), START_TIMEOUT_MS);
        const first = (data: Buffer) => {
          clearTimeout(startTimer);
          onMessage = (d) => queued.push(d);
          try {
            if (data[0] !== CHANNEL.control) throw invalidArgument('frame', 'without cmd in the query, the first frame must be control {"exec":{...}}');
            const msg = parseJson(data.subarray(1)) as { exec?: unknown };
            resolve(parseOrThrow(WsExecSchema, msg?.exec, 'exec', 'exec'));
          } catch (err) {
            reject(err);
          }
        };
        const q = queued.shift();
        if (q) first(q);
        else onMessage = first;
      });
    }
    if (finished) return;
    const box = await boxFor(ctx, req.caller, id);
    const { cmd, ...opts } = spec;
    stream = await box.stream(cmd, opts);
    if (finished) {
      void stream.cancel().catch(() => undefined);
      return;
    }
    const s = stream;
    s.stdin.on('error', () => undefined);
    onMessage = (data) => handleInput(s, ws, data, fail);
    for (const q of queued.splice(0)) handleInput(s, ws, q, fail);
    s.stdin.on('drain', () => ws.resume());
    const pump = (readable: ExecStream['stdout'], channel: number) =>
      new Promise<void>((resolve) => {
        paused.push(readable);
        if (outputPaused) readable.pause();
        readable.on('data', (chunk: Buffer) => send(frame(channel, chunk)));
        readable.once('end', resolve);
        readable.once('close', resolve);
        readable.once('error', () => resolve());
      });
    const [exitCode] = await Promise.all([s.wait(), pump(s.stdout, CHANNEL.stdout), pump(s.stderr, CHANNEL.stderr)]);
    if (finished) return;
    finished = true;
    send(control({ exit: exitCode }));
    ws.resume();
    ws.close(1000, 'exit');
    ctx.metrics.execs.inc({ transport: 'ws', outcome: 'exited' });
    resolveDone();
  } catch (err) {
    ctx.metrics.execs.inc({ transport: 'ws', outcome: 'error' });
    fail(err, err instanceof SbxError && err.code === 'invalid_argument' ? 1008 : 1011);
  }
}

/** How often a paused socket is probed for a client that went away. */
const PAUSED_PING_MS = 1000;

function parseJson(buf: Buffer): unknown {
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch {
    throw invalidArgument('frame', 'control frames carry UTF-8 JSON');
  }
}

function handleInput(stream: ExecStream, ws: WebSocket, data: Buffer, fail: (err: unknown, code?: number) => void): void {
  const channel = data[0];
  switch (channel) {
    case CHANNEL.stdin:
      if (stream.stdin.writableEnded) return;
      if (!stream.stdin.write(data.subarray(1))) ws.pause();
      return;
    case CHANNEL.stdinEof:
      if (!stream.stdin.writableEnded) stream.stdin.end();
      return;
    case CHANNEL.control: {
      let msg: { resize?: unknown };
      try {
        msg = parseJson(data.subarray(1)) as { resize?: unknown };
      } catch (err) {
        return fail(err, 1008);
      }
      if (msg && typeof msg === 'object' && 'resize' in msg) {
        const size = z
          .object({ cols: z.number().int().min(1).max(10_000), rows: z.number().int().min(1).max(10_000) })
          .strict()
          .safeParse(msg.resize);
        if (!size.success) return fail(invalidArgument('resize', 'must be {"cols":N,"rows":N}'), 1008);
        void stream.resize(size.data).catch(() => undefined);
      }
      return;
    }
    default:
      return fail(invalidArgument('frame', `unknown channel ${String(channel)}`), 1008);
  }
}
