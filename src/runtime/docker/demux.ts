import { Writable } from 'node:stream';
import type { PassThrough } from 'node:stream';

const HEADER = 8;

/**
 * Splits the engine's multiplexed exec/attach stream (8-byte frame header: stream type, 3 zero
 * bytes, big-endian payload length) into stdout and stderr, keeping backpressure: a slow
 * reader of either side slows the socket instead of buffering without bound.
 *
 * Payload bytes are handed on as they arrive (slices of the socket's own chunks), never
 * gathered into whole frames: a frame of any size costs no copy and no buffering here.
 * Stream types 0 (stdin) and 1 go to stdout, 2 and 3 (the engine's own error text) to stderr;
 * frames of any other type are skipped, so a stream that is not what we think can neither
 * land on the wrong side nor make us hold its bytes.
 */
export class StdStreamDemuxer extends Writable {
  /** The header being read; only the first `headerFill` bytes are valid. */
  private readonly header = Buffer.alloc(HEADER);
  private headerFill = 0;
  /** Payload bytes of the current frame still to come, and where they go (undefined: dropped). */
  private remaining = 0;
  private target: PassThrough | undefined;

  constructor(
    private readonly stdout: PassThrough,
    private readonly stderr: PassThrough,
  ) {
    super();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    const waits = new Set<PassThrough>();
    let at = 0;
    while (at < chunk.length) {
      if (this.remaining === 0) {
        const n = Math.min(HEADER - this.headerFill, chunk.length - at);
        chunk.copy(this.header, this.headerFill, at, at + n);
        this.headerFill += n;
        at += n;
        if (this.headerFill < HEADER) break;
        this.headerFill = 0;
        this.remaining = this.header.readUInt32BE(4);
        this.target = this.streamFor(this.header[0]!);
        continue;
      }
      const n = Math.min(this.remaining, chunk.length - at);
      const payload = chunk.subarray(at, at + n);
      at += n;
      this.remaining -= n;
      const target = this.target;
      // A side its reader destroyed or ended takes no more bytes, and must not stall the other.
      if (!target || target.destroyed || target.writableEnded) continue;
      if (!target.write(payload)) waits.add(target);
    }
    if (waits.size === 0) return done();
    let left = waits.size;
    for (const w of waits) {
      // 'close' too: a reader that destroys its side must not keep the socket paused forever.
      const go = () => {
        w.off('drain', go);
        w.off('close', go);
        if (--left === 0) done();
      };
      w.on('drain', go);
      w.on('close', go);
    }
  }

  override _final(done: (err?: Error | null) => void): void {
    for (const side of [this.stdout, this.stderr]) if (!side.destroyed) side.end();
    done();
  }

  private streamFor(type: number): PassThrough | undefined {
    if (type === 0 || type === 1) return this.stdout;
    if (type === 2 || type === 3) return this.stderr;
    return undefined;
  }
}

/**
 * Whole frames of the same multiplexed stream, for a reader that wants each frame as one piece
 * (the logs: the engine writes one log message per frame). `type` is the stream type (1 stdout,
 * 2 stderr); a frame is at most one log message, so gathering it is bounded.
 */
export async function* wholeFrames(body: AsyncIterable<Buffer> | Iterable<Buffer>): AsyncGenerator<{ type: number; payload: Buffer }> {
  let pending: Buffer = Buffer.alloc(0);
  for await (const chunk of body) {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    let at = 0;
    while (pending.length - at >= HEADER) {
      const size = pending.readUInt32BE(at + 4);
      if (pending.length - at - HEADER < size) break;
      yield { type: pending[at]!, payload: pending.subarray(at + HEADER, at + HEADER + size) };
      at += HEADER + size;
    }
    pending = pending.subarray(at);
  }
}
