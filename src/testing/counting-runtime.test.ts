import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import type { Runtime } from '../runtime/types.js';
import { CountingRuntime, RUNTIME_OPS } from './counting-runtime.js';
import type { RuntimeOp } from './counting-runtime.js';
import { testEnv } from './env.js';
import { MemoryRuntime } from './memory-runtime.js';

const base = testEnv.baseImage;

/**
 * One call per operation of the interface. A Record over RuntimeOp, so TypeScript refuses this
 * table when the interface gains a method it does not call.
 */
const CALLS: Record<RuntimeOp, (rt: Runtime, id: string) => Promise<unknown>> = {
  ping: (rt) => rt.ping(),
  version: (rt) => rt.version(),
  create: (rt) => rt.create({ image: base }),
  start: (rt, id) => rt.start(id),
  stop: (rt, id) => rt.stop(id),
  pause: (rt, id) => rt.pause(id),
  unpause: (rt, id) => rt.unpause(id),
  commit: (rt, id) => rt.commit(id, 'sbx-counting-commit:1'),
  remove: (rt, id) => rt.remove(id, { force: true }),
  inspect: (rt, id) => rt.inspect(id),
  list: (rt) => rt.list(),
  processes: (rt, id) => rt.processes(id),
  events: (rt) => watchBriefly(rt),
  resources: (rt) => rt.resources(),
  stats: (rt, id) => rt.stats(id),
  exec: (rt, id) => rt.exec(id, ['true']),
  execStream: async (rt, id) => (await rt.execStream(id, ['true'])).wait(),
  logs: async (rt, id) => drain(await rt.logs(id)),
  setBoxEnv: (rt, id) => rt.setBoxEnv(id, { A: '1' }),
  dialPort: (rt, id) => rt.dialPort(id, 3000).catch(() => undefined),
  close: (rt) => rt.close(),
  'images.exists': (rt) => rt.images.exists(base),
  'images.pull': (rt) => drain(rt.images.pull('x:1')),
  'images.list': (rt) => rt.images.list(),
  'images.remove': (rt) => rt.images.remove('x:1', { force: true }),
  'images.build': (rt) => drain(rt.images.build(Readable.from([]), 'y:1')),
};

async function setup(): Promise<{ rt: CountingRuntime; inner: MemoryRuntime; id: string }> {
  const inner = new MemoryRuntime({ registry: ['x:1'], images: [base, 'x:1'] });
  const id = await inner.create({ image: base });
  await inner.start(id);
  return { rt: new CountingRuntime(inner), inner, id };
}

describe('CountingRuntime', () => {
  test('RUNTIME_OPS names every method of Runtime and Images, and the wrapper has each one', async () => {
    assert.deepEqual([...RUNTIME_OPS].sort(), Object.keys(CALLS).sort());
    assert.equal(new Set(RUNTIME_OPS).size, RUNTIME_OPS.length);
    // Against the runtime's real shape too: every function an implementation exposes is counted.
    const { rt, inner } = await setup();
    const methods = (o: object) => Object.getOwnPropertyNames(Object.getPrototypeOf(o)).filter((k) => k !== 'constructor');
    const runtimeMethods = RUNTIME_OPS.filter((op) => !op.startsWith('images.'));
    const imageMethods = RUNTIME_OPS.filter((op) => op.startsWith('images.')).map((op) => op.slice('images.'.length));
    for (const m of runtimeMethods) assert.equal(typeof (rt as unknown as Record<string, unknown>)[m], 'function', m);
    assert.deepEqual(Object.keys(rt.images).sort(), [...imageMethods].sort());
    const countingApi = ['count', 'counts', 'total', 'reset', 'address', 'capabilities', 'capabilitiesFor'];
    assert.deepEqual(
      methods(rt)
        .filter((k) => !countingApi.includes(k))
        .sort(),
      [...runtimeMethods].sort(),
      'CountingRuntime wraps exactly the Runtime methods',
    );
    assert.ok(
      imageMethods.every((m) => methods(inner.images).includes(m)),
      'MemoryImages has every Images method',
    );
  });

  for (const op of RUNTIME_OPS) {
    test(`counts ${op}, once, and passes the call through`, async () => {
      const { rt, id } = await setup();
      await CALLS[op](rt, id);
      assert.deepEqual(rt.counts(), { [op]: 1 });
      assert.equal(rt.count(op), 1);
      assert.equal(rt.total(), 1);
    });
  }

  test('a call that throws is counted too', async () => {
    const { rt, inner, id } = await setup();
    inner.failNext('start');
    await assert.rejects(rt.start(id), (e) => isSbxError(e, 'runtime_unavailable'));
    await assert.rejects(rt.inspect('ghost'), (e) => isSbxError(e, 'not_found'));
    await assert.rejects(rt.create({ image: '' }), (e) => isSbxError(e, 'invalid_argument'));
    assert.deepEqual(rt.counts(), { create: 1, inspect: 1, start: 1 });
  });

  test('images.pull counts when called, before it is iterated', async () => {
    const { rt } = await setup();
    const it = rt.images.pull('x:1');
    assert.equal(rt.count('images.pull'), 1);
    await drain(it);
    assert.equal(rt.count('images.pull'), 1);
  });

  test('total, counts and reset; address and capabilities are the inner runtime’s and not counted', async () => {
    const { rt, inner, id } = await setup();
    assert.equal(rt.address, inner.address);
    assert.equal(rt.capabilities, inner.capabilities);
    assert.equal(rt.total(), 0);
    await rt.inspect(id);
    await rt.inspect(id);
    await rt.list();
    assert.deepEqual(rt.counts(), { inspect: 2, list: 1 });
    assert.equal(rt.total(), 3);
    rt.reset();
    assert.deepEqual(rt.counts(), {});
    assert.equal(rt.total(), 0);
    assert.equal(rt.count('inspect'), 0);
  });

  test('results come back unchanged', async () => {
    const { rt, inner, id } = await setup();
    inner.onExec = () => ({ stdout: 'hi\n', exitCode: 3 });
    const r = await rt.exec(id, ['echo']);
    assert.equal(r.stdout, 'hi\n');
    assert.equal(r.exitCode, 3);
    assert.deepEqual(await rt.inspect(id), await inner.inspect(id));
  });
});

/** Iterates `events` until a signal aborts it a moment later. */
async function watchBriefly(rt: Runtime): Promise<void> {
  const ac = new AbortController();
  setTimeout(() => ac.abort(), 5);
  await drain(rt.events({ signal: ac.signal }));
}

async function drain(it: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of it) {
    /* consume */
  }
}
