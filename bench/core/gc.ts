import { setTimeout as sleep } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

let collect: (() => void) | undefined;

/**
 * A full GC, without needing `node --expose-gc` on the command line (`npm run bench` runs tsx
 * as is). Rows that allocate tens of MiB per op call it between ops: otherwise each op pays for
 * the garbage of the one before, and interleaving makes the two sides take turns paying.
 */
export function collectGarbage(): void {
  if (!collect) {
    // `node --expose-gc`'s own, when there: a new context costs memory the memory rows would count.
    collect = (globalThis as { gc?: () => void }).gc;
    if (!collect) {
      setFlagsFromString('--expose-gc');
      collect = runInNewContext('gc') as () => void;
    }
  }
  collect();
}

/** RSS and heap of this process holding only live memory, for the memory rows' readings. */
export async function settle(): Promise<{ rss: number; heapUsed: number }> {
  // Two passes: the first may only queue finalizers; the pause lets freed pages go back.
  collectGarbage();
  await sleep(50);
  collectGarbage();
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed };
}
