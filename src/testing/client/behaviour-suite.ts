/**
 * One behaviour suite, two subjects: the library's Manager in this process, and the SDK's Sbx
 * against a real `sbx serve`. Both sit on the real engine. Whatever a test asserts here, code
 * written against one gets from the other.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, test as nodeTest } from 'node:test';
import type { ExecStream, LogChunk } from '../../runtime/types.js';
import type { Box } from '../../client/box.js';
import type { Sbx } from '../../client/client.js';
import { SbxError } from '../../client/index.js';
import type { WorkspaceFS } from '../../client/workspace.js';
import { waitFor, within } from '../wait.js';

/** What the library's Manager and the SDK's Sbx share, typed as the SDK declares it. */
export type SandboxApi = Pick<
  Sbx,
  'create' | 'get' | 'getOrCreate' | 'list' | 'remove' | 'info' | 'heartbeat' | 'pools' | 'addPool' | 'removePool' | 'imageExists' | 'pullImage' | 'ensureImage'
> & {
  workspaces: {
    create(o: { name: string; owner: string; node: string; labels?: Record<string, string> }): ReturnType<Sbx['workspaces']['create']>;
    get: Sbx['workspaces']['get'];
    update: Sbx['workspaces']['update'];
    list: Sbx['workspaces']['list'];
    delete: Sbx['workspaces']['delete'];
    usage: Sbx['workspaces']['usage'];
    fs(id: string): Promise<WorkspaceFS>;
  };
  snapshots: Sbx['snapshots'];
};

export interface Subject {
  api: SandboxApi;
  image: string;
  /** sbx-test: the WebSocket echo on 3000, the SSE service on 3001. */
  testImage: string;
  pullImage: string;
  /** The pool boxes land on by default (the first): default `local`. */
  pool?: string;
  dispose(): Promise<void>;
}

const OWNER = 'alice';

