import type { Readable } from 'node:stream';

export interface Demuxed {
  stdout: Buffer;
  stderrBytes: number;
}

const HEADER = 8;

/**
 * Reads a multiplexed exec body (8-byte header: stream, 0, 0, 0, big-endian length) to its end,
 * keeping stdout and counting stderr. Frames may be split across chunks at any byte.
 */
export async function readFrames(body: Readable): Promise<Demuxed> {
  const out: Buffer[] = [];
  let stderrBytes = 0;
  let pending: Buffer = Buffer.alloc(0);
  for await (const chunk of body) {
    pending = pending.length === 0 ? (chunk as Buffer) : Buffer.concat([pending, chunk as Buffer]);
    while (pending.length >= HEADER) {
      const size = pending.readUInt32BE(4);
      if (pending.length < HEADER + size) break;
      if (pending[0] === 2) stderrBytes += size;
      else out.push(pending.subarray(HEADER, HEADER + size));
      pending = pending.subarray(HEADER + size);
    }
  }
  return { stdout: Buffer.concat(out), stderrBytes };
}
