/**
 * The process table's flow control, on Node streams standing in for a box's exec stream (pure
 * logic; start-fast.test.ts proves the same on a real box through a client that stops reading).
 * A reader that falls behind pauses the output; the output resumes once every reader caught up
 * to the low mark, and the end always comes. Stop 43's CI hung a command for 60 s here: curl
 * writes its error a byte per write, 79 updates reached a reader at once, and the output was
 * paused for good, because the only read that could resume it saw the reader still at the mark.
 * Small writes of one stream that wait for a reader are now joined into one update; the cases
 * that fill a reader's queue write chunks too large to join.
 */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { setImmediate as tick } from 'node:timers/promises';
import { describe, test } from 'node:test';
import type { ExecStream } from '../../../runtime/types.js';
import { within } from '../../../testing/wait.js';
import { ProcessTable, type ProcessUpdate, type Subscription } from './process-table.js';

/** Two of these are more than the table joins into one update: each chunk is an update of its own. */
const BIG = 20 * 1024;

/** An exec stream whose output the test writes, and whose exit it gives. */
function fakeStream() {
  let exit!: (code: number) => void;
  const exited = new Promise<number>((resolve) => (exit = resolve));
  const stream: ExecStream = {
    stdout: new PassThrough(),
    stderr: new PassThrough(),
    stdin: new PassThrough(),
    wait: () => exited,
    cancel: async () => undefined,
    resize: async () => undefined,
    pid: 7,
  };
  /** Writes `chunks` chunks of `size` bytes to stderr, ends both outputs and exits 0. */
  const run = (chunks: number, size = BIG) => {
    for (let i = 0; i < chunks; i++) (stream.stderr as PassThrough).write(Buffer.alloc(size, 'x'));
    (stream.stderr as PassThrough).end();
    (stream.stdout as PassThrough).end();
    exit(0);
  };
  return { stream, run };
}

/** Everything a reader gets, read one update per turn of the event loop (a slow client). */
async function readSlowly(sub: Subscription): Promise<{ bytes: number; updates: ProcessUpdate[]; end: ProcessUpdate | undefined }> {
  let bytes = 0;
  const updates: ProcessUpdate[] = [];
  for await (const u of sub) {
    if (u.kind === 'end') return { bytes, updates, end: u };
    bytes += u.data.length;
    updates.push(u);
    await tick();
  }
  return { bytes, updates, end: undefined };
}

describe('the process table under a slow reader', () => {
  for (const chunks of [63, 64, 65, 79, 200]) {
    test(`${chunks} chunks at once: the reader gets all of them and the end`, async () => {
      const { stream, run } = fakeStream();
      const proc = new ProcessTable().add('box', { cmd: 'curl', args: [], envs: {}, tty: false }, stream);
      const sub = proc.subscribe();
      const reading = readSlowly(sub);
      run(chunks);
      const got = await within(reading, `the end after ${chunks} chunks`);
      assert.equal(got.bytes, chunks * BIG);
      assert.equal(got.updates.length, chunks);
      assert.deepEqual(got.end, { kind: 'end', end: { exitCode: 0, exited: true, status: 'exit status 0' } });
    });
  }

  test('one-byte writes that wait for a reader reach it joined, in order, and the two streams stay apart', async () => {
    const { stream, run } = fakeStream();
    const proc = new ProcessTable().add('box', { cmd: 'curl', args: [], envs: {}, tty: false }, stream);
    const reading = readSlowly(proc.subscribe());
    const text = 'curl: (7) Failed to connect to 198.18.0.2 port 80: Connection refused\n'.repeat(20);
    for (const ch of text) (stream.stderr as PassThrough).write(ch);
    (stream.stdout as PassThrough).write('exit=7\n');
    for (const ch of 'after') (stream.stderr as PassThrough).write(ch);
    run(0);
    const got = await within(reading, 'the end');
    const joined = got.updates.map((u) => (u.kind === 'end' ? '' : `${u.kind}:${u.data.toString()}`));
    assert.deepEqual(joined, [`stderr:${text}`, 'stdout:exit=7\n', 'stderr:after']);
  });

  test('joined output is cut at 32 KiB per update', async () => {
    const { stream, run } = fakeStream();
    const proc = new ProcessTable().add('box', { cmd: 'yes', args: [], envs: {}, tty: false }, stream);
    const reading = readSlowly(proc.subscribe());
    run(100, 1024);
    const got = await within(reading, 'the end');
    assert.equal(got.bytes, 100 * 1024);
    assert.deepEqual(
      got.updates.map((u) => (u.kind === 'end' ? 0 : u.data.length)),
      [32, 32, 32, 4].map((k) => k * 1024),
    );
  });

  test('with two readers the output waits for the slower one, and both get everything', async () => {
    const { stream, run } = fakeStream();
    const proc = new ProcessTable().add('box', { cmd: 'curl', args: [], envs: {}, tty: false }, stream);
    const fast = proc.subscribe();
    const slow = proc.subscribe();
    const fastReading = (async () => {
      let bytes = 0;
      for await (const u of fast) if (u.kind !== 'end') bytes += u.data.length;
      return bytes;
    })();
    const slowReading = readSlowly(slow);
    run(500);
    assert.equal(await within(fastReading, 'the fast reader to end'), 500 * BIG);
    assert.equal((await within(slowReading, 'the slow reader to end')).bytes, 500 * BIG);
  });

  test('a reader that goes away releases the output it held', async () => {
    const { stream, run } = fakeStream();
    const proc = new ProcessTable().add('box', { cmd: 'curl', args: [], envs: {}, tty: false }, stream);
    const stuck = proc.subscribe(); // never read
    const reader = proc.subscribe();
    const reading = readSlowly(reader);
    run(300);
    // The stuck reader holds the output once its backlog is full; leaving lets it go.
    await within(
      (async () => {
        while (stuck.backlog < 64) await tick();
      })(),
      'the stuck reader to fill its backlog',
    );
    proc.unsubscribe(stuck);
    assert.equal((await within(reading, 'the end, once the stuck reader left')).bytes, 300 * BIG);
  });
});
