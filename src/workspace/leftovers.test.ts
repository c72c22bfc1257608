import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { Readable, type Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import * as tar from 'tar-stream';
import { WorkspaceManager } from './manager.js';
import { parseTempName, tempName } from './temp-names.js';
import { deadWriterTempName, makeTempDir, otherNamespaceTempName, rejectsWithCode } from '../testing/workspace/fixtures.js';
import { HANG_MS } from '../testing/wait.js';

const MiB = 1024 * 1024;
const CHILD = fileURLToPath(new URL('../testing/workspace/crash-child.ts', import.meta.url));
const base = { name: 'notes', owner: 'alice', node: 'local' };

let tmp: Awaited<ReturnType<typeof makeTempDir>>;
const children: ChildProcess[] = [];
before(async () => {
  tmp = await makeTempDir('leftovers');
});
after(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await tmp.remove();
});

/** A second sbx process on the data directory (see src/testing/workspace/crash-child.ts), started and ready. */
async function startChild(args: string[]): Promise<{ process: ChildProcess; lines: string[]; exited: Promise<void> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(child);
  child.stdin!.on('error', () => undefined); // EPIPE once it is killed
  const lines: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => lines.push(line));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await waitUntil(() => lines.includes('ready'), `child ${args[0]} ready`);
  return { process: child, lines, exited };
}

/** Polls `check`; fails only at a time a hang reaches (the events here take milliseconds). */
async function waitUntil(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const until = Date.now() + HANG_MS;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** SIGKILL, and wait until the kernel has reaped it (a zombie still has its /proc entry). */
async function kill(child: { process: ChildProcess; exited: Promise<void> }): Promise<void> {
  child.process.kill('SIGKILL');
  await child.exited;
}

/** Writes with backpressure; the reader's exit ends the wait too (the test then fails on what it sees, not by hanging). */
function write(stream: Writable | ReturnType<tar.Pack['entry']>, chunk: Buffer, readerExited: Promise<void>): Promise<void> {
  return Promise.race([new Promise<void>((resolve) => (stream.write(chunk) ? resolve() : stream.once('drain', () => resolve()))), readerExited]);
}

/** Fails at once when a child that should be working has exited; true otherwise. */
function assertRunning(...running: Array<{ process: ChildProcess; lines: string[] }>): boolean {
  for (const child of running) {
    assert.ok(child.process.exitCode === null && child.process.signalCode === null, `a child exited early: ${child.lines.join(' | ')}`);
  }
  return true;
}

/** Chunk `i` of a test file (deterministic, so a hash says the right bytes arrived). */
function chunk(i: number): Buffer {
  const buffer = Buffer.alloc(MiB, i % 251);
  buffer.writeUInt32BE(i, 0);
  return buffer;
}

/** A tar of one `sizeMiB` file streamed to a child's stdin, written on demand. */
function tarOfOneFile(child: { process: ChildProcess; exited: Promise<void> }, sizeMiB: number) {
  const pack = tar.pack();
  // A killed reader closes the pipe: that is the point, not an error of the test.
  pack.on('error', () => undefined);
  pack.pipe(child.process.stdin!);
  const entry = pack.entry({ name: 'big.bin', size: sizeMiB * MiB });
  entry.on('error', () => undefined);
  const hash = createHash('sha256');
  let written = 0;
  return {
    hash,
    async writeMiB(count: number): Promise<void> {
      for (let end = written + count; written < end; written++) {
        const data = chunk(written);
        hash.update(data);
        await write(entry, data, child.exited);
      }
    },
    finish(): void {
      entry.end(undefined);
      pack.finalize();
    },
  };
}

/** Every path below `dir` (lstat, never followed) with its type, and the size of regular files. */
function snapshot(dir: string, prefix = ''): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    const shown = prefix ? `${prefix}/${name}` : name;
    const st = lstatSync(path);
    if (st.isDirectory()) {
      out[shown] = 'dir';
      Object.assign(out, snapshot(path, shown));
    } else {
      out[shown] = st.isSymbolicLink() ? 'symlink' : `file ${st.size}`;
    }
  }
  return out;
}

/** `before` without the paths in `removed` and everything below them. */
function without(before: Record<string, string>, removed: string[]): Record<string, string> {
  return Object.fromEntries(Object.entries(before).filter(([path]) => !removed.some((r) => path === r || path.startsWith(`${r}/`))));
}

/** Paths (relative to `dir`) of entries below it whose temp name carries `pid`. */
function tempEntriesOf(pid: number, dir: string): string[] {
  return Object.keys(snapshot(dir)).filter((path) => parseTempName(path.split('/').at(-1) as string)?.pid === pid);
}

