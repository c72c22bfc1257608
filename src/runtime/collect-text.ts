import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { DEFAULT_MAX_OUTPUT_BYTES } from './bounds.js';
import type { ExecOptions, ExecResult, OutputBudget } from './types.js';

/** Output is decoded to text in batches of this many bytes. */
const DECODE_BATCH = 1024 * 1024;
/** How much of the output is kept whatever the limit (a start failure's message is read from it). */
const HEAD_BYTES = 4096;
/** Kept bytes go into slabs: the first this small (most output is a few lines), each next one as large as all before. */
const FIRST_SLAB = 16 * 1024;
/** Under node's EXTERN_APEX (0xFBEE9 bytes): a longer latin1 string would be an external one, malloc's memory again. */
const MAX_SLAB = 512 * 1024;
/** Kept bytes are handed out this many at a time. */
const PIECE = 64 * 1024;

/** One stream's output as a buffered exec keeps it. */
export interface CollectedOutput {
  readonly truncated: boolean;
  /** The first bytes as text, whatever the limit (a start failure's message). */
  readonly head: string;
  /** The kept output as text; decoded once. */
  text(): string;
  /** The kept bytes in order, 64 KiB at a time; only for output collected against a budget. */
  pieces?(): Generator<Buffer>;
  /** Lets go of the kept bytes (whoever still holds the result), so their memory can go back; only with a budget. */
  drop?(): void;
}

/** A collector of output that is handed bytes valid only during the call (it copies what it keeps). */
export interface OutputCollector extends CollectedOutput {
  write(bytes: Buffer): void;
}

/** A stream's output collected for a buffered exec: as text, or as bytes drawn from `opts.outputBudget`. */
export function collectOutput(stream: Readable, opts: Pick<ExecOptions, 'maxOutputBytes' | 'outputBudget'>): CollectedOutput {
  const collector = outputCollector(opts);
  stream.on('data', (chunk: Buffer) => collector.write(chunk));
  return collector;
}

/** A buffered exec's collector of one stream's output, for a reader that hands it bytes itself. */
export function outputCollector(opts: Pick<ExecOptions, 'maxOutputBytes' | 'outputBudget'>): OutputCollector {
  const limit = opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  return opts.outputBudget ? collectBytes(limit, opts.outputBudget) : collectText(limit);
}

/**
 * Decodes output to text as it arrives and keeps at most `limit` bytes of it; past that it
 * keeps taking (the process must not block on a full pipe) and drops what it takes. Bytes are
 * copied into one staging buffer (growing from FIRST_SLAB to DECODE_BATCH, then reused) and
 * decoded each time it is full: a full batch becomes one string large enough for V8 to place it
 * straight in large-object space (no copying between heap generations), and the text is a rope
 * of those strings, never copied whole. No chunk given is held, so a reader may reuse its
 * buffer. `head` keeps the first bytes whatever the limit, for a start failure's message.
 */
export function collectText(limit: number): OutputCollector {
  const decoder = new StringDecoder('utf8');
  let text = '';
  let size = 0;
  let truncated = false;
  let head: Buffer | undefined;
  let staging = Buffer.alloc(0);
  let fill = 0;
  const flush = () => {
    if (fill > 0) text += decoder.write(staging.subarray(0, fill));
    fill = 0;
  };
  return {
    write(bytes) {
      head ??= Buffer.from(bytes.subarray(0, HEAD_BYTES));
      if (size >= limit) {
        truncated = true;
        return;
      }
      if (bytes.length > limit - size) {
        truncated = true;
        bytes = bytes.subarray(0, limit - size);
      }
      size += bytes.length;
      while (bytes.length > 0) {
        if (fill === staging.length) {
          flush();
          if (staging.length < DECODE_BATCH) staging = Buffer.allocUnsafeSlow(Math.min(DECODE_BATCH, Math.max(FIRST_SLAB, staging.length * 2)));
        }
        const n = bytes.copy(staging, fill);
        fill += n;
        bytes = bytes.subarray(n);
      }
    },
    get truncated() {
      return truncated;
    },
    get head() {
      return head?.toString('utf8') ?? '';
    },
    /** The text; a character the cut split in two is dropped, one the process left unfinished is U+FFFD. */
    text: () => {
      flush();
      return truncated ? text : text + decoder.end();
    },
  };
}

