/** The reader of a buffered exec's answer as frames, fed however the socket cuts it. */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { ExecFramesReader } from './exec-frames.js';
import { Sbx } from './index.js';

function frame(channel: number, payload: string | Buffer): Buffer {
  const body = Buffer.from(payload);
  const head = Buffer.alloc(5);
  head[0] = channel;
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

const fields = { exitCode: 3, truncated: true, timedOut: false, durationMs: 12 };
const answer = Buffer.concat([
  frame(1, 'out é'),
  frame(2, 'err\0'),
  frame(9, 'a channel from a newer server'),
  frame(1, Buffer.from('😀 more')),
  frame(2, ''),
  frame(3, JSON.stringify(fields)),
]);

test('an answer cut anywhere, or fed a byte at a time, reads back whole; unknown channels are skipped', () => {
  for (let cut = 0; cut <= answer.length; cut++) {
    const r = new ExecFramesReader();
    r.write(answer.subarray(0, cut));
    r.write(answer.subarray(cut));
    assert.deepEqual(r.end(), { ...fields, stdout: 'out é😀 more', stderr: 'err\0' }, `cut at ${cut}`);
  }
  const r = new ExecFramesReader();
  for (const b of answer) r.write(Buffer.from([b]));
  assert.equal(r.end().stdout, 'out é😀 more');
});

test('an answer that ends within a frame or without its result frame is an error', () => {
  const cut = new ExecFramesReader();
  cut.write(answer.subarray(0, answer.length - 2));
  assert.throws(() => cut.end(), SyntaxError);
  const noResult = new ExecFramesReader();
  noResult.write(frame(1, 'out'));
  assert.throws(() => noResult.end(), /no result frame/);
});

test('the SDK asks for frames and reads the JSON of a server that answers JSON (one before frames)', async () => {
  const result = { exitCode: 0, stdout: 'out\0é', stderr: '', truncated: false, timedOut: false, durationMs: 5 };
  let accept: string | undefined;
  const server = createServer((req, res) => {
    if (req.method === 'GET') {
      res.setHeader('content-type', 'application/json');
      return res.end(JSON.stringify({ id: 'b1', status: 'running' }));
    }
    accept = req.headers.accept;
    req.resume();
    res.setHeader('content-type', 'application/json; charset=utf-8');
    res.end(JSON.stringify(result));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const box = await new Sbx({ url, apiKey: 'k' }).get('b1');
    assert.deepEqual(await box.exec(['true']), result);
    assert.match(accept ?? '', /^application\/vnd\.sbx\.exec-frames, application\/json/);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});
