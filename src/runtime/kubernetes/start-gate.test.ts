import assert from 'node:assert/strict';
import { test } from 'node:test';
import { StartGate } from './start-gate.js';

test('at most N hold a slot; a release lets the next in, and a second release of the same slot does nothing', async () => {
  const gate = new StartGate(2);
  const a = await gate.acquire();
  const b = await gate.acquire();
  let third = false;
  const c = gate.acquire().then((r) => {
    third = true;
    return r;
  });
  let fourth = false;
  const d = gate.acquire().then((r) => {
    fourth = true;
    return r;
  });
  await new Promise((r) => setImmediate(r));
  assert.equal(third, false);
  a();
  a();
  await new Promise((r) => setImmediate(r));
  assert.equal(third, true);
  assert.equal(fourth, false, 'releasing one slot twice freed only one');
  b();
  (await c)();
  (await d)();
});

test('a released slot goes to the caller waiting for it: one arriving meanwhile cannot slip in past the limit', async () => {
  const gate = new StartGate(1);
  const a = await gate.acquire();
  let bHolds = false;
  const b = gate.acquire().then((r) => {
    bHolds = true;
    return r;
  });
  a();
  // Called before the waiter has resumed: it must wait behind it, not take the slot.
  let cHolds = false;
  const c = gate.acquire().then((r) => {
    cHolds = true;
    return r;
  });
  await new Promise((r) => setImmediate(r));
  assert.equal(bHolds, true);
  assert.equal(cHolds, false, 'two callers hold the one slot');
  (await b)();
  (await c)();
  assert.equal(cHolds, true);
});
