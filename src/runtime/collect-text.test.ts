import assert from 'node:assert/strict';
import { test } from 'node:test';
import { collectBytes, collectText } from './collect-text.js';
import type { OutputCollector } from './collect-text.js';
import type { OutputBudget } from './types.js';

/**
 * Hands `bytes` to the collector `size` bytes at a time as a socket with one reused read buffer
 * does: the buffer is scribbled over after each call, so a collector that kept it without
 * copying ends up with garbage.
 */
function feed(c: OutputCollector, bytes: Buffer, size: number): void {
  const reused = Buffer.alloc(size);
  for (let at = 0; at < bytes.length; at += size) {
    const n = bytes.copy(reused, 0, at, at + size);
    c.write(reused.subarray(0, n));
    reused.fill(0xee);
  }
}

const TEXT = `${'line of é and ✓ 🙂\n'.repeat(2000)}end`;
const BYTES = Buffer.from(TEXT);
const budget: OutputBudget = { take: (n) => n };

test('text collected from a reused buffer is exact, in reads of every size', () => {
  for (const size of [1, 2, 3, 7, 4096, 16 * 1024 + 5, BYTES.length]) {
    const c = collectText(1024 * 1024);
    feed(c, BYTES, size);
    assert.equal(c.text(), TEXT, `reads of ${size}`);
    assert.equal(c.truncated, false);
  }
});

test('text cut at a cap is the prefix up to it, a character the cut split dropped', () => {
  for (const cap of [1, 5, 17, 16 * 1024, 16 * 1024 + 1, 40_001]) {
    const c = collectText(cap);
    feed(c, BYTES, 4099);
    const kept = c.text();
    assert.equal(c.truncated, true);
    assert.ok(TEXT.startsWith(kept), `cap ${cap}: a prefix`);
    assert.ok(Buffer.byteLength(kept) <= cap && Buffer.byteLength(kept) > cap - 4, `cap ${cap}: kept ${Buffer.byteLength(kept)}`);
  }
});

test('bytes collected against a budget from a reused buffer are exact; head is the first bytes', () => {
  const c = collectBytes(1024 * 1024, budget);
  feed(c, BYTES, 1000);
  assert.ok(Buffer.concat([...c.pieces!()]).equals(BYTES));
  assert.equal(c.head, BYTES.subarray(0, 1000).toString());
});
