/**
 * The engine exec path (exec.ts) against the real engine: kills that take the whole tree
 * (docs/exec.md), start failures as typed errors, the output cap. Boxes are made straight through
 * the engine and execs call exec.ts itself, so whatever the runtime does around it (the in-box
 * agent) stays out. Each kill case checks with ps inside the box.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { finished } from 'node:stream/promises';
import { after, before, describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import { isSbxError } from '../../errors.js';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { waitFor } from '../../testing/wait.js';
import type { ExecOptions, ExecStream, ExecStreamOptions } from '../types.js';
import { parseRuntimeAddress } from './address.js';
import { DockerConnection } from './connection.js';
import { runBuffered, runStreaming } from './exec.js';
import { DockerRuntime } from './runtime.js';

const runId = testRunId('docker-exec');

describe('docker exec', () => {
  let conn: DockerConnection;
  let box: string;
  const rt = {
    exec: (id: string, cmd: string[], opts?: ExecOptions) => runBuffered(conn, id, cmd, opts),
    execStream: (id: string, cmd: string[], opts?: ExecStreamOptions) => runStreaming(conn, id, cmd, opts),
  };

  async function newBox(): Promise<string> {
    const c = await conn.docker.createContainer({ Image: testEnv.baseImage, Labels: { [TEST_LABEL]: runId } });
    await c.start();
    return c.id;
  }

  const removeBox = (id: string) => conn.docker.getContainer(id).remove({ force: true });

  /** `pid command` of every process in the box whose command line matches. */
  async function ps(pattern: RegExp): Promise<string[]> {
    const r = await rt.exec(box, ['ps', '-o', 'pid,args']);
    return r.stdout
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => pattern.test(l) && !l.includes('ps -o'));
  }

  /** Kills what a test left on purpose (an escape the engine path cannot catch). */
  async function killMatching(pattern: RegExp): Promise<void> {
    const pids = (await ps(pattern)).map((l) => l.split(/\s+/)[0]!);
    if (pids.length) await rt.exec(box, ['kill', '-9', ...pids]);
  }

  async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; ms: number }> {
    const t0 = performance.now();
    const value = await fn();
    return { value, ms: performance.now() - t0 };
  }

  /**
   * Reports how long after the kill fired a call returned (about 300 ms here: the killer exec
   * plus a 100 ms grace). Not asserted: a loaded machine broke every bound. What the kill did is
   * proven by ps (nothing of the tree is left), and where a process survives on purpose, by the
   * call having returned while it still runs.
   */
  function afterKill(t: TestContext, ms: number, firedAt: number): void {
    t.diagnostic(`returned ${(ms - firedAt).toFixed(0)} ms after the kill fired`);
  }

  /** Waits until the box runs `n` processes matching `pattern` (a tree the test kills next). */
  async function running(pattern: RegExp, n: number): Promise<void> {
    await waitFor(async () => (await ps(pattern)).length >= n, { what: `${n} processes matching ${pattern}` });
  }

  before(async () => {
    conn = new DockerConnection(parseRuntimeAddress(testEnv.engineAddr));
    box = await newBox();
  });

  after(async () => {
    await removeBox(box);
    // The harness's leak check lists through a Runtime; listing is all it does here.
    const lister = new DockerRuntime(testEnv.engineAddr);
    await assertNoContainersLeft(lister, runId);
    await lister.close();
    conn.close();
  });

  describe('kill on timeout, cancel and abort', () => {
    test('a child that dropped its environment (env -i) is killed, and the call returns at once', async (t) => {
      const { value: r, ms } = await timed(() => rt.exec(box, ['sh', '-c', 'env -i sh -c "sleep 301; :" & sleep 303'], { timeoutMs: 500 }));
      assert.equal(r.timedOut, true);
      assert.equal(r.exitCode, 137);
      afterKill(t, ms, 500);
      assert.deepEqual(await ps(/sleep 30[13]/), []);
    });

    test('each way of leaving the tree is caught: marker, parent chain, session', async (t) => {
      // Each of these is found by one rule only (none holds the exec's output).
      const script = [
        '(setsid sleep 311 >/dev/null 2>&1 &)', // the marker: own session, parent gone
        'env -i setsid sh -c "sleep 312; :" >/dev/null 2>&1 &', // the parent chain: no marker, own session
        '(env -i sleep 313 >/dev/null 2>&1 &)', // the session: no marker, parent gone
        'sleep 315',
      ].join('\n');
      const { value: r, ms } = await timed(() => rt.exec(box, ['sh', '-c', script], { timeoutMs: 500 }));
      assert.equal(r.timedOut, true);
      afterKill(t, ms, 500);
      assert.deepEqual(await ps(/sleep 31[1-5]/), []);
    });

    test('a forking tree is frozen before it is killed: nothing escapes between passes', async () => {
      const r = await rt.exec(box, ['sh', '-c', 'while :; do env -i sh -c "sleep 321 & sleep 322"; done & while :; do sleep 323 & usleep 5000; done'], {
        timeoutMs: 700,
      });
      assert.equal(r.timedOut, true);
      // A loop that escaped would fork new sleeps for ever: only a hang reaches the timeout.
      await waitFor(async () => (await ps(/sleep 32[1-3]|env -i sh/)).length === 0, { what: 'the forking tree to be gone' });
    });

    test('an escaped child (no marker, own session, parent gone) that holds the output is killed too', async (t) => {
      // Found by the pipe it holds, on stdout or moved to another descriptor; without that the
      // engine would keep this stream (and the box's other exec exits) waiting 2 s or more.
      const script = 'env -i setsid sh -c "sleep 331 & exit"; env -i setsid sh -c "exec 3>&1 >/dev/null 2>&1; sleep 332 & exit"; echo before-kill; sleep 333';
      const { value: r, ms } = await timed(() => rt.exec(box, ['sh', '-c', script], { timeoutMs: 500 }));
      assert.equal(r.timedOut, true);
      assert.equal(r.exitCode, 137);
      assert.equal(r.stdout, 'before-kill\n');
      afterKill(t, ms, 500);
      assert.deepEqual(await ps(/sleep 33[1-3]/), []);
      // And the box's next exec runs (the engine holds exits behind a stream something keeps open).
      const { value: next, ms: nextMs } = await timed(() => rt.exec(box, ['true']));
      assert.equal(next.exitCode, 0);
      t.diagnostic(`the next exec took ${nextMs.toFixed(0)} ms`);
    });

    test('what the engine path cannot see: an escape that also let go of the output survives', async (t) => {
      // The documented limit (docs/exec.md): no marker, its own session and group, its parent
      // gone before the kill, and not holding the exec's output. The call still returns at once.
      const { value: r, ms } = await timed(() =>
        rt.exec(box, ['sh', '-c', 'env -i setsid sh -c "sleep 334 >/dev/null 2>&1 & exit"; sleep 335'], { timeoutMs: 500 }),
      );
      assert.equal(r.timedOut, true);
      afterKill(t, ms, 500);
      assert.deepEqual(await ps(/sleep 335/), []);
      assert.equal((await ps(/sleep 334/)).length, 1, 'if this escape is caught now, update docs/exec.md');
      await killMatching(/sleep 334/);
    });

    test('on a terminal, an escaped child holding it is killed too', async (t) => {
      const s = await rt.execStream(box, ['sh', '-c', 'env -i setsid sh -c "sleep 336 & exit"; echo up; sleep 337'], { tty: true });
      s.stdout.resume();
      await running(/sleep 33[67]/, 2);
      assert.equal((await ps(/sleep 33[67]/)).length, 2);
      const { ms } = await timed(() => s.cancel());
      afterKill(t, ms, 0);
      assert.equal(await s.wait(), 137);
      assert.deepEqual(await ps(/sleep 33[67]/), []);
    });

    test('a box without /bin/sh: the kill cannot run, but the call still returns at once', async (t) => {
      const bare = await newBox();
      try {
        await rt.exec(bare, ['rm', '/bin/sh'], { user: '0' });
        const s = await rt.execStream(bare, ['sleep', '338']);
        const bareLeft = async () => (await rt.exec(bare, ['ps', '-o', 'args'])).stdout.split('\n').filter((c) => /^sleep 33[89]/.test(c));
        await waitFor(async () => (await bareLeft()).length === 1, { what: 'sleep 338 to run' });
        const { ms } = await timed(() => s.cancel());
        afterKill(t, ms, 0);
        assert.equal(await s.wait(), 137);
        const { value: r, ms: timedMs } = await timed(() => rt.exec(bare, ['sleep', '339'], { timeoutMs: 300 }));
        assert.equal(r.timedOut, true);
        afterKill(t, timedMs, 300);
        // The documented limit: both are still running, so the calls did not wait for them.
        assert.equal((await bareLeft()).length, 2);
      } finally {
        await removeBox(bare);
      }
    });

    test('stream cancel() kills the tree and returns at once; wait() then says 137', async (t) => {
      const s = await rt.execStream(box, ['sh', '-c', 'env -i sh -c "sleep 341; :" & (env -i sleep 342 &); echo up; sleep 343']);
      s.stdout.resume();
      await running(/sleep 34[1-3]/, 3);
      const { ms } = await timed(() => s.cancel());
      afterKill(t, ms, 0);
      assert.equal(await s.wait(), 137);
      assert.deepEqual(await ps(/sleep 34[1-3]/), []);
    });

    test('stream cancel() returns at once while an escaped child holds stdout and nobody reads', async (t) => {
      const s = await rt.execStream(box, ['sh', '-c', 'env -i setsid sh -c "sleep 351 & exit"; head -c 1000000 /dev/zero; sleep 352']);
      await running(/sleep 351/, 1);
      const { ms } = await timed(() => s.cancel());
      afterKill(t, ms, 0);
      assert.deepEqual(await ps(/sleep 35[12]/), []);
      s.stdout.resume();
      assert.equal(await s.wait(), 137);
    });

    test('an AbortSignal kills a buffered exec: it rejects with cancelled at once', async (t) => {
      const ac = new AbortController();
      const call = rt.exec(box, ['sh', '-c', 'env -i sh -c "sleep 361; :" & sleep 362'], { signal: ac.signal });
      await running(/sleep 36[12]/, 2);
      const t0 = performance.now();
      ac.abort(new Error('caller gave up'));
      await assert.rejects(call, (e) => isSbxError(e, 'cancelled'));
      afterKill(t, performance.now() - t0, 0);
      assert.deepEqual(await ps(/sleep 36[12]/), []);
    });

    test('an AbortSignal kills a stream: wait() resolves 137', async (t) => {
      const ac = new AbortController();
      const s: ExecStream = await rt.execStream(box, ['sh', '-c', 'env -i sh -c "sleep 371; :" & sleep 372'], { signal: ac.signal });
      await running(/sleep 37[12]/, 2);
      const t0 = performance.now();
      ac.abort();
      assert.equal(await s.wait(), 137);
      afterKill(t, performance.now() - t0, 0);
      assert.deepEqual(await ps(/sleep 37[12]/), []);
    });

    test('a stream timeout kills the tree: wait() resolves 137', async () => {
      const s = await rt.execStream(box, ['sh', '-c', 'env -i sh -c "sleep 381; :" & sleep 382'], { timeoutMs: 400 });
      s.stdout.resume();
      assert.equal(await s.wait(), 137);
      assert.deepEqual(await ps(/sleep 38[12]/), []);
    });

    test('the kill leaves other execs of the same box alone', async () => {
      const other = await rt.execStream(box, ['sh', '-c', 'sleep 391']);
      await running(/sleep 391/, 1);
      const r = await rt.exec(box, ['sh', '-c', 'sleep 392'], { timeoutMs: 300 });
      assert.equal(r.timedOut, true);
      assert.equal((await ps(/sleep 391/)).length, 1);
      assert.deepEqual(await ps(/sleep 392/), []);
      await other.cancel();
      assert.deepEqual(await ps(/sleep 391/), []);
    });
  });

  describe('start failures are typed errors', () => {
    test('a missing working directory is invalid_argument on workDir (exec and execStream)', async () => {
      const isWorkDir = (e: unknown) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'workDir' && /'\/(nope|etc\/passwd)'/.test(e.message);
      await assert.rejects(rt.exec(box, ['true'], { workDir: '/nope' }), isWorkDir);
      await assert.rejects(rt.execStream(box, ['true'], { workDir: '/nope' }), isWorkDir);
      await assert.rejects(rt.execStream(box, ['true'], { workDir: '/nope', tty: true }), isWorkDir);
      // A file is not a directory either.
      await assert.rejects(rt.exec(box, ['true'], { workDir: '/etc/passwd' }), isWorkDir);
    });

    test('a missing executable is not_found naming the command (exec and execStream)', async () => {
      for (const cmd of ['/no/such/binary', 'nosuchcmd']) {
        const isMissing = (e: unknown) => isSbxError(e, 'not_found') && e.details?.['cmd'] === cmd;
        await assert.rejects(rt.exec(box, [cmd]), isMissing);
        await assert.rejects(rt.execStream(box, [cmd]), isMissing);
      }
    });

    test('an unknown user is invalid_argument on user', async () => {
      await assert.rejects(rt.exec(box, ['true'], { user: 'nobody-here' }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'user');
    });

    test('other start failures are internal with the runtime message', async () => {
      await assert.rejects(rt.exec(box, ['/etc/passwd']), (e) => isSbxError(e, 'internal') && /permission denied/.test(e.message));
    });

    test("a shell's own 127 and 126 are exit codes, not start failures", async () => {
      const r = await rt.exec(box, ['sh', '-c', 'nosuchcmd']);
      assert.equal(r.exitCode, 127);
      assert.match(r.stderr, /not found/);
      assert.equal((await rt.exec(box, ['sh', '-c', 'echo ran; exit 126'])).stdout, 'ran\n');
      assert.equal((await rt.exec(box, ['sh', '-c', 'exit 126'])).exitCode, 126);
      const s = await rt.execStream(box, ['sh', '-c', 'exit 127']);
      assert.equal(await s.wait(), 127);
    });

    test('a start failure is detected even when the output cap is tiny', async () => {
      await assert.rejects(rt.exec(box, ['true'], { workDir: '/nope', maxOutputBytes: 1 }), (e) => isSbxError(e, 'invalid_argument'));
    });
  });

  describe('buffered output', () => {
    test('past the cap the output is drained and dropped, and the process finishes', async () => {
      const r = await rt.exec(box, ['sh', '-c', 'head -c 20000000 /dev/zero; echo done >&2'], { maxOutputBytes: 1024 * 1024 });
      assert.equal(r.exitCode, 0);
      assert.equal(r.truncated, true);
      assert.equal(r.stdout.length, 1024 * 1024);
      assert.equal(r.stderr, 'done\n');
    });

    test('text is decoded across chunks; a character the cap splits is dropped, not mangled', async () => {
      // 3 MiB of two-byte characters: many split across frames and chunks.
      const r = await rt.exec(box, ['sh', '-c', "head -c 1572864 /dev/zero | tr '\\0' a | sed 's/a/é/g'"]);
      assert.equal(r.stdout.length, 1572864);
      assert.ok(/^é+$/.test(r.stdout), 'every character intact');
      const cut = await rt.exec(box, ['sh', '-c', 'printf "ééé"'], { maxOutputBytes: 5 });
      assert.equal(cut.truncated, true);
      assert.equal(cut.stdout, 'éé');
    });

    test('many megabytes of stdout and stderr interleaved are exact, whole and at an odd cap', async () => {
      // Each line on stdout, every 97th also on stderr: frames of both sides alternate at every offset of the reads.
      const script = 'awk \'BEGIN { for (i = 0; i < 600000; i++) { print "line " i; if (i % 97 == 0) print "err " i > "/dev/stderr" } }\'';
      let out = '';
      let err = '';
      for (let i = 0; i < 600000; i++) {
        out += `line ${i}\n`;
        if (i % 97 === 0) err += `err ${i}\n`;
      }
      const whole = await rt.exec(box, ['sh', '-c', script], { maxOutputBytes: 16 * 1024 * 1024 });
      assert.equal(whole.truncated, false);
      assert.ok(whole.stdout === out, `stdout: ${whole.stdout.length} of ${out.length} characters, exact`);
      assert.ok(whole.stderr === err, `stderr: ${whole.stderr.length} of ${err.length} characters, exact`);
      const cap = 3_333_333;
      const cut = await rt.exec(box, ['sh', '-c', script], { maxOutputBytes: cap });
      assert.equal(cut.truncated, true);
      assert.equal(cut.exitCode, 0);
      assert.ok(cut.stdout === out.slice(0, cap), `stdout cut at ${cut.stdout.length}, exact`);
      assert.ok(cut.stderr === err, 'stderr whole');
    });
  });

  test('a stream of random bytes is byte-exact', async () => {
    const s = await rt.execStream(box, ['sh', '-c', 'head -c 12000000 /dev/urandom > /tmp/rand && cat /tmp/rand && sha256sum /tmp/rand >&2']);
    const out: Buffer[] = [];
    let err = '';
    s.stdout.on('data', (c: Buffer) => out.push(c));
    s.stderr.on('data', (c: Buffer) => (err += c.toString()));
    assert.equal(await s.wait(), 0);
    await Promise.all([finished(s.stdout), finished(s.stderr)]);
    const bytes = Buffer.concat(out);
    assert.equal(bytes.length, 12_000_000);
    assert.equal(createHash('sha256').update(bytes).digest('hex'), err.split(' ')[0]);
  });
});