const sizeOf = (path: string): number => (existsSync(path) ? lstatSync(path).size : -1);

test('SIGKILLed imports and writes leave leftovers a fresh manager sweeps, exactly those; live ones of another process and of this one go on untouched', async (t) => {
  const dataDir = join(tmp.path, 'kill-io');
  const first = new WorkspaceManager({ dataDir });
  const ws = await first.create(base);
  const bystander = await first.create({ ...base, name: 'bystander' });
  const files = await first.fs(ws.id);
  await files.writeFile('keep/a.txt', 'real file');
  await files.writeFile('w/existing.bin', chunk(7));
  await (await first.fs(bystander.id)).writeFile('b.txt', 'other workspace');
  const root = await first.mountPath(ws.id);
  const staging = join(dirname(root), 'staging');

  const killedImport = await startChild(['import', dataDir, ws.id, 'imp-killed']);
  const liveImport = await startChild(['import', dataDir, ws.id, 'imp-live']);
  const killedWrite = await startChild(['write', dataDir, ws.id, 'w/killed.bin']);
  const liveWrite = await startChild(['write', dataDir, ws.id, 'w/live.bin']);

  // 8 MiB into a 64 MiB tar entry and into two streamed writes; then the writers wait for more.
  const killedTar = tarOfOneFile(killedImport, 64);
  const liveTar = tarOfOneFile(liveImport, 64);
  await Promise.all([killedTar.writeMiB(8), liveTar.writeMiB(8)]);
  const liveWriteHash = createHash('sha256');
  for (let i = 0; i < 8; i++) {
    await write(killedWrite.process.stdin!, chunk(i), killedWrite.exited);
    liveWriteHash.update(chunk(i));
    await write(liveWrite.process.stdin!, chunk(i), liveWrite.exited);
  }
  // And one of this process's own writes, stalled mid-stream.
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const selfWrite = files.writeFile(
    'w/self.bin',
    Readable.from(
      (async function* () {
        yield chunk(0);
        await gate;
        yield chunk(1);
      })(),
    ),
  );
  const tempFileOf = (pid: number, dir: string) => tempEntriesOf(pid, dir).filter((p) => snapshot(dir)[p]?.startsWith('file'));
  await waitUntil(
    () =>
      assertRunning(killedImport, liveImport, killedWrite, liveWrite) &&
      [killedImport, liveImport].every((c) => tempFileOf(c.process.pid!, staging).some((p) => sizeOf(join(staging, p)) === 8 * MiB)) &&
      [killedWrite, liveWrite].every((c) => tempFileOf(c.process.pid!, root).some((p) => sizeOf(join(root, p)) === 8 * MiB)) &&
      tempFileOf(process.pid, root).length === 1,
    'all five writes to be under way',
  );

  await Promise.all([kill(killedImport), kill(killedWrite)]);
  // The killed import's staged tree is one entry in staging/; the killed write's temp file sits beside its target.
  const leftovers = [
    ...tempEntriesOf(killedImport.process.pid!, staging)
      .filter((p) => !p.includes('/'))
      .map((p) => `${ws.id}/staging/${p}`),
    ...tempEntriesOf(killedWrite.process.pid!, root).map((p) => `${ws.id}/root/${p}`),
  ];
  assert.equal(leftovers.length, 2, leftovers.join(', '));
  const nodeDir = join(dataDir, 'workspaces', 'local');
  const beforeSweep = snapshot(nodeDir);

  const fresh = new WorkspaceManager({ dataDir });
  const started = performance.now();
  assert.deepEqual(await fresh.sweepLeftovers(), { stagingRemoved: 2, orphanDirsRemoved: 0 });
  t.diagnostic(`sweep of 2 workspaces with 2 leftovers and 3 live writes: ${(performance.now() - started).toFixed(1)} ms`);
  await fresh.fs(ws.id); // opening the FS sweeps its staging once more: still only dead writers'
  assert.deepEqual(snapshot(nodeDir), without(beforeSweep, leftovers), 'exactly the two leftovers went');

  // The live ones finish as if nothing happened.
  await liveTar.writeMiB(56);
  liveTar.finish();
  for (let i = 8; i < 16; i++) {
    liveWriteHash.update(chunk(i));
    await write(liveWrite.process.stdin!, chunk(i), liveWrite.exited);
  }
  liveWrite.process.stdin!.end();
  release();
  await selfWrite;
  await Promise.all([liveImport.exited, liveWrite.exited]);
  assert.ok(liveImport.lines.some((l) => l.startsWith('done ')) && liveWrite.lines.some((l) => l.startsWith('done ')), 'both live writers finished');
  const freshFiles = await fresh.fs(ws.id);
  assert.equal(
    createHash('sha256')
      .update(await freshFiles.readFile('imp-live/big.bin'))
      .digest('hex'),
    liveTar.hash.digest('hex'),
  );
  assert.equal(
    createHash('sha256')
      .update(await freshFiles.readFile('w/live.bin'))
      .digest('hex'),
    liveWriteHash.digest('hex'),
  );
  assert.deepEqual(await freshFiles.readFile('w/self.bin'), Buffer.concat([chunk(0), chunk(1)]));
  assert.equal(await freshFiles.readFile('keep/a.txt', 'utf8'), 'real file');
  assert.deepEqual(await freshFiles.readFile('w/existing.bin'), chunk(7));
  assert.equal(await (await fresh.fs(bystander.id)).readFile('b.txt', 'utf8'), 'other workspace');
  assert.equal(await freshFiles.exists('imp-killed'), false, 'nothing of the killed import reached the workspace');
  assert.equal(await freshFiles.exists('w/killed.bin'), false);
  assert.deepEqual(await fresh.sweepLeftovers(), { stagingRemoved: 0, orphanDirsRemoved: 0 });
  assert.deepEqual(
    Object.keys(snapshot(nodeDir)).filter((p) => p.includes('.sbx-tmp-')),
    [],
    'no temp entry is left anywhere',
  );
});

