import type { PassThrough } from 'node:stream';

const HEADER = 8;
/** Bytes handed to a stream are copied into slabs of this size: one allocation per slab, not one per read. */
const SLAB_BYTES = 64 * 1024;

/**
 * Where an exec's output goes. Each side is handed bytes that are valid only during the call
 * (the socket reuses its read buffer for the next read): it copies what it keeps.
 */
export interface ExecOutput {
  stdout(bytes: Buffer): void;
  stderr(bytes: Buffer): void;
  /** False while a reader is behind: the socket pauses until `whenReady` calls back. */
  ready(): boolean;
  whenReady(ready: () => void): void;
  /** The output is over (a half frame left over is dropped). */
  end(): void;
}

/**
 * Splits the engine's multiplexed exec/attach stream (8-byte frame header: stream type, 3 zero
 * bytes, big-endian payload length) into stdout and stderr as it is read; with `tty` the stream
 * is not multiplexed and all of it is stdout. Payload bytes are handed on as they arrive, never
 * gathered into whole frames: a frame of any size costs no buffering here. Stream types 0
 * (stdin) and 1 go to stdout, 2 and 3 (the engine's own error text) to stderr; frames of any
 * other type are skipped, so a stream that is not what we think can neither land on the wrong
 * side nor make us hold its bytes.
 */
export class StdStreamDemuxer {
  /** The header being read; only the first `headerFill` bytes are valid. */
  private readonly header = Buffer.alloc(HEADER);
  private headerFill = 0;
  /** Payload bytes of the current frame still to come, and where they go (undefined: dropped). */
  private remaining = 0;
  private target: 'stdout' | 'stderr' | undefined;

  constructor(
    private readonly output: Pick<ExecOutput, 'stdout' | 'stderr'>,
    private readonly tty = false,
  ) {}

  /** Hands on the bytes of one read; they are only read during the call. */
  write(bytes: Buffer): void {
    if (this.tty) return this.output.stdout(bytes);
    let at = 0;
    while (at < bytes.length) {
      if (this.remaining === 0) {
        const n = Math.min(HEADER - this.headerFill, bytes.length - at);
        bytes.copy(this.header, this.headerFill, at, at + n);
        this.headerFill += n;
        at += n;
        if (this.headerFill < HEADER) break;
        this.headerFill = 0;
        this.remaining = this.header.readUInt32BE(4);
        this.target = this.sideFor(this.header[0]!);
        continue;
      }
      const n = Math.min(this.remaining, bytes.length - at);
      if (this.target) this.output[this.target](bytes.subarray(at, at + n));
      at += n;
      this.remaining -= n;
    }
  }

  private sideFor(type: number): 'stdout' | 'stderr' | undefined {
    if (type === 0 || type === 1) return 'stdout';
    if (type === 2 || type === 3) return 'stderr';
    return undefined;
  }
}

/**
 * An exec's output as two streams for a reader (execStream): bytes are copied into slabs and
 * handed on as slices of them, so a slab is shared by the pieces of many reads. A reader that
 * is behind (its side's write returned false) holds the socket, not a growing buffer.
 */
export class StreamOutput implements ExecOutput {
  private slab = Buffer.alloc(0);
  private slabFill = 0;
  /** Sides whose reader is behind. */
  private readonly behind = new Set<PassThrough>();

  constructor(
    private readonly out: PassThrough,
    private readonly err: PassThrough,
  ) {}

  stdout(bytes: Buffer): void {
    this.handOn(this.out, bytes);
  }

  stderr(bytes: Buffer): void {
    this.handOn(this.err, bytes);
  }

  ready(): boolean {
    return this.behind.size === 0;
  }

  /** Calls `ready` once every side that was behind drained, or closed (a reader that gave up must not hold the other side). */
  whenReady(ready: () => void): void {
    let left = this.behind.size;
    if (left === 0) return ready();
    for (const side of this.behind) {
      const go = () => {
        side.off('drain', go);
        side.off('close', go);
        this.behind.delete(side);
        if (--left === 0) ready();
      };
      side.on('drain', go);
      side.on('close', go);
    }
  }

  end(): void {
    for (const side of [this.out, this.err]) if (!side.destroyed && !side.writableEnded) side.end();
  }

  private handOn(side: PassThrough, bytes: Buffer): void {
    // A side its reader destroyed or ended takes no more bytes, and must not stall the other.
    if (side.destroyed || side.writableEnded) return;
    if (this.slab.length - this.slabFill < bytes.length) {
      this.slab = Buffer.allocUnsafeSlow(Math.max(SLAB_BYTES, bytes.length));
      this.slabFill = 0;
    }
    const start = this.slabFill;
    this.slabFill += bytes.copy(this.slab, start);
    if (!side.write(this.slab.subarray(start, this.slabFill))) this.behind.add(side);
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
