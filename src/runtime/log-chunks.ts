/**
 * The engine-neutral half of `Runtime.logs`: timestamped pieces of output in, LogChunks out
 * (UTF-8 decoded per stream, so a character split across pieces stays whole; pieces before the
 * asked time dropped, since engines take whole seconds), the engine's stream closed however the
 * reader leaves.
 */
import { StringDecoder } from 'node:string_decoder';
import { SbxError } from '../errors.js';
import { isoNanos } from './spec.js';
import type { LogChunk } from './types.js';

export interface LogPiece {
  stream: 'stdout' | 'stderr';
  /** ISO 8601, as the engine wrote it. */
  time: string;
  data: Buffer;
}

/**
 * @param since nanoseconds since the epoch: pieces written before are dropped.
 * @param close releases the engine's stream (called once, at the end or when the reader leaves).
 * @param signal an abort ends the iteration quietly.
 * @param settled awaited when the pieces ended by themselves, before the iteration ends (the
 *   engine's state catching up with the end of a followed log).
 */
export function logChunks(
  pieces: AsyncIterable<LogPiece> | Iterable<LogPiece>,
  since: bigint | undefined,
  close?: () => void,
  signal?: AbortSignal,
  settled?: () => Promise<void>,
): AsyncIterable<LogChunk> {
  return (async function* () {
    const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
    const onAbort = () => close?.();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      // Aborted before the first read: the listener above will never fire.
      if (signal?.aborted) return;
      for await (const p of pieces) {
        if (signal?.aborted) return;
        if (since !== undefined && isoNanos(p.time) < since) continue;
        const data = decoders[p.stream].write(p.data);
        if (data) yield { stream: p.stream, data, time: p.time };
      }
      for (const stream of ['stdout', 'stderr'] as const) {
        const rest = decoders[stream].end();
        if (rest) yield { stream, data: rest, time: new Date().toISOString() };
      }
      if (settled && !signal?.aborted) await settled();
    } catch (err) {
      if (signal?.aborted) return;
      if (err instanceof SbxError) throw err;
      throw new SbxError('runtime_unavailable', `the log stream broke off: ${(err as Error).message}`, { cause: err });
    } finally {
      signal?.removeEventListener('abort', onAbort);
      close?.();
    }
  })();
}
