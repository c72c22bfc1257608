/**
 * Server-Sent Events over a fastify reply, with backpressure: `send` resolves once the client
 * has taken the bytes (or the socket buffer has room), so a slow reader slows the producer.
 */
import { PassThrough } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';

export interface SseWriter {
  /** Writes one event; false when the buffer is full (wait for `drained()`). */
  event(name: string, data: unknown): boolean;
  drained(): Promise<void>;
  end(): void;
  /** True once the client went away. */
  readonly closed: boolean;
  /** Resolves when the client disconnects or the stream ends. */
  onClose: Promise<void>;
}

export function startSse(req: FastifyRequest, reply: FastifyReply): SseWriter {
  const out = new PassThrough({ highWaterMark: 64 * 1024 });
  let closed = false;
  const onClose = new Promise<void>((resolve) => {
    const gone = () => {
      closed = true;
      resolve();
    };
    // A client can leave while the route still awaits (a paused box waking up): its 'close' came
    // before this listener, and only the socket says so.
    if (reply.raw.destroyed || req.raw.socket.destroyed) gone();
    else reply.raw.once('close', gone);
  });
  reply.code(200).header('content-type', 'text/event-stream; charset=utf-8').header('cache-control', 'no-cache').header('x-accel-buffering', 'no').send(out);
  // A comment line first, so clients see the stream open before any output.
  out.write(': sbx\n\n');
  return {
    event(name, data) {
      if (closed || out.destroyed) return true;
      return out.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
    },
    drained() {
      return closed ? Promise.resolve() : whenDrained(out, reply);
    },
    end() {
      if (!out.writableEnded) out.end();
    },
    get closed() {
      return closed;
    },
    onClose,
  };
}

/** Resolves once `out` (a reply's body) has room again, or the client went away. */
export function whenDrained(out: PassThrough, reply: FastifyReply): Promise<void> {
  if (out.destroyed || !out.writableNeedDrain) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      out.off('drain', done);
      reply.raw.off('close', done);
      resolve();
    };
    out.once('drain', done);
    reply.raw.once('close', done);
  });
}
