/**
 * The node wire's server side: `sbx.node.v1.Node` (src/runtime/remote/proto) over a NodeService,
 * as Connect routes for `connectNodeAdapter({ routes: nodeRoutes(service) })` behind an HTTP/2
 * server (the TLS and who may connect are the server's, src/node/server.ts). Every error leaves
 * as a ConnectError carrying the SbxError (wire.ts). Streams respect flow control: a message is
 * produced when the previous one was taken, and a box's output is paused while too much waits.
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import type { Readable, Writable } from 'node:stream';
import { Readable as ReadableStream } from 'node:stream';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ConnectRouter, HandlerContext } from '@connectrpc/connect';
import { SbxError } from '../errors.js';
import { watchForKill } from '../runtime/kill-watch.js';
import { KILLED_EXIT_CODE, PROCESS_SIGNALS } from '../runtime/types.js';
import type { ExecStreamOptions, ProcessSignal } from '../runtime/types.js';
import { Node } from '../runtime/remote/gen/sbx/node/v1/node_pb.js';
import type { BuildRequest, DialRequest, ExecRequest, ExecResponseSchema } from '../runtime/remote/gen/sbx/node/v1/node_pb.js';
import { splitChunks } from '../runtime/remote/chunks.js';
import { toConnectError } from '../runtime/remote/wire.js';
import { invoke } from './invoke.js';
import type { NodeService } from './service.js';

/** A box's output waiting to be sent, at most (then its streams pause). */
const MAX_QUEUED_BYTES = 1024 * 1024;

type ExecOut = MessageInitShape<typeof ExecResponseSchema>;

/** A generator whose errors leave as ConnectErrors carrying the SbxError. */
async function* guarded<T>(gen: () => AsyncIterable<T>): AsyncGenerator<T> {
  try {
    yield* gen();
  } catch (err) {
    throw toConnectError(err);
  }
}

/** The first message of a stream, which must be of `kind`. */
async function first<M extends { msg: { case: string | undefined; value?: unknown } }, K extends string>(
  it: AsyncIterator<M>,
  kind: K,
): Promise<Extract<M['msg'], { case: K }>['value']> {
  const n = await it.next();
  if (n.done || n.value.msg.case !== kind) throw new SbxError('invalid_argument', `the stream must begin with '${kind}'`, { details: { field: kind } });
  return n.value.msg.value as Extract<M['msg'], { case: K }>['value'];
}

/** Writes with backpressure; resolves early when the stream is closed (a process that exited takes no more input). */
export async function writeWithBackpressure(w: Writable, data: Uint8Array): Promise<void> {
  if (w.destroyed || w.writableEnded) return;
  if (w.write(data)) return;
  // The wait that loses is taken off: each would leave its listeners on the stream until it
  // closes, two per write of a long upload.
  const settled = new AbortController();
  await Promise.race([once(w, 'drain', { signal: settled.signal }), once(w, 'close', { signal: settled.signal })]).catch(() => undefined);
  settled.abort();
}

/** stdout and stderr as one sequence of messages in arrival order, each stream paused while too much waits. */
async function* outputs(stdout: Readable, stderr: Readable): AsyncGenerator<ExecOut> {
  const queue: Array<{ kind: 'stdout' | 'stderr'; data: Buffer }> = [];
  let queued = 0;
  let open = 2;
  let wake: (() => void) | undefined;
  const follow = (s: Readable, kind: 'stdout' | 'stderr') => {
    let done = false;
    const end = () => {
      if (done) return;
      done = true;
      open--;
      wake?.();
    };
    s.on('data', (c: Buffer) => {
      queue.push({ kind, data: c });
      queued += c.length;
      if (queued > MAX_QUEUED_BYTES) {
        stdout.pause();
        stderr.pause();
      }
      wake?.();
    });
    s.once('end', end).once('close', end).once('error', end);
  };
  follow(stdout, 'stdout');
  follow(stderr, 'stderr');
  for (;;) {
    const item = queue.shift();
    if (item) {
      queued -= item.data.length;
      if (queued <= MAX_QUEUED_BYTES / 2) {
        stdout.resume();
        stderr.resume();
      }
      for (const part of splitChunks(item.data)) yield { msg: { case: item.kind, value: part } };
      continue;
    }
    if (open === 0) return;
    await new Promise<void>((resolve) => (wake = resolve));
    wake = undefined;
  }
}