test('a create SIGKILLed mid-way leaves a temp directory the sweep removes; while its process lives (stopped), nothing is removed', async (t) => {
  const dataDir = join(tmp.path, 'kill-create');
  const first = new WorkspaceManager({ dataDir });
  const bystander = await first.create({ ...base, id: 'ws-bystander' });
  await (await first.fs(bystander.id)).writeFile('precious.txt', 'keep');
  const nodeDir = join(dataDir, 'workspaces', 'local');
  const creator = await startChild(['create', dataDir, '8']);
  const pid = creator.process.pid!;
  await waitUntil(() => readdirSync(nodeDir).filter((n) => n.startsWith('ws-')).length > 20, 'creates');

  // Stop it at an arbitrary moment until one of its creates is caught half-way.
  let building: string[] = [];
  let attempts = 0;
  while (building.length === 0) {
    assert.ok(++attempts <= 500, 'never caught a create in progress');
    creator.process.kill('SIGSTOP');
    // Every thread (libuv's pool does the fs calls) must have stopped before the listing means anything.
    await waitUntil(async () => {
      const tasks = await readdir(`/proc/${pid}/task`);
      const states = await Promise.all(tasks.map(async (task) => (await readFile(`/proc/${pid}/task/${task}/stat`, 'utf8')).split(') ')[1]?.[0]));
      return states.every((s) => s === 'T' || s === 't');
    }, 'the child to stop');
    building = readdirSync(nodeDir).filter((n) => parseTempName(n)?.pid === pid);
    if (building.length === 0) {
      creator.process.kill('SIGCONT');
      await sleep(Math.random() * 5);
    }
  }

  const whileStopped = snapshot(nodeDir);
  assert.deepEqual(
    await new WorkspaceManager({ dataDir }).sweepLeftovers(),
    { stagingRemoved: 0, orphanDirsRemoved: 0 },
    'a live (stopped) creator keeps its work',
  );
  assert.deepEqual(snapshot(nodeDir), whileStopped);

  await kill(creator);
  const beforeSweep = snapshot(nodeDir);
  const fresh = new WorkspaceManager({ dataDir });
  assert.deepEqual(await fresh.sweepLeftovers(), { stagingRemoved: 0, orphanDirsRemoved: building.length });
  assert.deepEqual(snapshot(nodeDir), without(beforeSweep, building), 'exactly the creates in progress went');
  const ids = readdirSync(nodeDir).filter((n) => !n.startsWith('.'));
  for (const id of ids) assert.ok(existsSync(join(nodeDir, id, 'workspace.json')), `${id} has its metadata`);
  assert.equal((await fresh.list()).length, ids.length, 'every directory left is a workspace the index knows');
  assert.equal(await (await fresh.fs(bystander.id)).readFile('precious.txt', 'utf8'), 'keep');
  t.diagnostic(`caught ${building.length} create(s) in progress after ${attempts} stop(s), ${ids.length - 1} completed creates kept`);
});

