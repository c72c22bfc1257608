/**
 * The process table's flow control, on Node streams standing in for a box's exec stream (pure
 * logic; start-fast.test.ts proves the same on a real box through a client that stops reading).
 * A reader that falls behind pauses the output; the output resumes once every reader caught up
 * to the low mark, and the end always comes. Stop 43's CI hung a command for 60 s here: curl
 * writes its error a byte per write, 79 updates reached a reader at once, and the output was
 * paused for good, because the only read that could resume it saw the reader still at the mark.
 */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { setImmediate as tick } from 'node:timers/promises';
import { describe, test } from 'node:test';
import type { ExecStream } from '../../../runtime/types.js';
import { within } from '../../../testing/wait.js';
import { ProcessTable, type ProcessUpdate, type Subscription } from './process-table.js';

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
  /** Writes `chunks` one-byte chunks to stderr, ends both outputs and exits 0. */
  const run = (chunks: number) => {
    for (let i = 0; i < chunks; i++) (stream.stderr as PassThrough).write('x');
    (stream.stderr as PassThrough).end();
    (stream.stdout as PassThrough).end();
    exit(0);
  };
  return { stream, run };
}

/** Everything a reader gets, read one update per turn of the event loop (a slow client). */
async function readSlowly(sub: Subscription): Promise<{ bytes: number; end: ProcessUpdate | undefined }> {
  let bytes = 0;
  for await (const u of sub) {
    if (u.kind === 'end') return { bytes, end: u };
    bytes += u.data.length;
    await tick();
  }
  return { bytes, end: undefined };
}

describe('the process table under a slow reader', () => {
  for (const chunks of [63, 64, 65, 79, 200, 1000]) {
    test(`${chunks} one-byte writes at once: the reader gets all of them and the end`, async () => {
      const { stream, run } = fakeStream();
      const proc = new ProcessTable().add('box', { cmd: 'curl', args: [], envs: {}, tty: false }, stream);
      const sub = proc.subscribe();
      const reading = readSlowly(sub);
      run(chunks);
      const got = await within(reading, `the end after ${chunks} chunks`);
      assert.equal(got.bytes, chunks);
      assert.deepEqual(got.end, { kind: 'end', end: { exitCode: 0, exited: true, status: 'exit status 0' } });
    });
  }

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
    assert.equal(await within(fastReading, 'the fast reader to end'), 500);
    assert.equal((await within(slowReading, 'the slow reader to end')).bytes, 500);
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
    assert.equal((await within(reading, 'the end, once the stuck reader left')).bytes, 300);
  });
});
