/**
 * A box's engine calls with their errors in the words of the box's users. A runtime names what
 * it was asked about, `container 4ae3…` (64 hex digits) or `pod …`, an id the users of the box
 * never gave; they know the box id. So every error of a call about one container is reworded to
 * name the box, and the container id stays in `details.containerId` for operators (the box's info
 * shows it too, so it tells a caller nothing new).
 */
import { SbxError } from '../errors.js';
import type { ExecStream, Runtime } from '../runtime/types.js';

/** The error with `containerId` (and its 12-digit short form) replaced by the box id; any other error as it is. */
export function inBoxTerms(err: unknown, containerId: string, boxId: string): unknown {
  if (!(err instanceof SbxError) || containerId === '' || containerId === boxId) return err;
  const ids = /^[0-9a-f]{64}$/.test(containerId) ? [containerId, containerId.slice(0, 12)] : [containerId];
  const anyId = ids.join('|');
  const named = new RegExp(`\\b(?:container|pod) (?:${anyId})\\b`, 'gi');
  const bare = new RegExp(`\\b(?:${anyId})\\b`, 'g');
  const reword = (text: string) => text.replace(named, `box ${boxId}`).replace(bare, boxId);
  const details = Object.fromEntries(Object.entries(err.details ?? {}).map(([k, v]) => [k, typeof v === 'string' ? reword(v) : v]));
  const message = reword(err.message);
  if (message === err.message && JSON.stringify(details) === JSON.stringify(err.details ?? {})) return err;
  return new SbxError(err.code, message, { cause: err, details: { ...details, containerId } });
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof (v as { then?: unknown }).then === 'function';
}

function isExecStream(v: unknown): v is ExecStream {
  return v !== null && typeof v === 'object' && typeof (v as { wait?: unknown }).wait === 'function';
}

/**
 * `runtime` with every failure reworded by inBoxTerms: thrown, rejected, or from a stream's
 * `wait()` (a command that could not start says so there). A Proxy, as timed-runtime.ts is, so a
 * method added to the Runtime seam later is covered without touching this file.
 */
export function boxRuntime(runtime: Runtime, containerId: string, boxId: string): Runtime {
  const reword = (err: unknown) => inBoxTerms(err, containerId, boxId);
  const settle = (v: unknown): unknown => {
    if (isThenable(v)) return Promise.resolve(v).then(settle, (err: unknown) => Promise.reject(reword(err)));
    if (isExecStream(v)) {
      const wait = () => v.wait().catch((err: unknown) => Promise.reject(reword(err)));
      return new Proxy(v, {
        get(s, key) {
          if (key === 'wait') return wait;
          const value = Reflect.get(s, key, s) as unknown;
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(s) : value;
        },
      });
    }
    return v;
  };
  return new Proxy(runtime, {
    get(rt, key) {
      const value = Reflect.get(rt, key, rt) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        try {
          return settle((value as (...a: unknown[]) => unknown).apply(rt, args));
        } catch (err) {
          throw reword(err);
        }
      };
    },
  });
}
