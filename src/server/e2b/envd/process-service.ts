/**
 * envd's `process.Process` service over the box's exec streams (`box.stream()`): Start runs a
 * command as the requesting user and streams its events; the process lives in the server's
 * process table (process-table.ts), so it outlives the client's connection and Connect re-attaches
 * by pid or tag. Input, stdin close, signals and terminal resizes act on that table's entry.
 */
import type { MessageInitShape } from '@bufbuild/protobuf';
import { Code, ConnectError, createContextKey } from '@connectrpc/connect';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type { Box } from '../../../sandbox/index.js';
import { Signal, type Process, type ProcessEventSchema, type ProcessSelector } from './gen/process/process_pb.js';
import { type ProcessTable, type ProcessUpdate, type TrackedProcess } from './process-table.js';
import { withKeepalive } from './keepalive.js';

/** The box a request is for, and the user it acts as. */
export interface ProcessCaller {
  box: Box;
  user: string;
  /** The user's home: where a process without a cwd starts, as in envd. */
  home: string;
}

export type ProcessCallerResolver = (ctx: HandlerContext) => Promise<ProcessCaller>;

/** Drops the request's connection, as E2B's proxy does when the sandbox under a stream is gone (set by routes.ts). */
export const dropConnectionKey = createContextKey<(() => void) | undefined>(undefined);

/** Whether the box is gone (killed, past its timeout): a process's end is then the sandbox's, not the command's. */
export type BoxGone = (boxId: string) => Promise<boolean>;

type EventInit = MessageInitShape<typeof ProcessEventSchema>;

/** The SDK asks for keepalives with this header, in seconds (it sends 50). */
const KEEPALIVE_HEADER = 'keepalive-ping-interval';
const DEFAULT_KEEPALIVE_MS = 50_000;

function keepaliveMs(ctx: HandlerContext): number {
  const seconds = Number(ctx.requestHeader.get(KEEPALIVE_HEADER));
  return Number.isFinite(seconds) && seconds >= 1 ? Math.min(seconds, 3600) * 1000 : DEFAULT_KEEPALIVE_MS;
}

function selectorOf(sel: ProcessSelector | undefined): { pid: number } | { tag: string } {
  const s = sel?.selector;
  if (s?.case === 'pid') return { pid: s.value };
  if (s?.case === 'tag') return { tag: s.value };
  throw new ConnectError('process: a pid or a tag is required', Code.InvalidArgument);
}

function eventOf(update: ProcessUpdate): EventInit {
  if (update.kind === 'end') return { event: { case: 'end', value: update.end } };
  return { event: { case: 'data', value: { output: { case: update.kind, value: update.data } } } };
}

/** `source`'s items until `signal` aborts, which throws its reason (the deadline's: deadline_exceeded). */
async function* untilAborted<T>(source: AsyncIterable<T>, signal: AbortSignal): AsyncGenerator<T> {
  const it = source[Symbol.asyncIterator]();
  let onAbort = (): void => undefined;
  const aborted = new Promise<never>((_resolve, reject) => (onAbort = () => reject(signal.reason)));
  aborted.catch(() => undefined);
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });
  try {
    for (;;) {
      const got = await Promise.race([it.next(), aborted]);
      if (got.done) return;
      yield got.value;
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
    void it.return?.();
  }
}

/**
 * The start event, then every update until the end; a disconnect only detaches this reader. The
 * request's deadline (Connect-Timeout-Ms: the SDK's `timeout`, 60 s unless given, none for 0)
 * ends the stream with deadline_exceeded, which the SDK raises as its TimeoutException.
 *
 * A process that ended because its box went away (killed, past its timeout) has no exit to
 * report: as on E2B, whose proxy loses the sandbox under the stream, the connection is dropped.
 * The SDKs then ask `/health`, which answers 502 for a gone sandbox, and raise it as one that was
 * killed (JS TimeoutError "… killed or reached its end of life …", Python
 * SandboxNotRunningException). Where nothing can drop it, the stream ends `unavailable` with
 * e2b's words for a gone sandbox ("was not found"), which they raise the same way.
 */
async function* follow(proc: TrackedProcess, boxId: string, ctx: HandlerContext, gone: BoxGone): AsyncGenerator<{ event: EventInit }> {
  const sub = proc.subscribe();
  try {
    yield { event: { event: { case: 'start', value: { pid: proc.pid } } } };
    for await (const item of untilAborted(withKeepalive(sub, keepaliveMs(ctx)), ctx.signal)) {
      if (item !== 'keepalive' && item.kind === 'end' && (await gone(boxId))) {
        ctx.values.get(dropConnectionKey)?.();
        throw new ConnectError(`sandbox ${boxId} was not found: it was killed (or reached its timeout) while process ${proc.pid} ran`, Code.Unavailable);
      }
      yield { event: item === 'keepalive' ? { event: { case: 'keepalive', value: {} } } : eventOf(item) };
    }
  } finally {
    proc.unsubscribe(sub);
  }
}

/**
 * As envd does, a process started with a deadline (Connect-Timeout-Ms) is killed when it passes,
 * whether or not its client is still there. The kill waits for the request's own deadline to end
 * the stream (deadline_exceeded, the SDK's TimeoutException), so the process's end cannot overtake
 * it; a client that went away before the deadline leaves the process running until then.
 */
