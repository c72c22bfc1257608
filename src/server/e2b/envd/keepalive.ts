/**
 * envd's streams (process events, directory watches) send a keepalive event when nothing else
 * was sent for a while, so proxies and the SDK's idle timers see a live stream.
 */
export async function* withKeepalive<T>(source: AsyncIterable<T>, everyMs: number): AsyncGenerator<T | 'keepalive'> {
  const it = source[Symbol.asyncIterator]();
  let next = it.next();
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const idle = new Promise<'keepalive'>((resolve) => (timer = setTimeout(() => resolve('keepalive'), everyMs)));
      const got = await Promise.race([next, idle]).finally(() => clearTimeout(timer));
      if (got === 'keepalive') {
        yield 'keepalive';
        continue;
      }
      if (got.done) return;
      yield got.value;
      next = it.next();
    }
  } finally {
    void it.return?.();
  }
}