/**
 * Keeps at most `limit` bytes of a stream as bytes whose memory is taken from `budget` as it is
 * used, a slab at a time (no chunk given is held). When the limit is reached or the
 * budget grants nothing more, the rest is read and dropped and the output is truncated. The
 * holder of the budget gives the memory back once it let go of the output (sbx serve: after
 * the answer is written).
 *
 * A full slab becomes a latin1 string, one byte per character, that is, bytes on V8's heap: V8
 * hands the pages of a large string back to the system when it collects it, while memory from
 * malloc (a Buffer's) stays with the process after it is freed (glibc raises its mmap threshold
 * to the largest block freed): measured, 200 MB kept in Buffers left +190 MiB resident after the
 * answer and a full GC.
 */
export function collectBytes(limit: number, budget: OutputBudget): OutputCollector {
  const slabs: string[] = [];
  let staging: Buffer | undefined;
  let fill = 0;
  let allocated = 0;
  let truncated = false;
  let head: Buffer | undefined;
  let decoded: string | undefined;
  const write = (chunk: Buffer) => {
    head ??= Buffer.from(chunk.subarray(0, HEAD_BYTES));
    while (chunk.length > 0 && !truncated) {
      if (!staging || fill === staging.length) {
        const want = Math.min(limit - allocated, Math.max(FIRST_SLAB, Math.min(MAX_SLAB, Math.max(chunk.length, allocated))));
        const granted = want > 0 ? budget.take(want) : 0;
        if (granted <= 0) {
          truncated = true;
          break;
        }
        if (staging) slabs.push(staging.toString('latin1'));
        if (staging?.length !== granted) staging = Buffer.allocUnsafeSlow(granted);
        allocated += granted;
        fill = 0;
      }
      const n = chunk.copy(staging, fill, 0, Math.min(chunk.length, staging.length - fill));
      fill += n;
      chunk = chunk.subarray(n);
    }
  };
  /** The kept bytes in order, at most PIECE at a time. */
  function* pieces(): Generator<Buffer> {
    for (const slab of slabs) for (let i = 0; i < slab.length; i += PIECE) yield Buffer.from(slab.slice(i, i + PIECE), 'latin1');
    if (staging) for (let i = 0; i < fill; i += PIECE) yield staging.subarray(i, Math.min(fill, i + PIECE));
  }
  return {
    write,
    get truncated() {
      return truncated;
    },
    get head() {
      return head?.toString('utf8') ?? '';
    },
    text: () => {
      if (decoded !== undefined) return decoded;
      const decoder = new StringDecoder('utf8');
      let text = '';
      for (const p of pieces()) text += decoder.write(p);
      decoded = truncated ? text : text + decoder.end();
      return decoded;
    },
    pieces,
    drop: () => {
      slabs.length = 0;
      staging = undefined;
      fill = 0;
    },
  };
}

const OUTPUT = Symbol('sbx.execOutput');

type Fields = Omit<ExecResult, 'stdout' | 'stderr' | 'truncated'>;

/**
 * A buffered exec's result. Output collected as text gives plain strings. Output collected
 * against a budget stays bytes: `stdout` and `stderr` decode on first read, and
 * `execOutputBytes` hands the bytes to a writer that never makes one string of them (sbx
 * serve's JSON answer).
 */
export function execResult(fields: Fields, stdout: CollectedOutput, stderr: CollectedOutput): ExecResult {
  const truncated = stdout.truncated || stderr.truncated;
  if (!stdout.pieces || !stderr.pieces) {
    return { exitCode: fields.exitCode, stdout: stdout.text(), stderr: stderr.text(), truncated, timedOut: fields.timedOut, durationMs: fields.durationMs };
  }
  const r = { exitCode: fields.exitCode } as ExecResult;
  Object.defineProperty(r, 'stdout', { enumerable: true, get: () => stdout.text() });
  Object.defineProperty(r, 'stderr', { enumerable: true, get: () => stderr.text() });
  Object.assign(r, { truncated, timedOut: fields.timedOut, durationMs: fields.durationMs });
  Object.defineProperty(r, OUTPUT, { value: { stdout, stderr } });
  return r;
}

/**
 * Lets go of the bytes of a result collected against a budget, once they were written out: the
 * result may stay reachable a while (the last request of a keep-alive connection) and must not
 * hold the output all that time. Reading stdout or stderr afterwards gives what was decoded, or ''.
 */
export function dropExecOutput(r: ExecResult): void {
  const out = execOutputBytes(r);
  out?.stdout.drop?.();
  out?.stderr.drop?.();
}

/** The output of a result collected against a budget, as bytes; undefined for one collected as text. */
export function execOutputBytes(r: ExecResult): { stdout: CollectedOutput; stderr: CollectedOutput } | undefined {
  return (r as ExecResult & { [OUTPUT]?: { stdout: CollectedOutput; stderr: CollectedOutput } })[OUTPUT];
}
