import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isSbxError } from '../errors.js';
import { formatImageRef, parseImageRef } from './image-ref.js';

const HEX = 'a'.repeat(64);

test('valid references parse into their parts and format back unchanged', () => {
  const cases: Array<[string, ReturnType<typeof parseImageRef>]> = [
    ['sbx-base', { repository: 'sbx-base' }],
    ['sbx-base:latest', { repository: 'sbx-base', tag: 'latest' }],
    ['library/node:20-slim', { repository: 'library/node', tag: '20-slim' }],
    ['127.0.0.1:5000/sbx/pulltest:latest', { registry: '127.0.0.1:5000', repository: 'sbx/pulltest', tag: 'latest' }],
    ['localhost/x', { registry: 'localhost', repository: 'x' }],
    ['ghcr.io/a/b__c.d-e', { registry: 'ghcr.io', repository: 'a/b__c.d-e' }],
    [`node@sha256:${HEX}`, { repository: 'node', digest: `sha256:${HEX}` }],
    [`r.io:443/n:t@sha256:${HEX}`, { registry: 'r.io:443', repository: 'n', tag: 't', digest: `sha256:${HEX}` }],
    ['[::1]:5000/x', { registry: '[::1]:5000', repository: 'x' }],
  ];
  for (const [ref, parts] of cases) {
    assert.deepEqual(parseImageRef(ref), parts, ref);
    assert.equal(formatImageRef(parts), ref);
  }
});

test('invalid references are invalid_argument naming the field', () => {
  const bad = [
    '',
    'Sbx-Base',
    'UPPER/case',
    'sbx base',
    '../etc',
    'a/../b',
    'x\0',
    'x\n',
    'x:',
    'x:-tag',
    `x:${'t'.repeat(129)}`,
    'x@sha256:short',
    'x@',
    '-x',
    'x-',
    'a//b',
    '/x',
    'x/',
    'reg.io:port/x',
    `${'a'.repeat(256)}`,
  ];
  for (const ref of bad) {
    assert.throws(
      () => parseImageRef(ref, 'ref'),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'ref',
      JSON.stringify(ref),
    );
  }
  assert.throws(
    () => parseImageRef(42),
    (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'image',
  );
});
