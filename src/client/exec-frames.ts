/**
 * Reads a buffered exec's answer sent as frames (`Accept: application/vnd.sbx.exec-frames`,
 * docs/api.md): `[channel u8][length u32 BE][payload]`, stdout (1) and stderr (2) as UTF-8, then
 * the other fields as JSON (3). The output is never escaped nor parsed: its pieces are kept as
 * they arrive and decoded once. Channels it does not know are skipped (room for more).
 */
import { isAscii } from 'node:buffer';
import type { ExecResult } from '../runtime/types.js';

export const EXEC_FRAMES_TYPE = 'application/vnd.sbx.exec-frames';
const CHANNEL = { stdout: 1, stderr: 2, result: 3 } as const;
const HEAD = 5;

export class ExecFramesReader {
  private readonly stdout: Buffer[] = [];
  private readonly stderr: Buffer[] = [];
  private readonly result: Buffer[] = [];
  /** The start of a frame's head that the last chunk cut. */
  private head: Buffer = Buffer.alloc(0);
  private channel = 0;
  /** Payload bytes of the current frame still to come; -1 while its head is read. */
  private left = -1;

  write(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.left < 0) {
        const need = HEAD - this.head.length;
        const part = chunk.subarray(i, i + need);
        this.head = this.head.length ? Buffer.concat([this.head, part]) : part;
        i += part.length;
        if (this.head.length < HEAD) return;
        this.channel = this.head[0]!;
        const size = this.head.readUInt32BE(1);
        this.left = size === 0 ? -1 : size;
        this.head = Buffer.alloc(0);
        continue;
      }
      const part = chunk.subarray(i, i + this.left);
      this.sink()?.push(part);
      i += part.length;
      this.left -= part.length;
      if (this.left === 0) this.left = -1;
    }
  }

  /** The result; a SyntaxError for an answer cut short or without its result frame. */
  end(): ExecResult {
    if (this.left >= 0 || this.head.length) throw new SyntaxError('the exec answer ends within a frame');
    if (this.result.length === 0) throw new SyntaxError('the exec answer has no result frame');
    const fields = JSON.parse(Buffer.concat(this.result).toString('utf8')) as Omit<ExecResult, 'stdout' | 'stderr'>;
    return {
      exitCode: fields.exitCode,
      stdout: decode(this.stdout),
      stderr: decode(this.stderr),
      truncated: fields.truncated,
      timedOut: fields.timedOut,
      durationMs: fields.durationMs,
    };
  }

  private sink(): Buffer[] | undefined {
    if (this.channel === CHANNEL.stdout) return this.stdout;
    if (this.channel === CHANNEL.stderr) return this.stderr;
    return this.channel === CHANNEL.result ? this.result : undefined;
  }
}

/** The pieces' text: ASCII (most output) is copied as latin1, several times faster than the UTF-8 decoder. */
function decode(pieces: Buffer[]): string {
  const b = Buffer.concat(pieces);
  return b.toString(isAscii(b) ? 'latin1' : 'utf8');
}
