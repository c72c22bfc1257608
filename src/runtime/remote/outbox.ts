/**
 * The request side of a client stream on the node wire: messages pushed by the caller, taken one
 * at a time by the transport (which takes the next once the last was written to the HTTP/2
 * stream), so `push` resolving means "on its way" and a writer that awaits it never buffers more
 * than one message ahead: backpressure from the node's flow control all the way to the caller.
 */
export class Outbox<T> implements AsyncIterable<T> {
  private readonly queue: Array<{ msg: T; taken: () => void }> = [];
  private ended = false;
  private wake: (() => void) | undefined;

  /** Queues a message; resolves when the transport took it (or the outbox ended: nothing more is sent). */
  push(msg: T): Promise<void> {
    if (this.ended) return Promise.resolve();
    return new Promise((resolve) => {
      this.queue.push({ msg, taken: resolve });
      this.wake?.();
    });
  }

  /** No more messages: the transport half-closes the stream once the queued ones went. Pending pushes resolve. */
  end(): void {
    this.ended = true;
    this.wake?.();
  }

  /** Drops what was not taken yet (the call is over) and ends. */
  close(): void {
    for (const q of this.queue.splice(0)) q.taken();
    this.end();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for (;;) {
      const next = this.queue.shift();
      if (next) {
        next.taken();
        yield next.msg;
        continue;
      }
      if (this.ended) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }
}
