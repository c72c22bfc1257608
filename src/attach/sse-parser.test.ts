import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SseParser } from './sse-parser.js';
import type { SseEvent } from './types.js';

function parse(chunks: (string | Uint8Array)[]): SseEvent[] {
  const p = new SseParser();
  const out: SseEvent[] = [];
  for (const c of chunks) out.push(...p.push(c));
  out.push(...p.end());
  return out;
}

/** The same events whatever the chunking: whole, split at every byte, at every pair of bytes. */
function parseEverySplit(input: string): SseEvent[] {
  const bytes = Buffer.from(input, 'utf8');
  const whole = parse([bytes]);
  for (let i = 0; i <= bytes.length; i++) {
    assert.deepEqual(parse([bytes.subarray(0, i), bytes.subarray(i)]), whole, `split at ${i}`);
  }
  if (bytes.length <= 200) {
    for (let i = 0; i <= bytes.length; i++)
      for (let j = i; j <= bytes.length; j++) {
        assert.deepEqual(parse([bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]), whole, `split at ${i} and ${j}`);
      }
  }
  assert.deepEqual(parse([...bytes].map((b) => Uint8Array.of(b))), whole, 'byte by byte');
  return whole;
}

test('sse: data lines, event, id carried over, retry, comments', () => {
  const events = parseEverySplit(': hello\n\ndata: one\n\nevent: tick\nid: 7\ndata: two\ndata:  three\nretry: 1500\n\ndata: four\n\n');
  assert.deepEqual(events, [
    { event: 'message', data: 'one' },
    { event: 'tick', id: '7', data: 'two\n three', retry: 1500 },
    { event: 'message', id: '7', data: 'four' },
  ]);
});

test('sse: CRLF, CR and LF line ends, mixed, give the same events', () => {
  const lf = 'data: a\ndata: b\n\nevent: e\ndata: c\n\n';
  const expected = [
    { event: 'message', data: 'a\nb' },
    { event: 'e', data: 'c' },
  ];
  assert.deepEqual(parseEverySplit(lf), expected);
  assert.deepEqual(parseEverySplit(lf.replace(/\n/g, '\r\n')), expected);
  assert.deepEqual(parseEverySplit(lf.replace(/\n/g, '\r')), expected);
  assert.deepEqual(parseEverySplit('data: a\r\ndata: b\r\revent: e\ndata: c\r\n\n'), expected);
});

test('sse: a leading BOM is dropped, a second one is not; UTF-8 split inside a character', () => {
  assert.deepEqual(parseEverySplit('\uFEFFdata: é€😀\n\n'), [{ event: 'message', data: 'é€😀' }]);
  assert.deepEqual(parse(['\uFEFFdata: x\n\n']), [{ event: 'message', data: 'x' }]);
});

test('sse: fields without colon, empty data, unknown fields, bad retry and id with NUL ignored', () => {
  assert.deepEqual(parseEverySplit('data\n\ndata:\ndata:\n\nfoo: bar\ndata: x\nretry: 12a\nid: a\0b\n\n'), [
    { event: 'message', data: '' },
    { event: 'message', data: '\n' },
    { event: 'message', data: 'x' },
  ]);
  // A value's first space only is dropped; a colon in the value stays.
  assert.deepEqual(parse(['data:   two: spaces\n\n']), [{ event: 'message', data: '  two: spaces' }]);
});

test('sse: no data means no event (event type reset); an unfinished event at the end is discarded', () => {
  assert.deepEqual(parseEverySplit('event: lonely\n\ndata: kept\n\ndata: lost'), [{ event: 'message', data: 'kept' }]);
  assert.deepEqual(parseEverySplit('data: lost too\n'), []);
  // An empty id resets the carried-over id.
  assert.deepEqual(parseEverySplit('id: 1\ndata: a\n\nid\ndata: b\n\n'), [
    { event: 'message', id: '1', data: 'a' },
    { event: 'message', data: 'b' },
  ]);
});
