/**
 * The box filesystem (`box.files()`), one set of tests run on the library's Manager and on the
 * SDK against a real `sbx serve`, through the in-box agent and through the fallback (a pool with
 * `agent: false`, where the tool is copied in and run by the engine's exec).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { SbxError } from '../../errors.js';
import type { Box } from '../../client/box.js';
import type { Sbx } from '../../client/client.js';
import { HANG_MS } from '../wait.js';

export interface BoxFilesSubject {
  api: Pick<Sbx, 'create'>;
  image: string;
  /** Pools whose boxes serve exec through the agent and through the engine (agent: false). */
  pools: { agent: string; fallback: string };
  dispose(): Promise<void>;
}

const MB = 1024 * 1024;

async function rejectsWith(p: Promise<unknown>, code: string, details: Record<string, unknown> = {}): Promise<SbxError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof SbxError, `an SbxError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    for (const [k, v] of Object.entries(details)) assert.equal(err.details?.[k], v, `details.${k} of ${err.message}`);
    return err;
  }
  assert.fail(`expected ${code}, it resolved`);
}

/**
 * `bytes` of deterministic content in 64 KiB chunks, hashed as it is produced. At `holdAt` bytes
 * it waits until `landed()` says the box already has part of it: a write that gathered the
 * source whole before sending would never get there.
 */
function source(bytes: number, holdAt: number, landed: () => Promise<boolean>): { stream: Readable; digest: () => string } {
  const hash = createHash('sha256');
  let sent = 0;
  let held = false;
  const block = createHash('sha512').update('seed').digest();
  const next = async (stream: Readable) => {
    if (sent >= holdAt && !held) {
      held = true;
      const deadline = Date.now() + HANG_MS;
      while (!(await landed())) {
        if (Date.now() > deadline) return void stream.destroy(new Error('nothing reached the box before the source ended: the write is not streamed'));
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    if (sent >= bytes) return void stream.push(null);
    const n = Math.min(64 * 1024, bytes - sent);
    const chunk = Buffer.alloc(n);
    for (let i = 0; i < n; i += block.length) block.copy(chunk, i, 0, Math.min(block.length, n - i));
    chunk.writeUInt32BE(sent / 1024, 0);
    sent += n;
    hash.update(chunk);
    stream.push(chunk);
  };
  const stream = new Readable({
    read() {
      // A landed() that throws fails the write with its error instead of an unhandled rejection.
      next(this).catch((err: unknown) => this.destroy(err instanceof Error ? err : new Error(String(err))));
    },
  });
  return { stream, digest: () => hash.digest('hex') };
}

/** The largest growth of this process's buffers (external memory) while `work` runs. */
async function peakBufferGrowth<T>(work: () => Promise<T>): Promise<{ result: T; growthMB: number }> {
  const base = process.memoryUsage().arrayBuffers;
  let peak = base;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().arrayBuffers)), 10);
  try {
    const result = await work();
    return { result, growthMB: (peak - base) / MB };
  } finally {
    clearInterval(timer);
  }
}

export function boxFilesSuite(name: string, makeSubject: () => Promise<BoxFilesSubject>): void {
  describe(name, { timeout: 120_000 }, () => {
    let s: BoxFilesSubject;
    const boxes: Record<'agent' | 'fallback', Box | undefined> = { agent: undefined, fallback: undefined };
    before(async () => {
      s = await makeSubject();
      [boxes.agent, boxes.fallback] = await Promise.all([
        s.api.create({ image: s.image, owner: 'alice', pool: s.pools.agent }),
        s.api.create({ image: s.image, owner: 'alice', pool: s.pools.fallback }),
      ]);
    });
    after(async () => {
      await Promise.all(Object.values(boxes).map((b) => b?.remove().catch(() => undefined)));
      await s?.dispose();
    });

    for (const path of ['agent', 'fallback'] as const) {
      const box = () => boxes[path]!;

      test(`${path}: write, read, stat, exists, readDir (recursive), mkdirAll, rename, remove, removeAll`, async () => {
        const files = box().files();
        await files.writeFile('/tmp/t/a/hello.txt', 'hello\n');
        assert.equal(await files.readFile('/tmp/t/a/hello.txt', 'utf8'), 'hello\n');
        assert.deepEqual(await files.readFile('/tmp/t/a/hello.txt'), Buffer.from('hello\n'));
        await files.writeFile('/tmp/t/bin', new Uint8Array([0, 1, 2, 255]), { mode: 0o600 });
        const st = await files.stat('/tmp/t/bin');
        assert.deepEqual({ ...st, mtime: undefined }, { name: 'bin', isDir: false, isFile: true, isSymlink: false, size: 4, mode: 0o600, mtime: undefined });
        assert.ok(Math.abs(Date.parse(st.mtime) - Date.now()) < 60_000, st.mtime);
        assert.equal((await files.stat('/tmp/t/a')).isDir, true);
        assert.equal(await files.exists('/tmp/t/a/hello.txt'), true);
        assert.equal(await files.exists('/tmp/t/nope'), false);
        // Written as the box user: the box's own programs see the owner and content.
        assert.equal((await box().exec(['sh', '-c', 'stat -c %u:%a /tmp/t/a/hello.txt; cat /tmp/t/a/hello.txt'])).stdout, '1000:644\nhello\n');

        await files.mkdirAll('/tmp/t/d/e/f', 0o750);
        assert.equal((await files.stat('/tmp/t/d/e')).mode, 0o750);
        await files.mkdirAll('/tmp/t/d/e/f'); // already there: fine
        await rejectsWith(files.mkdirAll('/tmp/t/bin'), 'conflict');
        await box().exec(['ln', '-s', '/etc', '/tmp/t/link']);
        assert.deepEqual(
          (await files.readDir('/tmp/t')).map((e) => [e.name, e.isDir, e.isSymlink]),
          [
            ['a', true, false],
            ['bin', false, false],
            ['d', true, false],
            ['link', false, true],
          ],
        );
        assert.deepEqual(
          (await files.readDir('/tmp/t', { recursive: true })).map((e) => e.name),
          ['a', 'a/hello.txt', 'bin', 'd', 'd/e', 'd/e/f', 'link'],
        );

        await files.rename('/tmp/t/a/hello.txt', '/tmp/t/moved/hi.txt');
        assert.equal(await files.readFile('/tmp/t/moved/hi.txt', 'utf8'), 'hello\n');
        assert.equal(await files.exists('/tmp/t/a/hello.txt'), false);
        await rejectsWith(files.remove('/tmp/t/d'), 'conflict');
        await files.remove('/tmp/t/link');
        assert.equal((await box().exec(['ls', '/etc/hostname'])).exitCode, 0, 'remove deleted the link, not its target');
        await files.remove('/tmp/t/bin');
        await files.removeAll('/tmp/t');
        await files.removeAll('/tmp/t'); // missing: fine
        assert.equal(await files.exists('/tmp/t'), false);
      });

      test(`${path}: a 50 MB file streamed in and out, by hash, never whole in memory`, async () => {
        const files = box().files();
        // Part of the file must be in the box (its temp file) while the source still holds the rest.
        const landed = async () => Number((await box().exec(['sh', '-c', 'cat /tmp/.sbx-tmp-* | wc -c'])).stdout.trim()) >= 8 * MB;
        const src = source(50 * MB, 30 * MB, landed);
        const t0 = Date.now();
        const written = await peakBufferGrowth(() => files.writeFile('/tmp/big.bin', src.stream));
        const t1 = Date.now();
        const read = await peakBufferGrowth(async () => {
          const hash = createHash('sha256');
          let bytes = 0;
          for await (const chunk of await files.createReadStream('/tmp/big.bin')) {
            hash.update(chunk as Buffer);
            bytes += (chunk as Buffer).length;
          }
          return { digest: hash.digest('hex'), bytes };
        });
        const t2 = Date.now();
        assert.equal(read.result.bytes, 50 * MB);
        assert.equal(read.result.digest, src.digest());
        assert.equal((await files.stat('/tmp/big.bin')).size, 50 * MB);
        // Buffers of this process (with sbx serve in it, for the SDK: both ends' copies) are
        // garbage the GC collects late, so the growth is reported, not asserted; the hold in
        // source() is the proof that the write streams.
        console.log(
          `# ${name} ${path}: 50 MB write ${t1 - t0} ms (buffers +${written.growthMB.toFixed(1)} MB), read ${t2 - t1} ms (+${read.growthMB.toFixed(1)} MB)`,
        );
        await files.remove('/tmp/big.bin');
      });

      test(`${path}: a source that fails midway leaves the old file; a destroyed read stream ends the read`, async () => {
        const files = box().files();
        await files.writeFile('/tmp/keep.txt', 'old');
        async function* failing() {
          yield Buffer.from('new content that never lands');
          throw new Error('source broke');
        }
        await assert.rejects(files.writeFile('/tmp/keep.txt', failing()), /source broke/);
        assert.equal(await files.readFile('/tmp/keep.txt', 'utf8'), 'old');
        assert.equal((await box().exec(['sh', '-c', 'ls -a /tmp | grep -c sbx-tmp || true'])).stdout.trim(), '0', 'no temp file left');
        const stream = await files.createReadStream('/etc/passwd');
        stream.destroy();
        await files.remove('/tmp/keep.txt');
      });

      test(`${path}: permissions are the box user's; user root may`, async () => {
        const files = box().files();
        await rejectsWith(files.writeFile('/etc/x', 'no'), 'forbidden', { field: 'path' });
        await rejectsWith(files.readDir('/root'), 'forbidden');
        assert.equal((await box().exec(['ls', '/etc/x'])).exitCode !== 0, true, 'nothing written');
        const root = box().files({ user: 'root' });
        await root.writeFile('/etc/x', 'yes');
        assert.equal(await root.readFile('/etc/x', 'utf8'), 'yes');
        assert.equal((await root.stat('/etc/x')).isFile, true);
        await root.writeFile('/root/secret', 's');
        await rejectsWith(files.readFile('/root/secret'), 'forbidden');
        await rejectsWith(files.removeAll('/etc/x'), 'forbidden');
        assert.deepEqual(
          (await root.readDir('/root')).map((e) => e.name),
          ['secret'],
        );
        await root.removeAll('/etc/x');
        await root.removeAll('/root/secret');
      });

      test(`${path}: errors: not_found, invalid_argument naming the field, nothing written`, async () => {
        const files = box().files();
        await rejectsWith(files.readFile('/tmp/missing'), 'not_found', { field: 'path' });
        await rejectsWith(files.stat('/tmp/missing/deeper'), 'not_found');
        await rejectsWith(files.createReadStream('/tmp/missing'), 'not_found');
        await rejectsWith(files.readDir('/tmp/missing'), 'not_found');
        await rejectsWith(files.rename('/tmp/missing', '/tmp/x'), 'not_found');
        await rejectsWith(files.remove('/tmp/missing'), 'not_found');
        await rejectsWith(files.readFile('/tmp'), 'invalid_argument');
        await rejectsWith(files.writeFile('relative/x', 'no'), 'invalid_argument', { field: 'path' });
        await rejectsWith(files.writeFile('/tmp/a\0b', 'no'), 'invalid_argument', { field: 'path' });
        await rejectsWith(files.rename('/tmp/a', 'b'), 'invalid_argument', { field: 'to' });
        await rejectsWith(files.writeFile('/tmp/m', 'x', { mode: -1 }), 'invalid_argument', { field: 'mode' });
        await rejectsWith(files.removeAll('/'), 'invalid_argument', { field: 'path' });
        assert.throws(
          () => box().files({ user: 'bad user!' }),
          (e: unknown) => e instanceof SbxError && e.code === 'invalid_argument' && e.details?.['field'] === 'user',
        );
        assert.equal((await box().exec(['sh', '-c', 'ls /tmp | grep -c -e "^m$" -e "a.b" || true'])).stdout.trim(), '0');
      });

      test(`${path}: watch: create, write, remove, rename arrive (recursive); abort ends it`, async () => {
        const files = box().files();
        await files.mkdirAll('/tmp/w/sub');
        const ac = new AbortController();
        const w = files.watch('/tmp/w', { recursive: true, signal: ac.signal });
        await w.ready;
        const seen: string[] = [];
        const done = (async () => {
          for await (const e of w) {
            seen.push(`${e.type} ${e.name}`);
            if (e.type === 'remove' && e.name === 'sub/b.txt') ac.abort();
          }
        })();
        await files.writeFile('/tmp/w/a.txt', 'one');
        await box().exec(['sh', '-c', 'echo x > /tmp/w/sub/b.txt; echo y >> /tmp/w/sub/b.txt; mv /tmp/w/a.txt /tmp/w/c.txt; rm /tmp/w/sub/b.txt']);
        await done;
        for (const e of ['create a.txt', 'write a.txt', 'create sub/b.txt', 'write sub/b.txt', 'rename a.txt', 'create c.txt', 'remove sub/b.txt']) {
          assert.ok(seen.includes(e), `${e} in ${JSON.stringify(seen)}`);
        }
        assert.ok(!seen.some((e) => e.includes('sbx-tmp')), 'temp files are not reported');
        await rejectsWith(
          (async () => {
            for await (const _ of files.watch('/tmp/not-there')) break;
          })(),
          'not_found',
        );
        await files.removeAll('/tmp/w');
      });
    }
  });
}
