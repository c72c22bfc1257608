import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { StdStreamDemuxer } from './demux.js';

/** One engine frame: stream type, three zero bytes, big-endian payload length, payload. */
function frame(type: number, payload: string | Buffer): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const header = Buffer.alloc(8);
  header[0] = type;
  header.writeUInt32BE(body.length, 4);
  return Buffer.concat([header, body]);
}

function demuxer() {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  stdout.on('data', (c: Buffer) => out.push(c));
  stderr.on('data', (c: Buffer) => err.push(c));
  return { demux: new StdStreamDemuxer(stdout, stderr), stdout, stderr, out, err };
}

/** Writes the chunks one after another (each after the previous one's callback) and ends. */
async function feed(demux: StdStreamDemuxer, chunks: Buffer[]): Promise<void> {
  for (const c of chunks) await new Promise<void>((resolve, reject) => demux.write(c, (e) => (e ? reject(e) : resolve())));
  await new Promise<void>((resolve) => demux.end(resolve));
}

const STREAM = Buffer.concat([frame(1, 'out-1\n'), frame(2, 'err-1\n'), frame(1, ''), frame(2, 'é-two-bytes\n'), frame(1, 'out-2\n')]);

test('a stream split in two at every byte boundary comes out the same', async () => {
  for (let at = 0; at <= STREAM.length; at++) {
    const d = demuxer();
    await feed(d.demux, [STREAM.subarray(0, at), STREAM.subarray(at)]);
    assert.equal(Buffer.concat(d.out).toString(), 'out-1\nout-2\n', `split at ${at}`);
    assert.equal(Buffer.concat(d.err).toString(), 'err-1\né-two-bytes\n', `split at ${at}`);
  }
});

test('a stream fed one byte at a time comes out the same', async () => {
  const d = demuxer();
  await feed(
    d.demux,
    [...STREAM].map((b) => Buffer.from([b])),
  );
  assert.equal(Buffer.concat(d.out).toString(), 'out-1\nout-2\n');
  assert.equal(Buffer.concat(d.err).toString(), 'err-1\né-two-bytes\n');
});

test('a large frame is handed on as slices of the incoming chunks, never gathered or copied', async () => {
  const payload = Buffer.alloc(16 * 1024 * 1024);
  for (let i = 0; i < payload.length; i += 4096) payload.writeUInt32BE(i, i);
  const whole = Buffer.concat([frame(1, payload), frame(2, 'after\n')]);
  const chunks: Buffer[] = [];
  // Copies, so each chunk has its own memory, as socket reads do.
  for (let i = 0; i < whole.length; i += 16 * 1024) chunks.push(Buffer.from(whole.subarray(i, i + 16 * 1024)));
  const d = demuxer();
  await feed(d.demux, chunks);
  assert.ok(Buffer.concat(d.out).equals(payload));
  assert.equal(Buffer.concat(d.err).toString(), 'after\n');
  const incoming = new Set(chunks.map((c) => c.buffer));
  assert.ok(
    d.out.every((c) => incoming.has(c.buffer)),
    'stdout chunks share memory with the input',
  );
});

test('stream types: 0 is stdout, 3 (engine error text) is stderr, unknown types are skipped', async () => {
  const d = demuxer();
  await feed(d.demux, [
    Buffer.concat([frame(0, 'zero '), frame(1, 'one '), frame(3, 'engine says no\n'), frame(7, 'garbage'), frame(255, ''), frame(1, 'two')]),
  ]);
  assert.equal(Buffer.concat(d.out).toString(), 'zero one two');
  assert.equal(Buffer.concat(d.err).toString(), 'engine says no\n');
});

test('an unknown frame, however long and however split, is skipped and the frames after it arrive', async () => {
  const d = demuxer();
  const junk = frame(9, Buffer.alloc(8 * 1024 * 1024, 1));
  const chunks: Buffer[] = [];
  for (let i = 0; i < junk.length; i += 1024 * 1024 - 3) chunks.push(junk.subarray(i, i + 1024 * 1024 - 3));
  await feed(d.demux, [...chunks, frame(1, 'after')]);
  assert.equal(Buffer.concat(d.out).toString(), 'after');
  assert.equal(d.err.length, 0);
});

test('backpressure: a reader that does not read holds the writer, reading releases it', async () => {
  const stdout = new PassThrough({ highWaterMark: 1024 });
  const stderr = new PassThrough();
  const demux = new StdStreamDemuxer(stdout, stderr);
  let written = false;
  demux.write(frame(1, Buffer.alloc(64 * 1024, 'x')), () => (written = true));
  await sleep(20);
  assert.equal(written, false, 'the write waits for stdout to drain');
  let got = 0;
  stdout.on('data', (c: Buffer) => (got += c.length));
  await sleep(20);
  assert.equal(written, true);
  assert.equal(got, 64 * 1024);
});

test('a side its reader destroyed is skipped and does not stall the other side', async () => {
  const stdout = new PassThrough({ highWaterMark: 1024 });
  const stderr = new PassThrough();
  const err: Buffer[] = [];
  stderr.on('data', (c: Buffer) => err.push(c));
  const demux = new StdStreamDemuxer(stdout, stderr);
  let first = false;
  demux.write(frame(1, Buffer.alloc(64 * 1024, 'x')), () => (first = true));
  await sleep(10);
  assert.equal(first, false);
  // The reader gives up on stdout while the writer waits on it.
  stdout.destroy();
  await sleep(10);
  assert.equal(first, true, 'destroying the side released the waiting write');
  await feed(demux, [frame(1, 'to nobody'), frame(2, 'still here')]);
  assert.equal(Buffer.concat(err).toString(), 'still here');
});

test('ending the demuxer ends both sides', async () => {
  const d = demuxer();
  const ended = Promise.all([new Promise((r) => d.stdout.once('end', r)), new Promise((r) => d.stderr.once('end', r))]);
  // A half header at the end is dropped, not an error.
  await feed(d.demux, [frame(1, 'x'), Buffer.from([2, 0, 0])]);
  await ended;
  assert.equal(Buffer.concat(d.out).toString(), 'x');
});
