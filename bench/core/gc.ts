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
    setFlagsFromString('--expose-gc');
    collect = runInNewContext('gc') as () => void;
  }
  collect();
}