function signalName(name: string): ProcessSignal {
  if (!Object.hasOwn(PROCESS_SIGNALS, name))
    throw new SbxError('invalid_argument', `signal: '${name}' is not one of ${Object.keys(PROCESS_SIGNALS).join(', ')}`);
  return name as ProcessSignal;
}

/**
 * One process: `start`, then the client's input (stdin, its half-close, resizes) applied as it
 * comes, while the output goes back; `exit` last. Kills and signals come out of band on the
 * handle `started` gives (NodeService.execs). The timeout is the node's own timer, and a client
 * that goes away kills the process, both inside the box.
 */
async function* exec(svc: NodeService, requests: AsyncIterable<ExecRequest>, ctx: HandlerContext): AsyncGenerator<ExecOut> {
  const it = requests[Symbol.asyncIterator]();
  const s = await first(it, 'start');
  const opts: ExecStreamOptions = {
    ...(s.workDir !== undefined ? { workDir: s.workDir } : {}),
    ...(Object.keys(s.env).length ? { env: { ...s.env } } : {}),
    ...(s.user !== undefined ? { user: s.user } : {}),
    ...(s.tty ? { tty: true, ...(s.size ? { size: { cols: s.size.cols, rows: s.size.rows } } : {}) } : {}),
  };
  const stream = await svc.execStream(s.id, [...s.cmd], opts);
  // After the process ended its stdin may say EPIPE: nothing to tell anyone.
  stream.stdin.on('error', () => undefined);
  const killed = watchForKill({ kill: () => stream.cancel() }, { ...(s.timeoutMs > 0 ? { timeoutMs: s.timeoutMs } : {}), signal: ctx.signal });
  const apply = async (m: ExecRequest['msg']) => {
    if (m.case === 'stdin') await writeWithBackpressure(stream.stdin, m.value);
    else if (m.case === 'stdinEof') stream.stdin.end();
    else if (m.case === 'resize') await stream.resize({ cols: m.value.cols, rows: m.value.rows });
  };
  const input = (async () => {
    for (let n = await it.next(); !n.done; n = await it.next()) {
      // A resize or signal that fails (the process just ended, a bad name) does not stop the input: a cancel may follow.
      await apply(n.value.msg).catch(() => undefined);
    }
  })();
  // The client's half of the stream ending (or breaking) is not the process's end: the client
  // cancels or goes away, which the signal and the kill watch handle.
  input.catch(() => undefined);
  const handle = randomBytes(12).toString('base64url');
  svc.execs.set(handle, {
    cancel: () => killed.kill('cancelled'),
    signal: async (name) => {
      if (!stream.signal) throw new SbxError('not_available', 'this process takes no single signals (no in-box agent)');
      await stream.signal(signalName(name));
    },
  });
  try {
    yield {
      msg: { case: 'started', value: { ...(stream.pid !== undefined ? { pid: stream.pid } : {}), signals: typeof stream.signal === 'function', handle } },
    };
    yield* outputs(stream.stdout, stream.stderr);
    const code = await stream.wait();
    killed.stop();
    yield { msg: { case: 'exit', value: { code: killed.reason ? KILLED_EXIT_CODE : code, timedOut: killed.reason === 'timeout' } } };
  } finally {
    svc.execs.delete(handle);
  }
}

