import type { Runtime } from '../runtime/types.js';

/**
 * Makes `runtime.remove` hold its answer after the container is gone, until `release()`: the
 * moment, short but real on a loaded machine, in which the engine no longer lists a box that
 * sbx is still removing. Every later remove passes through once released.
 *
 * @example
 * const held = holdRemoves(rt);
 * const removal = manager.remove(id);
 * await held.engineDropped; // the engine lists no container; manager.get(id) is not_found
 * held.release();
 * await removal;
 */
export function holdRemoves(runtime: Runtime): { engineDropped: Promise<void>; release: () => void } {
  const remove = runtime.remove.bind(runtime);
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let dropped!: () => void;
  const engineDropped = new Promise<void>((r) => (dropped = r));
  runtime.remove = async (id, opts) => {
    await remove(id, opts);
    dropped();
    await released;
  };
  return { engineDropped, release };
}