async function rejectsWith(p: Promise<unknown>, code: string, details?: Record<string, unknown>): Promise<SbxError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof SbxError, `an SbxError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    for (const [k, v] of Object.entries(details ?? {})) {
      if (v instanceof RegExp) assert.match(String(err.details?.[k]), v, `details.${k}`);
      else assert.equal(err.details?.[k], v, `details.${k}`);
    }
    return err;
  }
  assert.fail(`expected ${code}, it resolved`);
}

async function collect(readable: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of readable) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks);
}

/** Polls until `check` holds; fails only at a time a hang reaches, never a slow machine. */
async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  await waitFor(check, { what, intervalMs: 100 });
}

async function running(box: Box, marker: string): Promise<boolean> {
  const ps = await box.exec(['sh', '-c', `ps | grep -c "[s]leep ${marker}" || true`]);
  return ps.stdout.trim() !== '0';
}

/**
 * `gaps`: tests this subject is known to fail, by title, with the reason. They run as `todo`
 * (reported, not failing the run), so the gap stays visible until it is closed.
 */
export function behaviourSuite(name: string, makeSubject: () => Promise<Subject>, gaps: Record<string, string> = {}): void {
  // node:test records the outcome in its runner, as for any top-level test(); nothing awaits its promise.
  const test = (title: string, fn: () => Promise<void>): void => void nodeTest(title, gaps[title] ? { todo: gaps[title] } : {}, fn);
  // A hang (a stream that never sees EOF) fails its test, not the whole file.
  describe(name, { timeout: 60_000 }, () => {
    let s: Subject;
    let box: Box;
    const run = `${process.pid}-${Date.now().toString(36)}`;
    // One box with the test services, made by the first attach test that needs it.
    let services: Promise<Box> | undefined;
    const servicesBox = () =>
      (services ??= s.api.create({
        image: s.testImage,
        owner: OWNER,
        labels: { suite: run, which: 'attach' },
        // 3002 is published but nothing listens on it.
        ports: [{ containerPort: 3000 }, { containerPort: 3001 }, { containerPort: 3002 }],
      }));

    before(async () => {
      s = await makeSubject();
      box = await s.api.create({ image: s.image, owner: OWNER, labels: { suite: run } });
    });
    after(async () => {
      if (services) await (await services.catch(() => undefined))?.remove();
      await s?.dispose();
    });

    test('create, get, list, getOrCreate, info, remove; not_found after', async () => {
      const b = await s.api.create({ image: s.image, owner: OWNER, labels: { suite: run, which: 'crud' } });
      assert.match(b.id, /^sb-[0-9a-f]{12}$/);
      assert.equal(b.owner, OWNER);
      assert.equal(b.pool, s.pool ?? 'local');
      assert.equal(b.image, s.image);
      assert.equal(b.status, 'running');
      assert.deepEqual(b.labels, { suite: run, which: 'crud' });
      assert.equal((await s.api.get(b.id)).id, b.id);
      assert.deepEqual(
        (await s.api.list({ labels: { suite: run, which: 'crud' } })).map((x) => x.id),
        [b.id],
      );
      assert.equal((await s.api.list({ owner: 'nobody-else' })).length, 0);
      const again = await s.api.getOrCreate({ id: b.id, image: s.image, owner: OWNER });
      assert.equal(again.id, b.id);
      assert.equal(again.containerId, b.containerId, 'getOrCreate returned the existing box');
      const info = await b.info();
      assert.equal(info.status, 'running');
      assert.equal(info.owner, OWNER);
      assert.equal((await s.api.info(b.id)).id, b.id);
      await b.remove();
      await rejectsWith(s.api.get(b.id), 'not_found', { id: b.id });
      await rejectsWith(s.api.remove(b.id), 'not_found', { id: b.id });
      assert.equal((await s.api.list({ labels: { which: 'crud' } })).length, 0);
    });

    test('getOrCreate with a new id creates it; Symbol.asyncDispose removes it', async () => {
      const id = `sdk-goc-${run}`.slice(0, 60);
      {
        await using b = await s.api.getOrCreate({ id, image: s.image, owner: OWNER });
        assert.equal(b.id, id);
        assert.equal((await s.api.get(id)).id, id);
      }
      await rejectsWith(s.api.get(id), 'not_found');
    });

    test('heartbeat: processCount shows in info()', async () => {
      await s.api.heartbeat(box.id, { active: true, processCount: 7 });
      assert.equal((await box.info()).processCount, 7);
      await rejectsWith(s.api.heartbeat('sb-000000000000', { active: true }), 'not_found');
    });

    test('stop and start', async () => {
      const b = await s.api.create({ image: s.image, owner: OWNER, labels: { suite: run }, stopTimeoutMs: 1000 });
      await b.stop();
      assert.equal((await b.info()).status, 'stopped');
      await b.start();
      assert.equal((await b.info()).status, 'running');
      assert.equal((await b.exec(['echo', 'back'])).stdout, 'back\n');
      await b.remove();
    });

    test('pause and resume: paused on the engine, a file and a process survive, any use resumes it, reads do not', async () => {
      const b = await s.api.create({
        image: s.image,
        owner: OWNER,
        labels: { suite: run },
        cmd: ['sh', '-c', 'echo $$ > /tmp/main.pid; while :; do sleep 0.05; done'],
      });
      try {
        const before = await b.exec([
          'sh',
          '-c',
          'until [ -s /tmp/main.pid ]; do sleep 0.01; done; head -c 65536 /dev/urandom > /tmp/kept; sha256sum /tmp/kept; cat /tmp/main.pid',
        ]);
        assert.equal(before.exitCode, 0, before.stderr);
        const [hashLine, pid] = before.stdout.trim().split('\n');
        await b.pause();
        assert.equal(b.status, 'paused');
        assert.equal((await b.info()).status, 'paused', 'info is a read: still paused');
        assert.equal((await s.api.list({ labels: { suite: run } })).find((x) => x.id === b.id)?.status, 'paused');
        const after = await b.exec(['sh', '-c', `sha256sum /tmp/kept; kill -0 ${pid} && echo alive`]);
        assert.equal(after.stdout, `${hashLine}\nalive\n`, 'the bytes and the process, as they were');
        assert.equal((await b.info()).status, 'running', 'the exec resumed it');
        await b.pause();
        await b.resume();
        assert.equal(b.status, 'running');
        await b.stop();
        await rejectsWith(b.pause(), 'conflict');
        await b.resume();
        assert.equal((await b.info()).status, 'running', 'resume starts a stopped box');
      } finally {
        await b.remove();
      }
      await rejectsWith(b.pause(), 'not_found');
    });

    test('snapshot: a box made from it has the files, its command starts anew; list, get, delete; then not_found', async () => {
      const b = await s.api.create({
        image: s.image,
        owner: OWNER,
        labels: { suite: run },
        cmd: ['sh', '-c', 'echo started >> /tmp/main.log; exec sleep 31337'],
      });
      let copy: Box | undefined;
      const snap = await (async () => {
        await until('the source ran its command', async () => (await b.exec(['cat', '/tmp/main.log'])).stdout === 'started\n');
        return b.snapshot({ name: `beh-${run}` });
      })().catch(async (err: unknown) => {
        await b.remove();
        throw err;
      });
      try {
        assert.equal(snap.owner, OWNER);
        assert.equal(snap.pool, s.pool ?? 'local');
        assert.equal((await b.info()).status, 'running', 'the source box keeps running');
        assert.ok((await s.api.snapshots.list()).some((x) => x.id === snap.id));
        assert.deepEqual(await s.api.snapshots.get(snap.id), snap);
        copy = await s.api.create({
          image: snap.id,
          owner: OWNER,
          labels: { suite: run },
          cmd: ['sh', '-c', 'echo started >> /tmp/main.log; exec sleep 31337'],
        });
        assert.equal(copy.pool, snap.pool, 'made where the image is');
        // The log the source's command wrote is in the files, and the copy's own command ran once more.
        await until('the copy ran its command', async () => (await copy!.exec(['cat', '/tmp/main.log'])).stdout === 'started\nstarted\n');
        await rejectsWith(s.api.snapshots.delete(snap.id), 'conflict');
      } finally {
        await copy?.remove();
        await b.remove();
      }
      await s.api.snapshots.delete(snap.id);
      await rejectsWith(s.api.snapshots.get(snap.id), 'not_found');
      await rejectsWith(s.api.create({ image: snap.id, owner: OWNER }), 'not_found');
    });

    test('a command that exits 4 leaves the box stopped with exit code 4; logs() reads its output: followed to its end, all, tail, since', async () => {
      const b = await s.api.create({
        image: s.image,
        owner: OWNER,
        labels: { suite: run },
        cmd: ['sh', '-c', 'echo one; echo two >&2; until [ -e /tmp/go ]; do sleep 0.05; done; echo three; exit 4'],
      });
      try {
        const followed: LogChunk[] = [];
        const it = (await b.logs({ follow: true }))[Symbol.asyncIterator]();
        while (followed.length < 2) {
          const n = await it.next();
          assert.ok(!n.done, 'the follow ended early');
          followed.push(n.value);
        }
        await b.exec(['touch', '/tmp/go']);
        // The follow ends by itself once the command has ended.
        for (let n = await it.next(); !n.done; n = await it.next()) followed.push(n.value);
        const info = await b.info();
        assert.deepEqual([info.status, info.exitCode, info.oomKilled], ['stopped', 4, false]);
        const all: LogChunk[] = [];
        for await (const c of await b.logs()) all.push(c);
        for (const got of [followed, all]) {
          const by = (stream: string) => got.filter((c) => c.stream === stream).map((c) => c.data);
          assert.deepEqual([by('stdout'), by('stderr')], [['one\n', 'three\n'], ['two\n']]);
        }
        const tail: string[] = [];
        for await (const c of await b.logs({ tail: 1 })) tail.push(c.data);
        assert.deepEqual(tail, ['three\n']);
        const since: string[] = [];
        for await (const c of await b.logs({ since: all.find((c) => c.data === 'three\n')!.time })) since.push(c.data);
        assert.deepEqual(since, ['three\n']);
        await rejectsWith(b.logs({ tail: -1 }), 'invalid_argument', { field: 'tail' });
        await rejectsWith(b.logs({ since: 'yesterday' }), 'invalid_argument', { field: 'since' });
        await rejectsWith(b.logs({ since: new Date().toISOString(), sinceMs: 1000 }), 'invalid_argument', { field: 'sinceMs' });
      } finally {
        await b.remove();
      }
    });

    test('logs: a follow of a box whose command runs on ends when its signal aborts', async () => {
      const ac = new AbortController();
      const logs = await box.logs({ follow: true, signal: ac.signal });
      const done = (async () => {
        for await (const _ of logs) void _;
      })();
      ac.abort();
      await done;
    });

    test('exec: stdout, stderr, exit codes, stdin, env, workDir', async () => {
      const r = await box.exec(['sh', '-c', 'echo out; echo err >&2; exit 3']);
      assert.equal(r.exitCode, 3);
      assert.equal(r.stdout, 'out\n');
      assert.equal(r.stderr, 'err\n');
      assert.equal(r.timedOut, false);
      assert.equal(r.truncated, false);
      assert.ok(Number.isInteger(r.durationMs) && r.durationMs >= 0);
      assert.equal((await box.exec(['cat'], { stdin: 'piped in' })).stdout, 'piped in');
      assert.equal((await box.exec(['wc', '-c'], { stdin: new Uint8Array([0, 1, 2, 255]) })).stdout.trim(), '4');
      assert.equal((await box.exec(['sh', '-c', 'echo $A $(pwd)'], { env: { A: 'b' }, workDir: '/tmp' })).stdout, 'b /tmp\n');
      const cut = await box.exec(['sh', '-c', 'head -c 5000 /dev/zero'], { maxOutputBytes: 100 });
      assert.equal(cut.truncated, true);
      assert.equal(cut.stdout.length, 100);
    });

    test('exec: a timeout kills the process inside the box (timedOut, 137)', async () => {
      // Returned at the timeout, not when the 302 s sleep ended: timedOut and 137.
      const r = await box.exec(['sh', '-c', 'exec sleep 302'], { timeoutMs: 500 });
      assert.equal(r.timedOut, true);
      assert.equal(r.exitCode, 137);
      await until('the timed-out process to be gone', async () => !(await running(box, '302')));
    });

    test('exec: an AbortSignal rejects with cancelled and kills the process', async () => {
      const controller = new AbortController();
      const p = box.exec(['sh', '-c', 'exec sleep 303'], { signal: controller.signal });
      await until('the process to run', () => running(box, '303'));
      controller.abort();
      await rejectsWith(p, 'cancelled');
      await until('the aborted process to be gone', async () => !(await running(box, '303')));
    });

    test('errors: invalid_argument names the field; a missing program is not_found', async () => {
      await rejectsWith(s.api.create({ image: s.image, owner: OWNER, memory: -5 }), 'invalid_argument', { field: 'memory' });
      await rejectsWith(s.api.create({ image: s.image, owner: OWNER, idleTimeoutMs: -1 }), 'invalid_argument', { field: 'idleTimeoutMs' });
      await rejectsWith(box.exec([]), 'invalid_argument', { field: 'cmd' });
      await rejectsWith(box.exec(['true'], { timeoutMs: -1 }), 'invalid_argument', { field: 'timeoutMs' });
      await rejectsWith(s.api.getOrCreate({ image: s.image, owner: OWNER }), 'invalid_argument', { field: 'id' });
      await rejectsWith(s.api.get('sb-000000000000'), 'not_found', { id: 'sb-000000000000' });
      await rejectsWith(box.exec(['/no/such/program']), 'not_found');
    });

    test('stream: bad options are invalid_argument naming the field; a program that cannot start is not_found (from stream(), or at the latest from wait())', async () => {
      const outcome = box.stream(['/no/such/program']).then((st) => {
        st.stdout.resume();
        st.stderr.resume();
        return st.wait();
      });
      await rejectsWith(outcome, 'not_found');
      await rejectsWith(box.stream([]), 'invalid_argument', { field: 'cmd' });
      await rejectsWith(box.stream(['true'], { timeoutMs: -1 }), 'invalid_argument', { field: 'timeoutMs' });
      await rejectsWith(box.stream(['true'], { tty: true, size: { cols: 0, rows: 24 } }), 'invalid_argument', { field: 'size.cols' });
    });

    test('getOrCreate: concurrent calls for one id make one box', async () => {
      const id = `sdk-join-${run}`.slice(0, 60);
      const boxes = await Promise.all([1, 2, 3].map(() => s.api.getOrCreate({ id, image: s.image, owner: OWNER, labels: { suite: run } })));
      assert.deepEqual(new Set(boxes.map((b) => b.containerId)).size, 1);
      await rejectsWith(s.api.getOrCreate({ id, image: s.image, owner: 'mallory' }), 'conflict');
      await boxes[0]!.remove();
    });

    test('stream: stdin half-close, cat sees EOF and its remaining output still arrives', async () => {
      const st = await box.stream(['sh', '-c', 'cat; echo done; echo bye >&2; exit 4']);
      const out = collect(st.stdout);
      const err = collect(st.stderr);
      st.stdin.write('hello ');
      st.stdin.write(Buffer.from('world\n'));
      st.stdin.end();
      assert.equal(await st.wait(), 4);
      assert.equal((await out).toString(), 'hello world\ndone\n');
      assert.equal((await err).toString(), 'bye\n');
    });

    test('stream: 2 MiB through stdin and back, with backpressure both ways, and wait() right after the exit', async () => {
      // Repeated: the SDK once waited out the WebSocket's 30 s close timeout after most such runs.
      for (let run = 0; run < 6; run++) {
        const started = Date.now();
        const data = randomBytes(2 * 1024 * 1024);
        const st = await box.stream(['sh', '-c', 'cat | sha256sum']);
        const out = collect(st.stdout);
        for (let i = 0; i < data.length; i += 64 * 1024) {
          const full = !st.stdin.write(data.subarray(i, i + 64 * 1024));
          // Odd runs write ahead of the drain, so the last data and the EOF leave together.
          if (full && run % 2 === 0) await new Promise((r) => st.stdin.once('drain', r));
        }
        st.stdin.end();
        assert.equal(await st.wait(), 0);
        assert.equal((await out).toString().split(' ')[0], createHash('sha256').update(data).digest('hex'));
        // The one bound left: it is pinned to the 30 s WebSocket close timeout the bug waited out, not to this machine's speed.
        assert.ok(Date.now() - started < 25_000, `run ${run} took ${Date.now() - started} ms: the 30 s close timeout again?`);
      }
    });

    test('stream: cancel() works while the process ignores a full stdin', async () => {
      const st = await box.stream(['sh', '-c', 'exec sleep 308']);
      st.stdout.resume();
      st.stdin.on('error', () => undefined);
      await until('the process to run', () => running(box, '308'));
      const chunk = Buffer.alloc(1024 * 1024);
      for (let i = 0; i < 16; i++) st.stdin.write(chunk);
      await until('stdin to be full', async () => st.stdin.writableNeedDrain);
      await st.cancel();
      assert.equal(await st.wait(), 137);
      await until('the cancelled process to be gone', async () => !(await running(box, '308')));
    });

    test('stream: a command that ends at once loses neither its output nor its exit (30 in a row)', async () => {
      // Over the WebSocket, a fast command's frames can arrive in the same read as the upgrade.
      for (let i = 0; i < 30; i++) {
        const st = await box.stream(['sh', '-c', `echo fast-${i}`]);
        const out: Buffer[] = [];
        st.stdout.on('data', (c: Buffer) => out.push(c));
        st.stdin.end();
        assert.equal(await st.wait(), 0, `run ${i}`);
        assert.equal(Buffer.concat(out).toString(), `fast-${i}\n`, `run ${i}`);
      }
    });

    test('stream: cancel() kills the process inside the box; wait() gives 137', async () => {
      const st = await box.stream(['sh', '-c', 'echo up; exec sleep 304']);
      const first = await new Promise<string>((resolve) => st.stdout.once('data', (c: Buffer) => resolve(c.toString())));
      assert.equal(first, 'up\n');
      st.stdout.resume();
      await st.cancel();
      assert.equal(await st.wait(), 137);
      await until('the cancelled process to be gone', async () => !(await running(box, '304')));
    });

    test('stream: an AbortSignal kills it too; a timeout ends it with 137', async () => {
      const controller = new AbortController();
      const st = await box.stream(['sh', '-c', 'exec sleep 305'], { signal: controller.signal });
      st.stdout.resume();
      await until('the process to run', () => running(box, '305'));
      controller.abort();
      assert.equal(await st.wait(), 137);
      await until('the aborted process to be gone', async () => !(await running(box, '305')));
      const timed = await box.stream(['sleep', '306'], { timeoutMs: 300 });
      timed.stdout.resume();
      assert.equal(await timed.wait(), 137);
    });

    test('stream: a TTY of the asked size, resize() changes it, stderr merged', async () => {
      // Each line typed prints the size again, until q: the resize is asked for until it shows
      // (it travels beside stdin, not in order with it).
      const script = 'stty size; while read x && [ "$x" != q ]; do stty size; done; echo e >&2';
      const st: ExecStream = await box.stream(['sh', '-c', script], { tty: true, size: { cols: 80, rows: 24 } });
      let out = '';
      st.stdout.on('data', (c: Buffer) => (out += c.toString()));
      st.stderr.resume();
      await until('the first size', async () => out.includes('24 80'));
      await st.resize({ cols: 100, rows: 40 });
      await until('the new size', async () => {
        if (out.includes('40 100')) return true;
        st.stdin.write('go\r');
        return false;
      });
      st.stdin.write('q\r');
      assert.equal(await st.wait(), 0);
      assert.match(out, /e\r?\n/);
    });

    test('workspace files: write, read (whole and streamed), readDir, stat, mkdirAll, rename, copy, remove, tar out and in', async () => {
      const ws = await s.api.workspaces.create({ name: `sdk-${run}`, owner: OWNER, node: s.pool ?? 'local', labels: { suite: run } });
      assert.equal((await s.api.workspaces.get(ws.id)).name, `sdk-${run}`);
      const renamed = await s.api.workspaces.update(ws.id, { name: `sdk2-${run}`, labels: { stage: 'two' } });
      assert.equal(renamed.name, `sdk2-${run}`);
      assert.deepEqual(renamed.labels, { stage: 'two' });
      assert.ok((await s.api.workspaces.list({ owner: OWNER })).some((w) => w.id === ws.id));
      const b = await s.api.create({ image: s.image, owner: OWNER, labels: { suite: run }, workspaceId: ws.id });
      try {
        const fs = await b.workspace();
        await fs.writeFile('notes/hello.txt', 'hi there');
        assert.equal(await fs.readFile('notes/hello.txt', 'utf8'), 'hi there');
        assert.equal((await b.exec(['cat', `${b.mountPath}/notes/hello.txt`])).stdout, 'hi there', 'the box sees the file');
        await b.exec(['sh', '-c', `echo from-box > ${b.mountPath}/notes/box.txt`]);
        assert.equal(await fs.readFile('notes/box.txt', 'utf8'), 'from-box\n', 'and the API sees what the box wrote');

        const big = randomBytes(3 * 1024 * 1024 + 17);
        const chunks = async function* () {
          for (let i = 0; i < big.length; i += 100_000) yield big.subarray(i, i + 100_000);
        };
        await fs.writeFile('data/big.bin', Readable.from(chunks()), { mode: 0o600 });
        const streamed = await collect(await fs.createReadStream('data/big.bin'));
        assert.ok(streamed.equals(big), 'the streamed read gives the streamed write back');
        const st = await fs.stat('data/big.bin');
        assert.equal(st.size, big.length);
        assert.equal(st.isFile, true);
        assert.equal(st.mode, 0o600);
        assert.equal((await fs.readFile('data/big.bin')).length, big.length);

        await fs.mkdirAll('a/b/c');
        assert.equal((await fs.stat('a/b/c')).isDir, true);
        await fs.writeFileBase64('a/b/c/x.bin', Buffer.from([1, 2, 3]).toString('base64'));
        assert.equal(await fs.readFileBase64('a/b/c/x.bin'), 'AQID');
        await fs.rename('a/b/c/x.bin', 'a/y.bin');
        await fs.copy('a/y.bin', 'a/z.bin');
        assert.deepEqual(
          (await fs.readDir('a')).map((e) => [e.name, e.isDir]),
          [
            ['b', true],
            ['y.bin', false],
            ['z.bin', false],
          ],
        );
        const deep = (await fs.readDir('', { recursive: true })).map((e) => e.name).sort();
        assert.ok(deep.includes('a/b/c') && deep.includes('data/big.bin') && deep.includes('notes/hello.txt'), deep.join(','));
        assert.equal(await fs.exists('a/z.bin'), true);
        await fs.remove('a/z.bin');
        assert.equal(await fs.exists('a/z.bin'), false);
        await rejectsWith(fs.readFile('a/z.bin'), 'not_found', { field: 'path' });
        await rejectsWith(fs.readFile('../etc/passwd'), 'invalid_argument', { field: 'path' });
        await rejectsWith(fs.remove('a'), 'conflict');
        await fs.removeAll('a');
        await fs.removeAll('a');
        assert.equal(await fs.exists('a'), false);

        const tar = await collect(await fs.exportTar('notes'));
        assert.ok(tar.length >= 1024 && tar.length % 512 === 0, `a tar stream (${tar.length} bytes)`);
        const imported = await fs.importTar('restored', Readable.from([tar.subarray(0, 700), tar.subarray(700)]));
        assert.equal(imported.entries, 2);
        assert.equal(imported.bytes, 'hi there'.length + 'from-box\n'.length);
        assert.equal(await fs.readFile('restored/hello.txt', 'utf8'), 'hi there');
        assert.equal((await fs.importTar('again', tar)).entries, 2, 'a whole archive in memory too');
        const usage = await s.api.workspaces.usage(ws.id);
        assert.ok(usage.bytes >= big.length && usage.files >= 5, JSON.stringify(usage));
        assert.equal((await s.api.workspaces.fs(ws.id)).id, ws.id);
      } finally {
        await b.remove();
        await s.api.workspaces.delete(ws.id);
      }
      await rejectsWith(s.api.workspaces.get(ws.id), 'not_found');
      await rejectsWith(box.workspace(), 'not_found', { id: box.id });
    });

    test('workspace copyFromHost: a file, and a tree with long names, modes, an empty file and dir, a symlink', async () => {
      const host = mkdtempSync(join(tmpdir(), 'sbx-sdk-host-'));
      const ws = await s.api.workspaces.create({ name: `host-${run}`, owner: OWNER, node: s.pool ?? 'local' });
      try {
        const long = `${'d'.repeat(90)}/${'n'.repeat(120)}.txt`;
        mkdirSync(join(host, 'tree', 'empty'), { recursive: true });
        mkdirSync(join(host, 'tree', 'd'.repeat(90)));
        const blob = randomBytes(200_000 + 3);
        writeFileSync(join(host, 'tree', 'blob.bin'), blob);
        writeFileSync(join(host, 'tree', 'run.sh'), '#!/bin/sh\necho hi\n', { mode: 0o750 });
        chmodSync(join(host, 'tree', 'run.sh'), 0o750);
        writeFileSync(join(host, 'tree', 'zero'), '');
        writeFileSync(join(host, 'tree', long), 'long name');
        symlinkSync('blob.bin', join(host, 'tree', 'link'));
        writeFileSync(join(host, 'single.txt'), 'one file');
        const fs = await s.api.workspaces.fs(ws.id);
        await fs.copyFromHost(join(host, 'single.txt'));
        assert.equal(await fs.readFile('single.txt', 'utf8'), 'one file');
        await fs.copyFromHost(join(host, 'tree'), 'copied');
        const entries = (await fs.readDir('copied', { recursive: true })).map((e) => [
          e.name,
          e.isDir,
          e.isSymlink,
          e.isDir || e.isSymlink ? 0 : e.size,
          e.mode,
        ]);
        entries.sort((a, b) => String(a[0]).localeCompare(String(b[0])));
        assert.deepEqual(
          entries,
          [
            ['blob.bin', false, false, blob.length, 0o644],
            ['d'.repeat(90), true, false, 0, 0o755],
            [long, false, false, 9, 0o644],
            ['empty', true, false, 0, 0o755],
            ['link', false, true, 0, entries.find((e) => e[0] === 'link')![4]],
            ['run.sh', false, false, 18, 0o750],
            ['zero', false, false, 0, 0o644],
          ].sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
        );
        assert.ok((await fs.readFile('copied/blob.bin')).equals(blob));
        assert.equal(await fs.readFile(`copied/${long}`, 'utf8'), 'long name');
        await rejectsWith(fs.copyFromHost(join(host, 'missing')), 'not_found', { field: 'hostPath' });
        await rejectsWith(fs.copyFromHost('relative/path'), 'invalid_argument', { field: 'hostPath' });
      } finally {
        await s.api.workspaces.delete(ws.id);
        rmSync(host, { recursive: true, force: true });
      }
    });

    test('attach ws: a text and a 1 MB binary message echo back; close with a code', async () => {
      const b = await servicesBox();
      const conn = await b.attach(3000, { protocol: 'ws', path: '/echo' });
      assert.equal(conn.protocol, 'ws');
      assert.match(conn.url, new RegExp(`^ws://.*:\\d+/.*echo$`));
      const it = conn[Symbol.asyncIterator]();
      conn.send('hello attach');
      assert.deepEqual((await it.next()).value, { type: 'text', data: 'hello attach' });
      const big = randomBytes(1024 * 1024);
      conn.send(big);
      const back = (await it.next()).value;
      assert.equal(back?.type, 'binary');
      assert.ok(back?.type === 'binary' && Buffer.from(back.data).equals(big), 'the 1 MB message came back byte for byte');
      const closedEvent = new Promise((r) => conn.on('close', r));
      conn.close(4001, 'done here');
      const info = await conn.closed;
      assert.equal(info.code, 4001);
      assert.equal(info.reason, 'done here');
      assert.deepEqual(await closedEvent, info);
      assert.equal((await it.next()).done, true, 'the iterator ends with the socket');
    });

    test('attach ws: messages through the message event', async () => {
      const b = await servicesBox();
      const conn = await b.attach(3000, { protocol: 'ws' });
      const got: unknown[] = [];
      const two = new Promise<void>((resolve) =>
        conn.on('message', (m) => {
          got.push(m.type === 'text' ? m.data : Buffer.from(m.data).toString('hex'));
          if (got.length === 2) resolve();
        }),
      );
      conn.send('a');
      conn.send(Uint8Array.of(1, 2, 255));
      await two;
      assert.deepEqual(got, ['a', '0102ff']);
      conn.close();
      assert.equal((await conn.closed).code, 1000);
    });

    test('attach sse: the five events arrive one by one, about 100 ms apart (streamed, not buffered)', async () => {
      const b = await servicesBox();
      const conn = await b.attach(3001, { protocol: 'sse', path: '/events' });
      assert.equal(conn.protocol, 'sse');
      assert.match(conn.url, /^http:\/\/.*\/events$/);
      const seen: Array<{ data: string; event: string; at: number }> = [];
      for await (const e of conn) seen.push({ data: e.data, event: e.event, at: Date.now() });
      await conn.closed;
      assert.deepEqual(
        seen.map((e) => e.data),
        ['event-0', 'event-1', 'event-2', 'event-3', 'event-4'],
      );
      assert.ok(
        seen.every((e) => e.event === 'message'),
        'the default event type',
      );
      const gaps = seen.slice(1).map((e, i) => e.at - seen[i]!.at);
      // Sent 100 ms apart; on a loaded machine one may be late and the next then follows closer,
      // but a buffering hop would hand several over together (gaps of a few ms) or all at the end.
      assert.ok(
        gaps.every((g) => g >= 20),
        `each event arrived on its own (gaps ${gaps.join(', ')} ms)`,
      );
      assert.ok(seen.at(-1)!.at - seen[0]!.at >= 300, 'the stream took its 400 ms');
    });

    test('attach sse: id (carried over), event, retry, multi-line data; comments and CRLF', async () => {
      const b = await servicesBox();
      const conn = await b.attach(3001, { protocol: 'sse', path: 'rich' });
      const events = [];
      for await (const e of conn) events.push(e);
      assert.deepEqual(events, [
        { id: '1', event: 'greeting', data: 'hello\n two lines', retry: 2500 },
        { id: '1', event: 'message', data: 'carries id 1' },
        { id: '2', event: 'bye', data: '{"done":true}' },
      ]);
    });

    test('attach errors: options invalid_argument; port not exposed, nothing listening, aborted', async () => {
      const b = await servicesBox();
      await rejectsWith(b.attach(0, { protocol: 'ws' }), 'invalid_argument', { field: 'port' });
      await rejectsWith(b.attach(3000, { protocol: 'tcp' as 'ws' }), 'invalid_argument', { field: 'protocol' });
      await rejectsWith(b.attach(3000, { protocol: 'ws', readyTimeoutMs: -1 }), 'invalid_argument', { field: 'readyTimeoutMs' });
      await rejectsWith(b.attach(3005, { protocol: 'ws' }), 'not_available', { reason: 'port_not_exposed' });
      await rejectsWith(box.attach(3000, { protocol: 'sse' }), 'not_available', { reason: 'port_not_exposed' });
      // Not before the ready timeout; after it, at a time only a hang reaches (within).
      let started = Date.now();
      const notReady = await rejectsWith(within(b.attach(3002, { protocol: 'ws', readyTimeoutMs: 1500 }), 'the ws ready timeout'), 'not_available', {
        reason: 'port_not_ready',
      });
      assert.match(notReady.message, /3002/);
      assert.ok(Date.now() - started >= 1400, `gave up after ${Date.now() - started} ms, before the ready timeout`);
      started = Date.now();
      await rejectsWith(within(b.attach(3002, { protocol: 'sse', readyTimeoutMs: 1000 }), 'the sse ready timeout'), 'not_available', {
        reason: 'port_not_ready',
      });
      assert.ok(Date.now() - started >= 900, `sse gave up after ${Date.now() - started} ms`);
      // cancelled, not the port_not_ready of the default 10 s ready timeout: the abort ended it.
      const controller = new AbortController();
      setTimeout(() => controller.abort(), 300);
      await rejectsWith(b.attach(3002, { protocol: 'ws', signal: controller.signal }), 'cancelled');
      await rejectsWith(b.attach(3000, { protocol: 'ws', signal: AbortSignal.abort() }), 'cancelled');
      // SSE on the WebSocket port: a 200 that is not an event stream is refused, not retried.
      await rejectsWith(b.attach(3000, { protocol: 'sse' }), 'not_available', { reason: 'handshake_refused' });
    });

    test('pools: list, add, remove; pulling an image gives progress events', async () => {
      const pools = await s.api.pools();
      assert.deepEqual(
        pools.map((p) => p.name),
        [s.pool ?? 'local'],
      );
      assert.equal(pools[0]!.connected, true);
      const added = await s.api.addPool({ name: 'extra', addr: pools[0]!.addr, maxTotal: 3 });
      assert.equal(added.name, 'extra');
      assert.equal(added.maxTotal, 3);
      assert.equal(added.boxes, 0);
      await rejectsWith(s.api.addPool({ name: 'extra', addr: pools[0]!.addr }), 'conflict');
      assert.ok((await s.api.pools()).some((p) => p.name === 'extra'));
      await s.api.removePool('extra');
      await rejectsWith(s.api.removePool('extra'), 'pool_not_found');
      const events = [];
      for await (const e of s.api.pullImage(s.pool ?? 'local', s.pullImage)) events.push(e);
      assert.ok(events.length > 0, 'some progress');
      assert.ok(
        events.every((e) => typeof e.status === 'string'),
        JSON.stringify(events.slice(0, 3)),
      );
      assert.ok(
        events.some((e) => /digest|up to date|downloaded/i.test(e.status)),
        JSON.stringify(events.map((e) => e.status)),
      );
      assert.equal(await s.api.imageExists(s.pool ?? 'local', s.pullImage), true);
      assert.deepEqual(await s.api.ensureImage(s.pool ?? 'local', s.pullImage), { pulled: false });
      const bad = (async () => {
        for await (const _ of s.api.pullImage(s.pool ?? 'local', '127.0.0.1:5000/sbx/no-such-image:latest')) {
          /* drain */
        }
      })();
      await rejectsWith(bad, 'not_found');
    });
  });
}
