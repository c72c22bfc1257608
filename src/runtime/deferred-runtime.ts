/**
 * A Runtime whose calls first wait for `ready()`: what an engine needs to talk to it (a client
 * library, its config) is loaded at first use, so that opening a runtime, or only importing it,
 * costs nothing. KubernetesRuntime is one: @kubernetes/client-node is ~1,900 files and ~130 MiB of
 * RSS, which a Manager with only Docker pools must not pay. Once `isReady()`, calls go straight
 * through.
 *
 * Properties (`address`, `capabilities`) and which optional methods exist are the runtime's own,
 * read without waiting, as is `capabilitiesFor`. `close` never waits: a runtime never used has nothing to load to close.
 * A `ready()` that fails fails the call; the next call tries again.
 *
 * A Proxy, as timed-runtime.ts, so that a method added to the Runtime seam is deferred without
 * touching this file; only the members that answer an AsyncIterable at once are named here.
 *
 * @example
 * return deferredRuntime(this, () => this.connect(), () => this.connection !== undefined);
 */
import type { Images, Runtime } from './types.js';

/** Members that return an AsyncIterable synchronously (the rest return promises): deferred to the first `next()`. */
const ITERABLES = new Set<PropertyKey>(['events', 'heartbeats', 'pull', 'build'] satisfies (keyof Runtime | keyof Images)[]);
/** Members called at once: `close`, and `capabilitiesFor`, which answers synchronously as `capabilities` does. */
const IMMEDIATE = new Set<PropertyKey>(['close', 'capabilitiesFor'] satisfies (keyof Runtime)[]);

async function* afterReady<T>(ready: () => Promise<void>, open: () => AsyncIterable<T>): AsyncGenerator<T> {
  await ready();
  yield* open();
}

function deferredObject<T extends object>(target: T, ready: () => Promise<void>, isReady: () => boolean): T {
  const bound = new Map<PropertyKey, { of: unknown; fn: unknown }>();
  let images: { of: unknown; proxy: unknown } | undefined;
  return new Proxy(target, {
    get(obj, key) {
      const value = Reflect.get(obj, key, obj) as unknown;
      if (key === 'images' && value !== null && typeof value === 'object') {
        if (images?.of !== value) images = { of: value, proxy: deferredObject(value, ready, isReady) };
        return images.proxy;
      }
      if (typeof value !== 'function' || typeof key === 'symbol' || key === 'constructor') return value;
      const fn = value as (...a: unknown[]) => unknown;
      if (isReady() || IMMEDIATE.has(key)) {
        const cached = bound.get(key);
        if (cached?.of === value) return cached.fn;
        const b = fn.bind(obj);
        bound.set(key, { of: value, fn: b });
        return b;
      }
      if (ITERABLES.has(key)) return (...args: unknown[]) => afterReady(ready, () => fn.apply(obj, args) as AsyncIterable<unknown>);
      return (...args: unknown[]) => ready().then(() => fn.apply(obj, args));
    },
  });
}

export function deferredRuntime<T extends Runtime>(rt: T, ready: () => Promise<void>, isReady: () => boolean): T {
  return deferredObject(rt, ready, isReady);
}
