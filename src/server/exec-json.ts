/**
 * The JSON answer of a buffered exec, written in pieces: the output goes from its bytes to the
 * socket a slice at a time, so no string of the whole output or of the whole answer is ever
 * made. That keeps the server's memory at about the kept bytes, and any output up to the cap
 * fits, however much JSON escaping inflates it (a NUL byte is six characters, `\u0000`; V8's
 * longest string is 2^29 - 24 characters).
 *
 * Output kept as bytes is escaped as bytes (escapeUtf8), not through JSON.stringify of its
 * text: the same JSON, byte for byte, at a fraction of the cost (1 MiB of NULs, 6 MiB of JSON:
 * ~3 ms against ~30 ms, and no 6 MiB of short-lived strings for the GC).
 */
import { isAscii } from 'node:buffer';
import { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type { CollectedOutput } from '../runtime/collect-text.js';
import { execOutputBytes } from '../runtime/collect-text.js';
import type { ExecResult } from '../runtime/types.js';

/** Characters escaped at a time (bytes come 64 KiB at a time from CollectedOutput.pieces). */
const SLICE = 64 * 1024;

/** An answer of at most this many bytes is written as one buffer with a Content-Length (no stream). */
export const SMALL_ANSWER_BYTES = 64 * 1024;

/** The result as JSON, in pieces of at most a few hundred KiB: the fields of ExecResult in their usual order. */
export function* execResultJson(r: ExecResult): Generator<string | Buffer> {
  const bytes = execOutputBytes(r);
  yield `{"exitCode":${JSON.stringify(r.exitCode)},"stdout":"`;
  yield* bytes ? escapedBytes(bytes.stdout) : escapedText(r.stdout);
  yield '","stderr":"';
  yield* bytes ? escapedBytes(bytes.stderr) : escapedText(r.stderr);
  yield `","truncated":${JSON.stringify(r.truncated)},"timedOut":${JSON.stringify(r.timedOut)},"durationMs":${JSON.stringify(r.durationMs)}}`;
}

/** The answer as frames (Accept: EXEC_FRAMES_TYPE), the WebSocket exec's channels with a length: see docs/api.md. */
export const EXEC_FRAMES_TYPE = 'application/vnd.sbx.exec-frames';
const CHANNEL = { stdout: 1, stderr: 2, result: 3 } as const;

/**
 * The result as frames: `[channel u8][length u32 BE][payload]`, stdout (1) and stderr (2) as
 * UTF-8 of the library's text, a piece at a time, then one result frame (3): the JSON of the
 * other fields. No escaping and no parsing of the output on either side.
 */
export function* execResultFrames(r: ExecResult): Generator<Buffer> {
  const bytes = execOutputBytes(r);
  for (const channel of [CHANNEL.stdout, CHANNEL.stderr]) {
    const name = channel === CHANNEL.stdout ? 'stdout' : 'stderr';
    for (const piece of bytes ? utf8Pieces(bytes[name]) : [Buffer.from(r[name])]) {
      if (piece.length) yield* frame(channel, piece);
    }
  }
  const { exitCode, truncated, timedOut, durationMs } = r;
  yield* frame(CHANNEL.result, Buffer.from(JSON.stringify({ exitCode, truncated, timedOut, durationMs })));
}

function* frame(channel: number, payload: Buffer): Generator<Buffer> {
  const head = Buffer.allocUnsafe(5);
  head[0] = channel;
  head.writeUInt32BE(payload.length, 1);
  yield head;
  yield payload;
}

/**
 * The answer's body: one buffer when it is small (sent with a Content-Length, no stream: most
 * execs print a few lines, and a stream's machinery and chunked encoding cost more than the
 * JSON), else a stream of its pieces.
 */
export function execAnswer(r: ExecResult, framed: boolean): Buffer | Readable {
  const pieces: Generator<string | Buffer> = framed ? execResultFrames(r) : execResultJson(r);
  const head: Buffer[] = [];
  let size = 0;
  for (let next = pieces.next(); !next.done; next = pieces.next()) {
    const b = typeof next.value === 'string' ? Buffer.from(next.value) : next.value;
    head.push(b);
    size += b.length;
    if (size > SMALL_ANSWER_BYTES) return Readable.from(chain(head, pieces), { objectMode: false });
  }
  return head.length === 1 ? head[0]! : Buffer.concat(head, size);
}

function* chain(head: Buffer[], rest: Generator<string | Buffer>): Generator<string | Buffer> {
  yield* head.splice(0);
  yield* rest;
}

/**
 * The kept output as whole UTF-8 characters, decoded as the library does (collect-text.ts): a
 * character the cut split is dropped, one left unfinished is U+FFFD. An ASCII piece read while
 * no character is pending passes as it is; any other goes through the decoder and back to
 * UTF-8, which turns invalid sequences into U+FFFD exactly as the library's text has them.
 */
function* utf8Pieces(out: CollectedOutput): Generator<Buffer> {
  const decoder = new StringDecoder('utf8');
  // Whether the decoder may hold the start of a character from the last piece.
  let pending = false;
  for (const piece of out.pieces!()) {
    if (!pending && isAscii(piece)) {
      if (piece.length) yield piece;
      continue;
    }
    const text = decoder.write(piece);
    pending = !endsWholeUtf8(piece);
    if (text) yield Buffer.from(text, 'utf8');
  }
  const rest = out.truncated ? '' : decoder.end();
  if (rest) yield Buffer.from(rest, 'utf8');
}

/** Whether a decoder fed `b` surely holds nothing after it: its last byte is ASCII (one ending in others may hold a character's start). */
function endsWholeUtf8(b: Buffer): boolean {
  return b.length > 0 && b[b.length - 1]! < 0x80;
}

function* escapedBytes(out: CollectedOutput): Generator<Buffer> {
  for (const piece of utf8Pieces(out)) yield escapeUtf8(piece);
}

/** A surrogate pair the slicing splits is written as two `\uXXXX` escapes, which JSON reads back as the pair. */
function* escapedText(s: string): Generator<string> {
  for (let i = 0; i < s.length; i += SLICE) yield JSON.stringify(s.slice(i, i + SLICE)).slice(1, -1);
}

/** JSON.stringify's escape of each byte below 0x20, `"` and `\`; undefined for bytes written as they are. */
const ESCAPES: (Buffer | undefined)[] = Array.from({ length: 256 }, (_, b) =>
  b < 0x20 || b === 0x22 || b === 0x5c ? Buffer.from(JSON.stringify(String.fromCharCode(b)).slice(1, -1), 'latin1') : undefined,
);
/** Bytes each byte grows by when escaped (0 for bytes written as they are). */
const GROWTH = Uint8Array.from(ESCAPES, (e) => (e ? e.length - 1 : 0));
/** Runs at least this long are written by Buffer.copy / Buffer.fill (native), shorter ones byte by byte. */
const NATIVE_RUN = 16;

/**
 * The inside of a JSON string for well-formed UTF-8 bytes, as JSON.stringify writes it for
 * their text: only control characters, `"` and `\` are escaped (bytes of 0x80 and up are
 * parts of characters, written as they are). Returns `utf8` itself when nothing needs escaping.
 * Runs of plain bytes are copied and runs of one escaped byte (NULs, say) filled natively.
 */
export function escapeUtf8(utf8: Buffer): Buffer {
  const n = utf8.length;
  let extra = 0;
  for (let i = 0; i < n; i++) extra += GROWTH[utf8[i]!]!;
  if (extra === 0) return utf8;
  const out = Buffer.allocUnsafe(n + extra);
  let o = 0;
  let i = 0;
  while (i < n) {
    let j = i;
    while (j < n && GROWTH[utf8[j]!] === 0) j++;
    if (j - i >= NATIVE_RUN) o += utf8.copy(out, o, i, j);
    else for (let k = i; k < j; k++) out[o++] = utf8[k]!;
    if (j === n) break;
    const b = utf8[j]!;
    const esc = ESCAPES[b]!;
    i = j + 1;
    while (i < n && utf8[i] === b) i++;
    const size = (i - j) * esc.length;
    if (i - j >= NATIVE_RUN) out.fill(esc, o, o + size);
    else for (let k = 0; k < size; k++) out[o + k] = esc[k % esc.length]!;
    o += size;
  }
  return out;
}