/** A connection to a port of a box: `open`, then bytes both ways until both sides ended. */
async function* dial(svc: NodeService, requests: AsyncIterable<DialRequest>, ctx: HandlerContext) {
  const it = requests[Symbol.asyncIterator]();
  const o = await first(it, 'open');
  const socket = await svc.dialPort(o.id, o.port, { signal: ctx.signal });
  socket.on('error', () => undefined);
  const abort = () => socket.destroy();
  ctx.signal.addEventListener('abort', abort, { once: true });
  const closed = once(socket, 'close').catch(() => undefined);
  const input = (async () => {
    for (let n = await it.next(); !n.done; n = await it.next()) {
      if (n.value.msg.case === 'data') await writeWithBackpressure(socket, n.value.msg.value);
      else if (n.value.msg.case === 'eof') socket.end();
    }
    socket.end();
  })().catch(() => socket.destroy());
  try {
    yield { msg: { case: 'opened' as const, value: {} } };
    for await (const c of socket) for (const part of splitChunks(c as Buffer)) yield { msg: { case: 'data' as const, value: part } };
    yield { msg: { case: 'eof' as const, value: {} } };
    await Promise.race([input, closed]);
  } finally {
    ctx.signal.removeEventListener('abort', abort);
    socket.destroy();
  }
}

/** The context of a build: the client's chunks until `end`, read as the build consumes them. */
function buildContext(it: AsyncIterator<BuildRequest>): Readable {
  return ReadableStream.from(
    (async function* () {
      for (let n = await it.next(); !n.done; n = await it.next()) {
        if (n.value.msg.case === 'chunk') yield Buffer.from(n.value.msg.value);
        else if (n.value.msg.case === 'end') return;
      }
    })(),
  );
}

/**
 * The routes of the node service, for `connectNodeAdapter({ routes: nodeRoutes(service) })`.
 *
 * @example
 * http2.createServer(connectNodeAdapter({ routes: nodeRoutes(new NodeService(runtime, { name, dataDir })) }))
 */
export function nodeRoutes(svc: NodeService): (router: ConnectRouter) => void {
  return (router) =>
    router.service(Node, {
      async invoke(req) {
        try {
          return { resultJson: await invoke(svc, req.method, req.argsJson) };
        } catch (err) {
          throw toConnectError(err);
        }
      },
      exec: (requests, ctx) => guarded(() => exec(svc, requests, ctx)),
      dial: (requests, ctx) => guarded(() => dial(svc, requests, ctx)),
      logs: (req, ctx) =>
        guarded(async function* () {
          const chunks = await svc.logs(req.id, {
            follow: req.follow,
            ...(req.tail !== undefined ? { tail: req.tail } : {}),
            ...(req.since !== undefined ? { since: req.since } : {}),
            ...(req.sinceMs !== undefined ? { sinceMs: Number(req.sinceMs) } : {}),
            signal: ctx.signal,
          });
          yield { msg: { case: 'ready' as const, value: {} } };
          for await (const c of chunks) yield { msg: { case: 'chunk' as const, value: c } };
        }),
      events: (req, ctx) =>
        guarded(async function* () {
          for await (const e of svc.events({ labels: { ...req.labels }, signal: ctx.signal })) yield { event: e };
        }),
      pull: (req, ctx) =>
        guarded(async function* () {
          const auth = req.auth
            ? { username: req.auth.username, password: req.auth.password, ...(req.auth.server ? { server: req.auth.server } : {}) }
            : undefined;
          for await (const p of svc.pull(req.ref, { ...(auth ? { auth } : {}), signal: ctx.signal })) yield p;
        }),
      build: (requests) =>
        guarded(async function* () {
          const it = requests[Symbol.asyncIterator]();
          const s = await first(it, 'start');
          for await (const line of svc.build(buildContext(it), s.tag, { labels: { ...s.labels } })) yield { line };
        }),
      heartbeats: (_req, ctx) =>
        guarded(async function* () {
          const feed = await svc.heartbeats(ctx.signal);
          yield { msg: { case: 'ready' as const, value: {} } };
          for await (const hb of feed) yield { msg: { case: 'heartbeat' as const, value: hb } };
        }),
    });
}
