/**
 * timedRuntime on the in-memory Runtime: every call is reported once with its operation and
 * outcome, results and errors pass through unchanged, pulls are timed to the end of their
 * progress (or an early break), `events` is not a call, and a throwing observer changes nothing.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { MemoryRuntime } from '../testing/memory-runtime.js';
import type { EngineCall } from './timed-runtime.js';
import { timedRuntime } from './timed-runtime.js';

describe('timedRuntime', () => {
  test('reports each call once, by operation and outcome; results and errors pass through', async () => {
    const calls: EngineCall[] = [];
    const inner = new MemoryRuntime({ registry: ['example/pulled:1'], latencyMs: 5 });
    const rt = timedRuntime(inner, (c) => calls.push(c));
    assert.equal(rt.address, inner.address);
    assert.deepEqual(rt.capabilities, inner.capabilities);
    const id = await rt.create({ image: 'sbx-base:latest' });
    await rt.start(id);
    assert.equal((await rt.inspect(id)).running, true);
    await assert.rejects(rt.inspect('nope'), (e) => isSbxError(e, 'not_found'));
    assert.equal(await rt.images.exists('sbx-base:latest'), true);
    const progress = [];
    for await (const p of rt.images.pull('example/pulled:1')) progress.push(p);
    assert.ok(progress.length > 0);
    await assert.rejects(async () => {
      for await (const _ of rt.images.pull('example/missing:1')) {
        /* drained */
      }
    });
    assert.deepEqual(
      calls.map((c) => `${c.op}:${c.outcome}`),
      ['create:ok', 'start:ok', 'inspect:ok', 'inspect:not_found', 'images.exists:ok', 'images.pull:ok', 'images.pull:not_found'],
    );
    for (const c of calls) assert.ok(c.ms >= 4, `${c.op} took the runtime's latency (${c.ms} ms)`);
    // A method the seam gains later is timed and passed through without touching timed-runtime.ts.
    calls.length = 0;
    Object.assign(inner, { later: async (n: number) => n * 2 });
    assert.equal(await (rt as unknown as { later(n: number): Promise<number> }).later(21), 42);
    assert.deepEqual(
      calls.map((c) => c.op),
      ['later'],
    );
    await rt.remove(id, { force: true });
  });

  test('events is not timed; an early break ends a pull once; a throwing observer does not fail the call', async () => {
    const calls: EngineCall[] = [];
    const rt = timedRuntime(new MemoryRuntime({ registry: ['example/pulled:1'] }), (c) => {
      calls.push(c);
      throw new Error('observer bug');
    });
    const ac = new AbortController();
    const events = rt.events({ signal: ac.signal });
    ac.abort();
    for await (const _ of events) {
      /* ends at once */
    }
    for await (const _ of rt.images.pull('example/pulled:1')) break;
    assert.equal(await rt.images.exists('sbx-base:latest'), true);
    assert.deepEqual(
      calls.map((c) => c.op),
      ['images.pull', 'images.exists'],
    );
  });
});
