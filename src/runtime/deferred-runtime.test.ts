/**
 * deferredRuntime on the in-memory Runtime: calls reach the runtime only once `ready()` settled,
 * streams wait for it at their first read, properties and optional methods are the runtime's own
 * without waiting, `close` never loads anything, and a failed `ready()` is tried again.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SbxError, isSbxError } from '../errors.js';
import { MemoryRuntime } from '../testing/memory-runtime.js';
import { deferredRuntime } from './deferred-runtime.js';
import type { Runtime } from './types.js';

/** A ready() the test settles by hand, counting its calls. */
function gate(): { ready: () => Promise<void>; isReady: () => boolean; open(): void; fail(err: Error): void; calls: number } {
  let settle: { resolve: () => void; reject: (err: Error) => void } | undefined;
  let pending: Promise<void> | undefined;
  let done = false;
  const g = {
    calls: 0,
    ready: () => {
      g.calls++;
      pending ??= new Promise<void>((resolve, reject) => (settle = { resolve, reject })).then(
        () => {
          done = true;
        },
        (err: unknown) => {
          pending = undefined;
          throw err;
        },
      );
      return pending;
    },
    isReady: () => done,
    open: () => settle!.resolve(),
    fail: (err: Error) => settle!.reject(err),
  };
  return g;
}

test('calls wait for ready(), then go straight through; properties and optional methods do not wait', async () => {
  const inner = new MemoryRuntime({ registry: ['example/pulled:1'] });
  const g = gate();
  const rt = deferredRuntime(inner, g.ready, g.isReady);
  assert.equal(rt.address, inner.address);
  assert.deepEqual(rt.capabilities, inner.capabilities);
  assert.equal(rt.constructor, MemoryRuntime);
  // Which optional methods exist is the runtime's answer: the Manager asks before using them.
  const seam: Runtime = rt;
  assert.equal(seam.setEgress, undefined);
  const withEgress = deferredRuntime(Object.assign(new MemoryRuntime({ address: 'with-egress' }), { setEgress: async () => {} }), g.ready, g.isReady);
  assert.equal(typeof withEgress.setEgress, 'function');
  // capabilitiesFor answers at once, as capabilities does.
  const perRuntime = deferredRuntime(
    Object.assign(new MemoryRuntime({ address: 'per-runtime' }), { capabilitiesFor: (o: string | undefined) => ({ hostMounts: o === 'x' }) }),
    g.ready,
    g.isReady,
  );
  assert.deepEqual(perRuntime.capabilitiesFor?.('x'), { hostMounts: true });
  assert.equal(g.calls, 0, 'reading properties loads nothing');

  const creating = rt.create({ image: 'sbx-base:latest' });
  const exists = rt.images.exists('sbx-base:latest');
  // A stream is answered at once; its first read waits.
  const pull = rt.images.pull('example/pulled:1')[Symbol.asyncIterator]();
  const first = pull.next();
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(await inner.list({ all: true }), [], 'nothing reached the runtime before ready() settled');
  assert.equal(await inner.images.exists('example/pulled:1'), false, 'the pull waits too');
  assert.ok(g.calls >= 2);

  g.open();
  const id = await creating;
  assert.equal(await exists, true);
  await rt.start(id);
  assert.equal((await inner.inspect(id)).running, true);
  assert.equal((await first).done, false);
  while (!(await pull.next()).done);
  assert.equal(await inner.images.exists('example/pulled:1'), true);

  const before = g.calls;
  await rt.inspect(id);
  assert.equal(g.calls, before, 'once ready, calls do not ask again');
  await rt.remove(id, { force: true });
});

test('close never waits for ready(); a failed ready() fails the call and is tried again', async () => {
  const g = gate();
  const rt = deferredRuntime(new MemoryRuntime(), g.ready, g.isReady);
  await rt.close();
  assert.equal(g.calls, 0, 'closing an unused runtime loads nothing');

  const first = rt.ping();
  g.fail(new SbxError('invalid_argument', 'addr: no kubeconfig', { details: { field: 'addr' } }));
  await assert.rejects(first, (e) => isSbxError(e, 'invalid_argument'));
  const second = rt.ping();
  assert.equal(g.calls, 2);
  g.open();
  await second;
});
