import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { jsonLines } from './json-lines.js';

async function parse(chunks: (string | Buffer)[]): Promise<Record<string, unknown>[]> {
  const out = [];
  for await (const line of jsonLines(Readable.from(chunks))) out.push(line);
  return out;
}

const BODY = Buffer.from('{"status":"Pulling fs layer","id":"4f4f"}\n{"stream":"Step 1/2 : FROM scratch — ünïcödé 🙂\\n"}\n');
const EXPECTED = [{ status: 'Pulling fs layer', id: '4f4f' }, { stream: 'Step 1/2 : FROM scratch — ünïcödé 🙂\n' }];

test('a body split in two at every byte boundary, inside UTF-8 characters too, parses the same', async () => {
  for (let at = 0; at <= BODY.length; at++) {
    assert.deepEqual(await parse([BODY.subarray(0, at), BODY.subarray(at)]), EXPECTED, `split at ${at}`);
  }
});

test('a body fed one byte at a time parses the same', async () => {
  assert.deepEqual(await parse([...BODY].map((b) => Buffer.from([b]))), EXPECTED);
});

test('CRLF line ends, blank and whitespace-only lines', async () => {
  assert.deepEqual(await parse(['{"a":1}\r\n\r\n', '\n   \n{"b":2}\r', '\n\t\r\n{"c":3}\r\n']), [{ a: 1 }, { b: 2 }, { c: 3 }]);
});

test('several objects in one chunk, in order', async () => {
  const many = Array.from({ length: 1000 }, (_, i) => JSON.stringify({ i })).join('\n');
  const got = await parse([`${many}\n`]);
  assert.equal(got.length, 1000);
  assert.deepEqual(got[999], { i: 999 });
});

test('a last line without a newline still counts', async () => {
  assert.deepEqual(await parse(['{"a":1}\n{"b"', ':2}']), [{ a: 1 }, { b: 2 }]);
  assert.deepEqual(await parse(['{"only":true}']), [{ only: true }]);
});

test('error lines pass through as objects; the caller decides (pull progress throws on them)', async () => {
  const got = await parse(['{"errorDetail":{"message":"boom"},"error":"boom"}\n']);
  assert.deepEqual(got, [{ errorDetail: { message: 'boom' }, error: 'boom' }]);
});

test('a line that is not a JSON object comes back as its text, not dropped', async () => {
  assert.deepEqual(await parse(['plain text from a proxy\n', '42\n', '"quoted"\n', '[1,2]\n', '{"broken":\n']), [
    { status: 'plain text from a proxy' },
    { status: '42' },
    { status: 'quoted' },
    { status: '1,2' },
    { status: '{"broken":' },
  ]);
});

test('string chunks (an object-mode body) work too', async () => {
  assert.deepEqual(await parse(['{"a":', '"é"}\n']), [{ a: 'é' }]);
});

test('an empty body yields nothing', async () => {
  assert.deepEqual(await parse([]), []);
  assert.deepEqual(await parse(['\n\r\n']), []);
});
