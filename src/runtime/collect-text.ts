import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';

/** Output is decoded to text in batches of this many bytes. */
const DECODE_BATCH = 1024 * 1024;
/** How much of the output is kept whatever the limit (a start failure's message is read from it). */
const HEAD_BYTES = 4096;

/**
 * Decodes a stream to text as it arrives and keeps at most `limit` bytes of it; past that it
 * keeps reading (the process must not block on a full pipe) and drops what it reads. Chunks
 * are decoded in batches of about DECODE_BATCH: each batch becomes one string large enough
 * for V8 to place it straight in large-object space (no copying between heap generations),
 * its chunks are freed, and the text is a rope of those strings, never copied whole. `head`
 * keeps the first bytes whatever the limit, for a start failure's message.
 */
export function collectText(stream: Readable, limit: number) {
  const decoder = new StringDecoder('utf8');
  const state = { text: '', size: 0, truncated: false, head: undefined as Buffer | undefined, batch: [] as Buffer[], batchSize: 0 };
  const flush = () => {
    if (state.batchSize === 0) return;
    state.text += decoder.write(state.batch.length === 1 ? state.batch[0]! : Buffer.concat(state.batch, state.batchSize));
    state.batch = [];
    state.batchSize = 0;
  };
  stream.on('data', (chunk: Buffer) => {
    state.head ??= Buffer.from(chunk.subarray(0, HEAD_BYTES));
    if (state.size >= limit) {
      state.truncated = true;
      return;
    }
    const room = limit - state.size;
    if (chunk.length > room) {
      state.truncated = true;
      chunk = chunk.subarray(0, room);
    }
    state.size += chunk.length;
    state.batch.push(chunk);
    state.batchSize += chunk.length;
    if (state.batchSize >= DECODE_BATCH) flush();
  });
  return {
    get truncated() {
      return state.truncated;
    },
    get head() {
      return state.head?.toString('utf8') ?? '';
    },
    /** The text; a character the cut split in two is dropped, one the process left unfinished is U+FFFD. */
    text: () => {
      flush();
      return state.truncated ? state.text : state.text + decoder.end();
    },
  };
}