test('workspace directories without metadata and abandoned creates are removed, corrupt metadata and live or unjudgeable temp directories are kept', async () => {
  const dataDir = join(tmp.path, 'orphans');
  const manager = new WorkspaceManager({ dataDir });
  const real = await manager.create(base);
  const nodeDir = join(dataDir, 'workspaces', 'local');
  const outside = join(tmp.path, 'orphans-outside');
  mkdirSync(outside);
  writeFileSync(join(outside, 'victim'), 'outside');
  // What the mkdir-first create of earlier versions left when it crashed, and a hand-made empty one.
  mkdirSync(join(nodeDir, 'ws-orphan', 'root', 'sub'), { recursive: true });
  writeFileSync(join(nodeDir, 'ws-orphan', 'root', 'sub', 'file'), 'x');
  symlinkSync(outside, join(nodeDir, 'ws-orphan', 'root', 'out'));
  mkdirSync(join(nodeDir, 'ws-empty'));
  mkdirSync(join(nodeDir, 'ws-corrupt', 'root'), { recursive: true });
  writeFileSync(join(nodeDir, 'ws-corrupt', 'workspace.json'), '{');
  const dead = deadWriterTempName();
  mkdirSync(join(nodeDir, dead, 'root'), { recursive: true });
  symlinkSync(outside, join(nodeDir, dead, 'root', 'out'));
  const live = tempName();
  const foreign = otherNamespaceTempName();
  mkdirSync(join(nodeDir, live));
  mkdirSync(join(nodeDir, foreign));
  await rejectsWithCode(manager.create({ ...base, id: 'ws-orphan' }), 'conflict', 'the orphan still holds its id');

  assert.deepEqual(await new WorkspaceManager({ dataDir }).sweepLeftovers(), { stagingRemoved: 0, orphanDirsRemoved: 3 });
  assert.deepEqual(readdirSync(nodeDir).sort(), [foreign, live, real.id, 'ws-corrupt'].sort());
  assert.deepEqual(readdirSync(outside), ['victim']);
  assert.equal((await manager.create({ ...base, id: 'ws-orphan' })).id, 'ws-orphan', 'the id is free again');
});

test('names and symlinks planted in a root never make the sweep remove anything outside it, or anything but a dead writer’s temp file', async (t) => {
  const dataDir = join(tmp.path, 'planted');
  const manager = new WorkspaceManager({ dataDir });
  const ws = await manager.create(base);
  const root = await manager.mountPath(ws.id);
  const wsDir = dirname(root);
  const outside = join(tmp.path, 'planted-outside');
  const deadOutside = deadWriterTempName();
  mkdirSync(join(outside, 'sub'), { recursive: true });
  writeFileSync(join(outside, 'victim'), 'outside');
  writeFileSync(join(outside, deadOutside), 'outside, named like a leftover');
  writeFileSync(join(outside, 'sub', deadOutside), 'outside, named like a leftover');
  const outsideBefore = snapshot(outside);

  const [linkToFile, linkToDir, deadDir, inDeadDir, deep, besideMetadata, stagedLink, stagedDir] = Array.from({ length: 8 }, deadWriterTempName);
  const live = tempName();
  const foreign = otherNamespaceTempName();
  symlinkSync(join(outside, 'victim'), join(root, linkToFile!));
  symlinkSync(outside, join(root, linkToDir!));
  symlinkSync(outside, join(root, 'through')); // a symlinked directory holding leftover-like names
  symlinkSync(join(outside, 'sub'), join(root, deadOutside));
  mkdirSync(join(root, deadDir!));
  writeFileSync(join(root, deadDir!, 'x'), 'a box directory named like a leftover');
  writeFileSync(join(root, deadDir!, inDeadDir!), '');
  mkdirSync(join(root, 'a', 'b', 'c'), { recursive: true });
  writeFileSync(join(root, 'a', 'b', 'c', deep!), 'half a write');
  for (const name of ['.sbx-tmp-notes', '.sbx-tmp-1-2-3-nothex', live, foreign]) writeFileSync(join(root, name), 'kept');
  writeFileSync(join(wsDir, besideMetadata!), '{"half":');
  symlinkSync(outside, join(wsDir, 'staging', stagedLink!));
  mkdirSync(join(wsDir, 'staging', stagedDir!, 'deep'), { recursive: true });
  symlinkSync(outside, join(wsDir, 'staging', stagedDir!, 'deep', 'out'));
  const before = snapshot(wsDir);

  assert.deepEqual(await new WorkspaceManager({ dataDir }).sweepLeftovers(), { stagingRemoved: 8, orphanDirsRemoved: 0 });
  const removed = [
    `root/${linkToFile}`,
    `root/${linkToDir}`,
    `root/${deadOutside}`,
    `root/${deadDir}/${inDeadDir}`,
    `root/a/b/c/${deep}`,
    besideMetadata!,
    `staging/${stagedLink}`,
    `staging/${stagedDir}`,
  ];
  assert.deepEqual(snapshot(wsDir), without(before, removed));
  assert.deepEqual(snapshot(outside), outsideBefore, 'nothing outside was touched');
  assert.equal(readFileSync(join(outside, deadOutside), 'utf8'), 'outside, named like a leftover');

  // A larger root, to see what the walk costs: 20,000 files in 200 directories, one leftover.
  const big = await manager.create({ ...base, name: 'big' });
  const bigRoot = await manager.mountPath(big.id);
  for (let d = 0; d < 200; d++) {
    mkdirSync(join(bigRoot, `d${d}`));
    for (let f = 0; f < 100; f++) writeFileSync(join(bigRoot, `d${d}`, `f${f}`), '');
  }
  writeFileSync(join(bigRoot, 'd199', deadWriterTempName()), '');
  const started = performance.now();
  assert.deepEqual(await new WorkspaceManager({ dataDir }).sweepLeftovers(), { stagingRemoved: 1, orphanDirsRemoved: 0 });
  t.diagnostic(`sweep of a root with 20,000 files in 200 directories: ${(performance.now() - started).toFixed(0)} ms`);
});

