/**
 * Runs `fn` over `items`, at most `limit` at once; every item is tried, the first error is
 * thrown after all settled (so cleanup loops never stop half-way).
 */
export async function forEachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let firstError: unknown;
  let failed = false;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++] as T;
      await fn(item).catch((err: unknown) => {
        if (!failed) firstError = err;
        failed = true;
      });
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failed) throw firstError;
}
