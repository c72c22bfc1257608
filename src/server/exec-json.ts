/**
 * The JSON answer of a buffered exec, written in pieces: the output goes from its bytes to the
 * socket a slice at a time, so no string of the whole output or of the whole answer is ever
 * made. That keeps the server's memory at about the kept bytes, and any output up to the cap
 * fits, however much JSON escaping inflates it (a NUL byte is six characters, `\u0000`; V8's
 * longest string is 2^29 - 24 characters).
 */
import { StringDecoder } from 'node:string_decoder';
import type { CollectedOutput } from '../runtime/collect-text.js';
import { execOutputBytes } from '../runtime/collect-text.js';
import type { ExecResult } from '../runtime/types.js';

/** Characters escaped at a time (bytes come 64 KiB at a time from CollectedOutput.pieces). */
const SLICE = 64 * 1024;

/** The result as JSON text, in pieces of at most a few hundred KiB: the fields of ExecResult in their usual order. */
export function* execResultJson(r: ExecResult): Generator<string> {
  const bytes = execOutputBytes(r);
  yield `{"exitCode":${JSON.stringify(r.exitCode)},"stdout":"`;
  yield* bytes ? escapedBytes(bytes.stdout) : escapedText(r.stdout);
  yield '","stderr":"';
  yield* bytes ? escapedBytes(bytes.stderr) : escapedText(r.stderr);
  yield `","truncated":${JSON.stringify(r.truncated)},"timedOut":${JSON.stringify(r.timedOut)},"durationMs":${JSON.stringify(r.durationMs)}}`;
}

/** Decodes as the library does (collect-text.ts): a character the cut split is dropped, one left unfinished is U+FFFD. */
function* escapedBytes(out: CollectedOutput): Generator<string> {
  const decoder = new StringDecoder('utf8');
  for (const piece of out.pieces!()) {
    const text = decoder.write(piece);
    if (text) yield escape(text);
  }
  const rest = out.truncated ? '' : decoder.end();
  if (rest) yield escape(rest);
}

/** A surrogate pair the slicing splits is written as two `\uXXXX` escapes, which JSON reads back as the pair. */
function* escapedText(s: string): Generator<string> {
  for (let i = 0; i < s.length; i += SLICE) yield escape(s.slice(i, i + SLICE));
}

function escape(text: string): string {
  return JSON.stringify(text).slice(1, -1);
}
