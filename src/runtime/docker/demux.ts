import { Writable } from 'node:stream';
import type { PassThrough } from 'node:stream';

const HEADER = 8;

/**
 * Splits the engine's multiplexed exec/attach stream (8-byte frame header: stream type, 3 zero
 * bytes, big-endian payload length) into stdout and stderr, keeping backpressure: a slow
 * reader of either side slows the socket instead of buffering without bound.
 */
export class StdStreamDemuxer extends Writable {
  private pending: Buffer = Buffer.alloc(0);

  constructor(
    private readonly stdout: PassThrough,
    private readonly stderr: PassThrough,
  ) {
    super();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    const waits: PassThrough[] = [];
    while (this.pending.length >= HEADER) {
      const size = this.pending.readUInt32BE(4);
      if (this.pending.length < HEADER + size) break;
      const target = this.pending[0] === 2 ? this.stderr : this.stdout;
      const payload = this.pending.subarray(HEADER, HEADER + size);
      this.pending = this.pending.subarray(HEADER + size);
      if (size > 0 && !target.write(payload) && !waits.includes(target)) waits.push(target);
    }
    if (waits.length === 0) return done();
    let left = waits.length;
    for (const w of waits) w.once('drain', () => --left === 0 && done());
  }

  override _final(done: (err?: Error | null) => void): void {
    this.stdout.end();
    this.stderr.end();
    done();
  }
}
