/** Bytes crossing the node wire go in messages of at most this size (well under any message limit, and small enough to interleave streams). */
export const MAX_CHUNK_BYTES = 256 * 1024;

/** `data` in pieces of at most MAX_CHUNK_BYTES (views, not copies). */
export function* splitChunks(data: Uint8Array): Generator<Uint8Array> {
  if (data.length <= MAX_CHUNK_BYTES) {
    yield data;
    return;
  }
  for (let at = 0; at < data.length; at += MAX_CHUNK_BYTES) yield data.subarray(at, Math.min(data.length, at + MAX_CHUNK_BYTES));
}
