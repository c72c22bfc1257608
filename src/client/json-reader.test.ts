/**
 * JsonReader, fed the same documents cut at every size from one byte up: escapes, surrogate
 * pairs and multi-byte characters split across pieces, long strings kept aside, nesting; a
 * malformed document throws.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { JsonReader } from './json-reader.js';

const DOCS: unknown[] = [
  { a: `${'x'.repeat(5000)}"\\\u0000\ud83d\ude00é`, b: [1, { c: 'q"\\' }], d: null, e: true, f: -1.5e3, long: `${'\\'.repeat(3000)}"` },
  { exitCode: 0, stdout: '\u0000'.repeat(200_000), stderr: '', truncated: false, timedOut: false, durationMs: 3 },
  'plain',
  42,
  [],
  {},
  { 'k\u0000ey': '\ud800x', '\u2028': ['\u001f'.repeat(2000)] },
  {
    ['k'.repeat(2000)]: 'v',
    a: [{ ['\u0000'.repeat(1500)]: 'y'.repeat(3000) }, 'z'.repeat(1024)],
    ['q'.repeat(1024)]: { ['r'.repeat(4000)]: ['s'.repeat(2000)] },
  },
];

function read(text: Buffer, size: number): unknown {
  const r = new JsonReader();
  for (let i = 0; i < text.length; i += size) r.write(text.subarray(i, i + size));
  return r.end();
}

test('every document comes back as JSON.parse reads it, however it is cut', () => {
  for (const doc of DOCS) {
    for (const pretty of [undefined, 1]) {
      const text = Buffer.from(JSON.stringify(doc, null, pretty));
      for (const size of [1, 2, 3, 5, 6, 7, 64, 1000, 1 << 20]) assert.deepEqual(read(text, size), JSON.parse(text.toString()), `pieces of ${size}`);
    }
  }
});

test('a malformed document throws', () => {
  for (const bad of ['{"a":"x', '{"a":"\u0001"}', '{"a":1', '{"a":"\\x"}', '{"a":"\\u12"}', '']) {
    assert.throws(() => read(Buffer.from(bad), 1), SyntaxError, JSON.stringify(bad));
  }
});

test('long object keys stay keys: only long values are kept aside', () => {
  const key = 'k'.repeat(5000);
  const doc = { [key]: 1, nested: [{ [key]: 'v'.repeat(5000) }, ['w'.repeat(5000)]], after: { [`${key}2`]: { x: [key] } } };
  for (const size of [1, 7, 1 << 20]) {
    const got = read(Buffer.from(JSON.stringify(doc)), size) as Record<string, unknown>;
    assert.deepEqual(Object.keys(got), [key, 'nested', 'after'], `pieces of ${size}`);
    assert.deepEqual(got, doc, `pieces of ${size}`);
  }
});
