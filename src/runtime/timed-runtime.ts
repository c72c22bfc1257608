/**
 * A Runtime that tells an observer how long each engine call took and how it ended, by
 * operation (`create`, `exec`, `images.pull`, …): the engine-call durations of sbx serve's
 * /metrics. It wraps any Runtime without knowing its engine.
 *
 * A Proxy rather than a class listing the methods, so a method added to the Runtime seam later
 * is timed (and passed through) without touching this file.
 *
 * @example
 * const rt = timedRuntime(openRuntime('local'), ({ op, ms, outcome }) => console.log(op, ms, outcome));
 */
import { SbxError } from '../errors.js';
import type { Runtime } from './types.js';

export interface EngineCall {
  /** The Runtime method, `images.` prefixed for image calls. */
  op: string;
  /** From the call to its promise settling; for `images.pull`/`images.build`, to the end of their progress. */
  ms: number;
  /** `ok`, or the SbxError code it failed with (`internal` for anything else). */
  outcome: string;
}

export type EngineCallObserver = (call: EngineCall) => void;

/**
 * Not timed: `events` and `heartbeats` are subscriptions that live as long as the pool, not calls. `execStream`
 * is timed until the stream is ready; the process's own run time is the exec metrics' business.
 */
const UNTIMED = new Set<PropertyKey>(['events', 'heartbeats']);

function outcomeOf(err: unknown): string {
  return err instanceof SbxError ? err.code : 'internal';
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof (v as { then?: unknown }).then === 'function';
}

function isAsyncIterable(v: unknown): v is AsyncIterable<unknown> {
  return v !== null && typeof v === 'object' && typeof (v as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === 'function';
}

/** Times one iteration to its end (done, thrown, or left early with `return`). */
function timedIterable<T>(it: AsyncIterable<T>, report: (outcome: string) => void): AsyncIterable<T> {
  return {
    [Symbol.asyncIterator]() {
      const inner = it[Symbol.asyncIterator]();
      let reported = false;
      const once = (outcome: string) => {
        if (reported) return;
        reported = true;
        report(outcome);
      };
      return {
        async next(...args: [] | [unknown]) {
          try {
            const r = await inner.next(...args);
            if (r.done) once('ok');
            return r;
          } catch (err) {
            once(outcomeOf(err));
            throw err;
          }
        },
        async return(value?: unknown) {
          once('ok');
          return inner.return ? inner.return(value) : { done: true as const, value: value as T };
        },
        async throw(err?: unknown) {
          once(outcomeOf(err));
          if (inner.throw) return inner.throw(err);
          throw err;
        },
      };
    },
  };
}

function timedObject<T extends object>(target: T, prefix: string, observe: EngineCallObserver): T {
  // Wrappers by property, with what they wrap: a property that changes gets a fresh wrapper.
  const wrapped = new Map<PropertyKey, { of: unknown; proxy: unknown }>();
  return new Proxy(target, {
    get(obj, key) {
      const value = Reflect.get(obj, key, obj) as unknown;
      if (typeof key === 'symbol' || UNTIMED.has(key)) return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(obj) : value;
      const cached = wrapped.get(key);
      if (cached && cached.of === value) return cached.proxy;
      if (key === 'images' && prefix === '' && value !== null && typeof value === 'object') {
        const proxy = timedObject(value, 'images.', observe);
        wrapped.set(key, { of: value, proxy });
        return proxy;
      }
      if (typeof value !== 'function') return value;
      const op = `${prefix}${key}`;
      const fn = value as (...a: unknown[]) => unknown;
      const timed = (...args: unknown[]) => {
        const started = performance.now();
        const report = (outcome: string) => {
          try {
            observe({ op, ms: performance.now() - started, outcome });
          } catch {
            // Metrics must never fail an engine call.
          }
        };
        let result: unknown;
        try {
          result = fn.apply(obj, args);
        } catch (err) {
          report(outcomeOf(err));
          throw err;
        }
        if (isThenable(result)) {
          return Promise.resolve(result).then(
            (v) => {
              report('ok');
              return v;
            },
            (err: unknown) => {
              report(outcomeOf(err));
              throw err;
            },
          );
        }
        if (isAsyncIterable(result)) return timedIterable(result, report);
        report('ok');
        return result;
      };
      wrapped.set(key, { of: value, proxy: timed });
      return timed;
    },
  });
}

/** `inner` with every call reported to `observe`; closing it closes `inner`. */
export function timedRuntime(inner: Runtime, observe: EngineCallObserver): Runtime {
  return timedObject(inner, '', observe);
}
