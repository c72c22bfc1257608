import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { once } from 'node:events';
import { StdStreamDemuxer, StreamOutput } from './demux.js';

/** One engine frame: stream type, three zero bytes, big-endian payload length, payload. */
function frame(type: number, payload: string | Buffer): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const header = Buffer.alloc(8);
  header[0] = type;
  header.writeUInt32BE(body.length, 4);
  return Buffer.concat([header, body]);
}

/** A demuxer over streams (execStream's output), and what each side received. */
function demuxer() {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  stdout.on('data', (c: Buffer) => out.push(c));
  stderr.on('data', (c: Buffer) => err.push(c));
  const output = new StreamOutput(stdout, stderr);
  return { demux: new StdStreamDemuxer(output), output, stdout, stderr, out, err };
}

/**
 * Hands the chunks over as a socket with one reused read buffer does: each is copied into the
 * same buffer, which is scribbled over after the call, so whoever kept it without copying
 * ends up with garbage.
 */
function feed(d: { demux: StdStreamDemuxer; output: StreamOutput }, chunks: Buffer[]): void {
  const reused = Buffer.alloc(Math.max(1, ...chunks.map((c) => c.length)));
  for (const c of chunks) {
    c.copy(reused);
    d.demux.write(reused.subarray(0, c.length));
    reused.fill(0xee);
  }
  d.output.end();
}

const STREAM = Buffer.concat([frame(1, 'out-1\n'), frame(2, 'err-1\n'), frame(1, ''), frame(2, 'é-two-bytes\n'), frame(1, 'out-2\n')]);

/** Reads both sides to their end. */
async function ended(d: { stdout: PassThrough; stderr: PassThrough }): Promise<void> {
  await Promise.all([once(d.stdout, 'end'), once(d.stderr, 'end')]);
}

test('a stream split in two at every offset of a reused read buffer comes out byte-exact', async () => {
  for (let at = 0; at <= STREAM.length; at++) {
    const d = demuxer();
    feed(d, [STREAM.subarray(0, at), STREAM.subarray(at)]);
    await ended(d);
    assert.equal(Buffer.concat(d.out).toString(), 'out-1\nout-2\n', `split at ${at}`);
    assert.equal(Buffer.concat(d.err).toString(), 'err-1\né-two-bytes\n', `split at ${at}`);
  }
});

test('a stream fed one byte at a time comes out the same', async () => {
  const d = demuxer();
  feed(
    d,
    [...STREAM].map((b) => Buffer.from([b])),
  );
  await ended(d);
  assert.equal(Buffer.concat(d.out).toString(), 'out-1\nout-2\n');
  assert.equal(Buffer.concat(d.err).toString(), 'err-1\né-two-bytes\n');
});

test('large frames in reads of every size come out byte-exact, their pieces sharing slabs instead of one allocation per read', async () => {
  const payload = Buffer.alloc(4 * 1024 * 1024);
  for (let i = 0; i + 4 <= payload.length; i += 4) payload.writeUInt32BE(i, i);
  const whole = Buffer.concat([frame(1, payload.subarray(0, 3_000_001)), frame(2, 'between\n'), frame(1, payload.subarray(3_000_001)), frame(2, 'after\n')]);
  // Reads of odd, changing sizes, as a socket's are (a frame boundary lands anywhere in them).
  const chunks: Buffer[] = [];
  for (let i = 0, n = 0; i < whole.length; n++) {
    const size = 1 + ((n * 7919) % 9000);
    chunks.push(whole.subarray(i, i + size));
    i += size;
  }
  const d = demuxer();
  feed(d, chunks);
  await ended(d);
  assert.ok(Buffer.concat(d.out).equals(payload));
  assert.equal(Buffer.concat(d.err).toString(), 'between\nafter\n');
  const slabs = new Set(d.out.map((c) => c.buffer));
  assert.ok(slabs.size < d.out.length / 4, `${d.out.length} pieces in ${slabs.size} slabs`);
});

test('stream types: 0 is stdout, 3 (engine error text) is stderr, unknown types are skipped', async () => {
  const d = demuxer();
  feed(d, [Buffer.concat([frame(0, 'zero '), frame(1, 'one '), frame(3, 'engine says no\n'), frame(7, 'garbage'), frame(255, ''), frame(1, 'two')])]);
  await ended(d);
  assert.equal(Buffer.concat(d.out).toString(), 'zero one two');
  assert.equal(Buffer.concat(d.err).toString(), 'engine says no\n');
});

test('an unknown frame, however long and however split, is skipped and the frames after it arrive', async () => {
  const d = demuxer();
  const junk = frame(9, Buffer.alloc(8 * 1024 * 1024, 1));
  const chunks: Buffer[] = [];
  for (let i = 0; i < junk.length; i += 1024 * 1024 - 3) chunks.push(junk.subarray(i, i + 1024 * 1024 - 3));
  feed(d, [...chunks, frame(1, 'after')]);
  await ended(d);
  assert.equal(Buffer.concat(d.out).toString(), 'after');
  assert.equal(d.err.length, 0);
});

test('a tty stream is not multiplexed: all of it is stdout, as given', async () => {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const output = new StreamOutput(stdout, stderr);
  const out: Buffer[] = [];
  stdout.on('data', (c: Buffer) => out.push(c));
  stderr.resume();
  const text = Buffer.concat([frame(2, 'looks like a frame'), Buffer.from(' and more')]);
  feed({ demux: new StdStreamDemuxer(output, true), output }, [text.subarray(0, 5), text.subarray(5)]);
  await Promise.all([once(stdout, 'end'), once(stderr, 'end')]);
  assert.ok(Buffer.concat(out).equals(text));
});

test('backpressure: a reader that does not read makes the output not ready until it read', async () => {
  const stdout = new PassThrough({ highWaterMark: 1024 });
  const stderr = new PassThrough();
  const output = new StreamOutput(stdout, stderr);
  const demux = new StdStreamDemuxer(output);
  demux.write(frame(1, Buffer.alloc(64 * 1024, 'x')));
  assert.equal(output.ready(), false, 'stdout is full');
  let ready = false;
  const readied = new Promise<void>((resolve) => output.whenReady(resolve)).then(() => (ready = true));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(ready, false, 'nothing read yet');
  let got = 0;
  stdout.on('data', (c: Buffer) => (got += c.length));
  await readied;
  assert.equal(output.ready(), true);
  assert.equal(got, 64 * 1024);
});

test('a side its reader destroyed is skipped and does not stall the other side', async () => {
  const stdout = new PassThrough({ highWaterMark: 1024 });
  const stderr = new PassThrough();
  const err: Buffer[] = [];
  stderr.on('data', (c: Buffer) => err.push(c));
  const output = new StreamOutput(stdout, stderr);
  const demux = new StdStreamDemuxer(output);
  demux.write(frame(1, Buffer.alloc(64 * 1024, 'x')));
  assert.equal(output.ready(), false);
  const readied = new Promise<void>((resolve) => output.whenReady(resolve));
  // The reader gives up on stdout while the socket waits on it.
  stdout.destroy();
  await readied;
  feed({ demux, output }, [frame(1, 'to nobody'), frame(2, 'still here')]);
  assert.equal(output.ready(), true);
  await once(stderr, 'end');
  assert.equal(Buffer.concat(err).toString(), 'still here');
});

test('ending the output ends both sides; a half header at the end is dropped, not an error', async () => {
  const d = demuxer();
  feed(d, [frame(1, 'x'), Buffer.from([2, 0, 0])]);
  await ended(d);
  assert.equal(Buffer.concat(d.out).toString(), 'x');
  assert.equal(d.err.length, 0);
});