test('a directory of leftovers swapped for a symlink to an outside one in a loop never makes the sweep remove outside files', async (t) => {
  const dataDir = join(tmp.path, 'race');
  const manager = new WorkspaceManager({ dataDir });
  const ws = await manager.create(base);
  const root = await manager.mountPath(ws.id);
  const outside = join(tmp.path, 'race-outside');
  const name = deadWriterTempName();
  mkdirSync(outside);
  writeFileSync(join(outside, name), 'outside');
  // The attacker, as a box could through its mount: d is a real directory holding a leftover-like
  // file one moment, a symlink to `outside` (holding the same name) the next.
  const swapper = spawn('sh', ['-c', `cd '${root}' && while :; do mkdir -p r; : > r/${name}; mv r d; mv d r; ln -s '${outside}' d; rm d; done`], {
    stdio: 'ignore',
  });
  children.push(swapper);
  try {
    // Control: a path-based sweep (readdir, stat, unlink by path) deletes the outside file.
    let naiveOutsideDeletes = 0;
    const naiveUntil = Date.now() + 1000;
    while (Date.now() < naiveUntil) {
      try {
        const path = join(root, 'd', name);
        if (readdirSync(join(root, 'd')).includes(name)) {
          const { unlinkSync } = await import('node:fs');
          unlinkSync(path);
          if (!existsSync(join(outside, name))) {
            naiveOutsideDeletes += 1;
            writeFileSync(join(outside, name), 'outside');
          }
        }
      } catch {
        // mid-swap
      }
    }
    const outsideInode = lstatSync(join(outside, name)).ino;
    let sweeps = 0;
    let removed = 0;
    const until = Date.now() + 2000;
    while (Date.now() < until) {
      sweeps += 1;
      removed += (await new WorkspaceManager({ dataDir }).sweepLeftovers()).stagingRemoved;
    }
    t.diagnostic(`naive sweep: ${naiveOutsideDeletes} outside deletions in 1 s; contained: ${sweeps} sweeps removed ${removed} inside leftovers`);
    assert.ok(naiveOutsideDeletes > 0, 'the loop never exposed the outside file to a naive sweep: the test would prove nothing');
    assert.ok(removed > 0, 'the sweep never met the inside leftover: the test would prove nothing');
    assert.equal(lstatSync(join(outside, name)).ino, outsideInode, 'the outside file is the same, never removed');
    assert.deepEqual(readdirSync(outside), [name]);
  } finally {
    swapper.kill('SIGKILL');
  }
});

test('a standalone manager on a fresh data directory sweeps nothing and fails on nothing', async () => {
  const manager = new WorkspaceManager({ dataDir: join(tmp.path, 'fresh') });
  assert.deepEqual(await manager.sweepLeftovers(), { stagingRemoved: 0, orphanDirsRemoved: 0 });
  const ws = await manager.create(base);
  await (await manager.fs(ws.id)).writeFile('a.txt', 'a');
  assert.deepEqual(await manager.sweepLeftovers(), { stagingRemoved: 0, orphanDirsRemoved: 0 });
  assert.equal(await (await manager.fs(ws.id)).readFile('a.txt', 'utf8'), 'a');
});