function killAtDeadline(proc: TrackedProcess, ctx: HandlerContext): void {
  const ms = ctx.timeoutMs();
  if (ms === undefined) return;
  const deadline = Date.now() + ms;
  const onAbort = (): void => {
    const timer = setTimeout(
      () => {
        if (proc.running) proc.signal('SIGKILL').catch(() => undefined);
      },
      Math.max(0, deadline - Date.now()),
    );
    void proc.done.then(() => clearTimeout(timer));
  };
  if (ctx.signal.aborted) onAbort();
  else ctx.signal.addEventListener('abort', onAbort, { once: true });
}

export function processService(table: ProcessTable, resolve: ProcessCallerResolver, gone: BoxGone): Partial<ServiceImpl<typeof Process>> {
  const find = async (sel: ProcessSelector | undefined, ctx: HandlerContext) => {
    const { box } = await resolve(ctx);
    return table.find(box.id, selectorOf(sel));
  };

  return {
    async *start(req, ctx) {
      const { box, user, home } = await resolve(ctx);
      const config = req.process;
      if (!config?.cmd) throw new ConnectError('process.cmd is required', Code.InvalidArgument);
      const tty = req.pty !== undefined;
      const size = req.pty?.size;
      const stream = await box.stream([config.cmd, ...config.args], {
        user,
        ...(Object.keys(config.envs).length > 0 ? { env: config.envs } : {}),
        workDir: config.cwd || home,
        ...(tty ? { tty: true, ...(size && size.cols > 0 && size.rows > 0 ? { size: { cols: size.cols, rows: size.rows } } : {}) } : {}),
      });
      const proc = table.add(
        box.id,
        {
          cmd: config.cmd,
          args: [...config.args],
          envs: { ...config.envs },
          ...(config.cwd ? { cwd: config.cwd } : {}),
          ...(req.tag ? { tag: req.tag } : {}),
          tty,
        },
        stream,
      );
      // envd gives a process no stdin unless asked (a terminal always has one): it reads EOF.
      if (!tty && req.stdin !== true) stream.stdin.end();
      killAtDeadline(proc, ctx);
      yield* follow(proc, box.id, ctx, gone);
    },

    async *connect(req, ctx) {
      const { box } = await resolve(ctx);
      yield* follow(table.find(box.id, selectorOf(req.process)), box.id, ctx, gone);
    },

    async list(_req, ctx) {
      const { box } = await resolve(ctx);
      return {
        processes: table.list(box.id).map((p) => ({
          pid: p.pid,
          ...(p.spec.tag ? { tag: p.spec.tag } : {}),
          config: { cmd: p.spec.cmd, args: p.spec.args, envs: p.spec.envs, ...(p.spec.cwd ? { cwd: p.spec.cwd } : {}) },
        })),
      };
    },

    async sendInput(req, ctx) {
      const proc = await find(req.process, ctx);
      const input = req.input?.input;
      if (input?.case !== 'stdin' && input?.case !== 'pty') throw new ConnectError('input: stdin or pty bytes are required', Code.InvalidArgument);
      await proc.writeStdin(input.value);
      return {};
    },

    async closeStdin(req, ctx) {
      (await find(req.process, ctx)).closeStdin();
      return {};
    },

    async sendSignal(req, ctx) {
      const proc = await find(req.process, ctx);
      if (req.signal === Signal.SIGKILL) await proc.signal('SIGKILL');
      else if (req.signal === Signal.SIGTERM) await proc.signal('SIGTERM');
      else throw new ConnectError('signal: SIGTERM or SIGKILL', Code.InvalidArgument);
      return {};
    },

    async update(req, ctx) {
      const proc = await find(req.process, ctx);
      const size = req.pty?.size;
      if (!size || size.cols < 1 || size.rows < 1) throw new ConnectError('pty.size: cols and rows of at least 1 are required', Code.InvalidArgument);
      await proc.resize({ cols: size.cols, rows: size.rows });
      return {};
    },

    /**
     * Client streaming: a start event naming the process, then its input in order (the Python
     * SDK's `stream_input`; Connect streams a request body over HTTP/1.1 as well). Each chunk is
     * written before the next is read, so input keeps its order and a slow process pushes back.
     */
    async streamInput(requests, ctx) {
      let proc: TrackedProcess | undefined;
      for await (const req of requests) {
        const event = req.event;
        if (event.case === 'start') {
          if (proc) throw new ConnectError('stream input: one start event, first', Code.InvalidArgument);
          proc = await find(event.value.process, ctx);
        } else if (event.case === 'data') {
          if (!proc) throw new ConnectError('stream input: the start event naming the process comes first', Code.InvalidArgument);
          const input = event.value.input?.input;
          if (input?.case !== 'stdin' && input?.case !== 'pty') throw new ConnectError('input: stdin or pty bytes are required', Code.InvalidArgument);
          await proc.writeStdin(input.value);
        }
        // keepalive: nothing to do.
      }
      if (!proc) throw new ConnectError('stream input: the start event naming the process is required', Code.InvalidArgument);
      return {};
    },
  };
}
