/** The buffered exec's JSON writer: bytes escaped as bytes give exactly what JSON.stringify writes for their text. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { escapeUtf8 } from './exec-json.js';

const stringified = (s: string) => JSON.stringify(s).slice(1, -1);

test('every ASCII character, alone and in runs short and long, is escaped as JSON.stringify does', () => {
  for (let c = 0; c < 0x80; c++) {
    for (const n of [1, 3, 15, 16, 17, 100]) {
      const s = `x${String.fromCharCode(c).repeat(n)}y`;
      assert.equal(escapeUtf8(Buffer.from(s)).toString(), stringified(s), `char ${c} x${n}`);
    }
  }
});

test('mixed text: multi-byte characters pass as they are, plain runs of any length around escapes', () => {
  const s = `é€😀"\\\n\t\0${'a'.repeat(40)}\u001f${'\0'.repeat(40)}z"${'ü'.repeat(20)}\\\\`;
  const chars = Array.from(s);
  for (let i = 0; i < chars.length; i++) {
    const piece = chars.slice(i).join('');
    assert.equal(escapeUtf8(Buffer.from(piece)).toString(), stringified(piece));
  }
  const plain = Buffer.from('nothing to escape: é');
  assert.equal(escapeUtf8(plain), plain, 'returned as it is');
});
