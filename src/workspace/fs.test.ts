import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { isSbxError } from '../errors.js';
import type { WorkspaceFS } from './fs.js';
import type { WorkspaceManager } from './manager.js';
import { makeManager, makeTempDir, openFdCount, rejectsWithCode } from '../testing/workspace/fixtures.js';
import { waitFor } from '../testing/wait.js';

let tmp: Awaited<ReturnType<typeof makeTempDir>>;
let manager: WorkspaceManager;

before(async () => {
  tmp = await makeTempDir('fs');
  manager = makeManager(tmp.path);
});
after(() => tmp.remove());

async function newWorkspace(options: { quotaBytes?: number } = {}): Promise<{ fs: WorkspaceFS; root: string; id: string }> {
  const ws = await manager.create({ name: 'test', owner: 'alice', node: 'local', ...options });
  return { fs: await manager.fs(ws.id), root: await manager.mountPath(ws.id), id: ws.id };
}

async function collect(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/** Every regular file below `dir` on the host, as relative path -> content. */
function hostTree(dir: string, prefix = ''): Map<string, string> {
  const out = new Map<string, string>();
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const st = lstatSync(path);
    if (st.isDirectory()) for (const [k, v] of hostTree(path, `${prefix}${name}/`)) out.set(k, v);
    else if (st.isFile()) out.set(`${prefix}${name}`, readFileSync(path, 'utf8'));
  }
  return out;
}

function buildTar(entries: Array<{ header: tar.Header | (Partial<tar.Header> & { name: string }); body?: string }>): Promise<Buffer> {
  const pack = tar.pack();
  for (const { header, body } of entries) pack.entry(header, body ?? '');
  pack.finalize();
  return collect(Readable.from(pack));
}

async function readTar(archive: Buffer): Promise<Array<{ name: string; type: string; linkname: string | null; body: string }>> {
  const extract = tar.extract();
  const out: Array<{ name: string; type: string; linkname: string | null; body: string }> = [];
  const done = (async () => {
    for await (const entry of extract) {
      const body = await collect(entry as unknown as NodeJS.ReadableStream);
      out.push({ name: entry.header.name, type: entry.header.type, linkname: entry.header.linkname ?? null, body: body.toString('utf8') });
    }
  })();
  Readable.from([archive]).pipe(extract as unknown as NodeJS.WritableStream);
  await done;
  return out;
}

describe('file operations', () => {
  test('write then read text and bytes; overwrite replaces', async () => {
    const { fs } = await newWorkspace();
    await fs.writeFile('a.txt', 'hello');
    assert.equal(await fs.readFile('a.txt', 'utf8'), 'hello');
    const bytes = randomBytes(1000);
    await fs.writeFile('bin/data', bytes);
    assert.deepEqual(await fs.readFile('bin/data'), bytes);
    await fs.writeFile('a.txt', 'bye');
    assert.equal(await fs.readFile('a.txt', 'utf8'), 'bye');
  });

  test('writeFile creates parents, applies mode, keeps the mode of a replaced file', async () => {
    const { fs, root } = await newWorkspace();
    await fs.writeFile('x/y/run.sh', 'echo', { mode: 0o755 });
    assert.equal(statSync(join(root, 'x/y/run.sh')).mode & 0o777, 0o755);
    await fs.writeFile('x/y/run.sh', 'echo 2');
    assert.equal(statSync(join(root, 'x/y/run.sh')).mode & 0o777, 0o755);
    await fs.writeFile('plain', 'p');
    assert.equal(statSync(join(root, 'plain')).mode & 0o777, 0o644);
    await fs.writeFile('suid', 'p', { mode: 0o4755 });
    assert.equal(statSync(join(root, 'suid')).mode & 0o7777, 0o755, 'setuid bit is dropped');
    await rejectsWithCode(fs.writeFile('bad', 'p', { mode: 0o10000 }), 'invalid_argument');
  });

  test('tricky-but-inside paths land inside the root where expected', async () => {
    const { fs, root } = await newWorkspace();
    const cases: Array<[string, string]> = [
      ['a/../b.txt', 'b.txt'],
      ['./c//d.txt', 'c/d.txt'],
      ['...', '...'],
      ['..e', '..e'],
      ['%2e%2e/f', '%2e%2e/f'],
      ['g/h/../../i', 'i'],
    ];
    for (const [input, expected] of cases) {
      await fs.writeFile(input, input);
      assert.equal(readFileSync(join(root, expected), 'utf8'), input, input);
      assert.equal(await fs.readFile(input, 'utf8'), input);
    }
  });

  test('stat, exists, readDir (flat and recursive)', async () => {
    const { fs } = await newWorkspace();
    await fs.writeFile('d/one.txt', '1');
    await fs.writeFile('d/sub/two.txt', '22');
    await fs.mkdirAll('d/empty');
    const st = await fs.stat('d/sub/two.txt');
    assert.equal(st.isFile, true);
    assert.equal(st.isDir, false);
    assert.equal(st.size, 2);
    assert.equal(st.name, 'two.txt');
    assert.equal((await fs.stat('')).isDir, true);
    assert.equal(await fs.exists('d/one.txt'), true);
    assert.equal(await fs.exists('d/nope'), false);
    assert.equal(await fs.exists('d/one.txt/below'), false);
    assert.deepEqual(
      (await fs.readDir('d')).map((e) => [e.name, e.isDir]),
      [
        ['empty', true],
        ['one.txt', false],
        ['sub', true],
      ],
    );
    assert.deepEqual(
      (await fs.readDir('d', { recursive: true })).map((e) => e.name),
      ['empty', 'one.txt', 'sub', 'sub/two.txt'],
    );
    await rejectsWithCode(fs.readDir('missing'), 'not_found');
    await rejectsWithCode(fs.stat('missing'), 'not_found');
    await rejectsWithCode(fs.readFile('d'), 'invalid_argument');
  });

  test('mkdirAll is idempotent and refuses a file in the way', async () => {
    const { fs, root } = await newWorkspace();
    await fs.mkdirAll('a/b/c', 0o750);
    await fs.mkdirAll('a/b/c');
    assert.equal(statSync(join(root, 'a/b/c')).mode & 0o777, 0o750);
    await fs.writeFile('f', 'x');
    await rejectsWithCode(fs.mkdirAll('f/g'), 'conflict');
    await rejectsWithCode(fs.mkdirAll('f'), 'conflict');
  });

  test('remove, removeAll, rename, copy', async () => {
    const { fs, root } = await newWorkspace();
    await fs.writeFile('t/a.txt', 'a');
    await fs.writeFile('t/sub/b.txt', 'b');
    await rejectsWithCode(fs.remove('t'), 'conflict');
    await fs.remove('t/a.txt');
    assert.equal(existsSync(join(root, 't/a.txt')), false);
    await rejectsWithCode(fs.remove('t/a.txt'), 'not_found');
    await fs.copy('t', 'copy');
    assert.equal(await fs.readFile('copy/sub/b.txt', 'utf8'), 'b');
    await fs.copy('copy/sub/b.txt', 'single.txt');
    assert.equal(await fs.readFile('single.txt', 'utf8'), 'b');
    await fs.copy('t', 't/inside-itself');
    assert.equal(await fs.readFile('t/inside-itself/sub/b.txt', 'utf8'), 'b');
    await fs.rename('single.txt', 'moved/there.txt');
    assert.equal(await fs.readFile('moved/there.txt', 'utf8'), 'b');
    await rejectsWithCode(fs.rename('single.txt', 'x'), 'not_found');
    await rejectsWithCode(fs.rename('t', 't/sub/t'), 'invalid_argument');
    await fs.removeAll('t');
    assert.equal(existsSync(join(root, 't')), false);
    await fs.removeAll('t');
    await rejectsWithCode(fs.removeAll(''), 'invalid_argument');
    await rejectsWithCode(fs.remove('.'), 'invalid_argument');
  });

  test('base64 round trip; bad base64 refused', async () => {
    const { fs } = await newWorkspace();
    const bytes = randomBytes(333);
    await fs.writeFileBase64('img.bin', bytes.toString('base64'));
    assert.deepEqual(await fs.readFile('img.bin'), bytes);
    assert.equal(await fs.readFileBase64('img.bin'), bytes.toString('base64'));
    await rejectsWithCode(fs.writeFileBase64('x', 'not base64!'), 'invalid_argument');
  });

  test('createReadStream streams the file', async () => {
    const { fs } = await newWorkspace();
    const bytes = randomBytes(300_000);
    await fs.writeFile('s.bin', bytes);
    assert.deepEqual(await collect(await fs.createReadStream('s.bin')), bytes);
    await rejectsWithCode(fs.createReadStream('none'), 'not_found');
  });

  test('writeFile from a Readable', async () => {
    const { fs } = await newWorkspace();
    const parts = [Buffer.from('ab'), 'cd', Buffer.from('ef')];
    await fs.writeFile('r.txt', Readable.from(parts));
    assert.equal(await fs.readFile('r.txt', 'utf8'), 'abcdef');
  });

  test('devices and FIFOs planted in the workspace are never opened', async (t) => {
    if (process.getuid?.() !== 0) return t.skip('mknod needs root');
    const { fs, root } = await newWorkspace();
    execFileSync('mkfifo', [join(root, 'fifo')]);
    execFileSync('mknod', [join(root, 'zero'), 'c', '1', '5']);
    await rejectsWithCode(fs.readFile('fifo'), 'invalid_argument', 'fifo (would block forever if opened)');
    await rejectsWithCode(fs.readFile('zero'), 'invalid_argument', '/dev/zero twin (would never end)');
    await rejectsWithCode(fs.createReadStream('zero'), 'invalid_argument');
    await rejectsWithCode(fs.copy('zero', 'z2'), 'invalid_argument');
    const names = (await readTar(await collect(await fs.exportTar('')))).map((e) => e.name);
    assert.deepEqual(names, []);
    assert.equal((await fs.stat('fifo')).isFile, false);
    await fs.removeAll('zero');
    await fs.remove('fifo');
  });

  test('a tree nested deeper than the walk limit is refused by walks (limit_exceeded) and still removable', async () => {
    const { fs, root } = await newWorkspace();
    mkdirSync(join(root, ...Array.from({ length: 520 }, () => 'n')), { recursive: true });
    await rejectsWithCode(fs.readDir('', { recursive: true }), 'limit_exceeded');
    await rejectsWithCode(fs.usage(), 'limit_exceeded');
    await fs.removeAll('n');
    assert.deepEqual(readdirSync(root), []);
  });

  test('50 parallel writes are all present and correct', async (t) => {
    const { fs } = await newWorkspace();
    const contents = Array.from({ length: 50 }, () => randomBytes(64 * 1024));
    const started = performance.now();
    await Promise.all(contents.map((data, i) => fs.writeFile(`par/f${i}.bin`, data)));
    const ms = performance.now() - started;
    for (const [i, data] of contents.entries()) assert.deepEqual(await fs.readFile(`par/f${i}.bin`), data);
    assert.equal((await fs.readDir('par')).length, 50, 'no temp files left');
    t.diagnostic(`50 parallel writes of 64 KiB: ${ms.toFixed(1)} ms`);
  });

  test('50 parallel writes of one path: the result is exactly one of them, no temp files left', async () => {
    const { fs } = await newWorkspace();
    const contents = Array.from({ length: 50 }, (_, i) => `${i}:`.padEnd(10_000, String.fromCharCode(65 + (i % 26))));
    await Promise.all(contents.map((data) => fs.writeFile('same.txt', data)));
    assert.ok(contents.includes(await fs.readFile('same.txt', 'utf8')));
    assert.deepEqual(
      (await fs.readDir('')).map((e) => e.name),
      ['same.txt'],
    );
  });

  test('when running as root, created files and directories get fileOwner', async (t) => {
    if (process.getuid?.() !== 0) return t.skip('needs root');
    const { fs, root } = await newWorkspace();
    await fs.writeFile('o/p/file.txt', 'x');
    await fs.mkdirAll('q');
    await fs.importTar('imp', await buildTar([{ header: { name: 'in/tar.txt', size: 1 }, body: 'y' }]));
    for (const path of ['o', 'o/p', 'o/p/file.txt', 'q', 'imp', 'imp/in', 'imp/in/tar.txt']) {
      const st = statSync(join(root, path));
      assert.deepEqual([st.uid, st.gid], [1000, 1000], path);
    }
  });

  test('no file descriptors leak, including on refusals and an abandoned export', async () => {
    const { fs, root } = await newWorkspace();
    symlinkSync('/etc', join(root, 'etc'));
    await fs.writeFile('big.bin', randomBytes(2_000_000));
    const before = await openFdCount();
    for (let i = 0; i < 20; i++) {
      await fs.writeFile(`l/${i}`, 'x');
      await fs.readFile(`l/${i}`);
      await fs.readDir('', { recursive: true });
      await fs.readFile('etc/passwd').catch(() => undefined);
      await fs.readFile('nope').catch(() => undefined);
      await fs.writeFile('etc/x', 'x').catch(() => undefined);
      await fs.copy('l', `c${i}`);
      await fs.removeAll(`c${i}`);
    }
    const stream = await fs.exportTar('');
    for await (const _ of stream) break;
    // The broken-off stream closes its descriptors as it unwinds: waited for, a leak stays.
    await waitFor(async () => (await openFdCount()) === before, { what: `the open descriptors back to ${before}` });
  });
});

describe('planted symlinks never lead outside', () => {
  const SECRET = `SECRET-${randomBytes(6).toString('hex')}`;
  let fs: WorkspaceFS;
  let root: string;
  let outsideDir: string;
  let sibling: { fs: WorkspaceFS; root: string };
  let passwd: string;

  before(async () => {
    passwd = readFileSync('/etc/passwd', 'utf8');
    outsideDir = join(tmp.path, 'outside');
    mkdirSync(outsideDir);
    writeFileSync(join(outsideDir, 'secret.txt'), SECRET);
    ({ fs, root } = await newWorkspace());
    sibling = await newWorkspace();
    await sibling.fs.writeFile('secret.txt', SECRET);
    // What a box could do through its mount (symlink targets are resolved on the host).
    symlinkSync('/etc/passwd', join(root, 'pw'));
    symlinkSync(outsideDir, join(root, 'outdir'));
    symlinkSync(join(outsideDir, 'secret.txt'), join(root, 'outfile'));
    symlinkSync(sibling.root, join(root, 'sib'));
    symlinkSync(`../../${sibling.root.split('/').at(-2)}/root`, join(root, 'rel'));
    symlinkSync('/etc', join(root, 'etc'));
    mkdirSync(join(root, 'real'));
    writeFileSync(join(root, 'real', 'file'), 'inside');
    symlinkSync('real', join(root, 'inner'));
    symlinkSync('/nonexistent/target', join(root, 'dangling'));
  });

  after(() => {
    assert.equal(readFileSync('/etc/passwd', 'utf8'), passwd, '/etc/passwd unchanged');
    assert.deepEqual(readdirSync(outsideDir), ['secret.txt'], 'nothing created in the outside dir');
    assert.equal(readFileSync(join(outsideDir, 'secret.txt'), 'utf8'), SECRET, 'outside secret unchanged');
    assert.deepEqual([...hostTree(sibling.root).keys()], ['secret.txt'], 'sibling untouched');
    for (const [path, content] of hostTree(root)) assert.ok(!content.includes(SECRET) && !content.includes('root:x:0:0'), `${path} holds outside content`);
  });

  const throughLinks = ['pw', 'outfile', 'outdir/secret.txt', 'sib/secret.txt', 'rel/secret.txt', 'etc/passwd', 'inner/file'];

  test('readFile, readFileBase64 and createReadStream refuse symlinks, final or intermediate', async () => {
    for (const path of throughLinks) {
      await rejectsWithCode(fs.readFile(path), 'invalid_argument', path);
      await rejectsWithCode(fs.readFileBase64(path), 'invalid_argument', path);
      await rejectsWithCode(fs.createReadStream(path), 'invalid_argument', path);
    }
    await rejectsWithCode(fs.readFile('dangling'), 'invalid_argument');
  });

  test('stat describes a final symlink itself and refuses to stat through one', async () => {
    const st = await fs.stat('pw');
    assert.equal(st.isSymlink, true);
    assert.equal(st.isFile, false);
    assert.equal(st.size, '/etc/passwd'.length);
    assert.equal((await fs.stat('dangling')).isSymlink, true);
    assert.equal(await fs.exists('dangling'), true);
    for (const path of ['outdir/secret.txt', 'sib/secret.txt', 'etc/passwd', 'inner/file']) {
      await rejectsWithCode(fs.stat(path), 'invalid_argument', path);
      await rejectsWithCode(fs.exists(path), 'invalid_argument', path);
    }
  });

  test('readDir lists symlinks as symlinks and never descends through them', async () => {
    const flat = await fs.readDir('');
    assert.deepEqual(
      flat
        .filter((e) => e.isSymlink)
        .map((e) => e.name)
        .sort(),
      ['dangling', 'etc', 'inner', 'outdir', 'outfile', 'pw', 'rel', 'sib'],
    );
    const deep = await fs.readDir('', { recursive: true });
    assert.deepEqual(
      deep.map((e) => e.name).filter((n) => n.includes('/')),
      ['real/file'],
    );
    for (const path of ['outdir', 'sib', 'etc', 'inner', 'rel']) await rejectsWithCode(fs.readDir(path), 'invalid_argument', path);
  });

  test('writeFile and mkdirAll never write through a symlink; replacing a final symlink replaces the link', async () => {
    for (const path of ['outdir/new.txt', 'sib/new.txt', 'etc/evil', 'inner/new.txt', 'rel/new.txt']) {
      await rejectsWithCode(fs.writeFile(path, 'pwned'), 'invalid_argument', path);
      await rejectsWithCode(fs.mkdirAll(`${path}-dir`), 'invalid_argument', path);
      await rejectsWithCode(fs.writeFileBase64(path, 'cHduZWQ='), 'invalid_argument', path);
    }
    symlinkSync(join(outsideDir, 'secret.txt'), join(root, 'victim-link'));
    await fs.writeFile('victim-link', 'replaced');
    assert.equal(lstatSync(join(root, 'victim-link')).isFile(), true);
    assert.equal(await fs.readFile('victim-link', 'utf8'), 'replaced');
  });

  test('remove and removeAll delete the link, never its target', async () => {
    symlinkSync(outsideDir, join(root, 'doomed-dir-link'));
    symlinkSync(sibling.root, join(root, 'doomed-sib-link'));
    symlinkSync(join(outsideDir, 'secret.txt'), join(root, 'doomed-file-link'));
    await fs.remove('doomed-file-link');
    await fs.removeAll('doomed-dir-link');
    await fs.removeAll('doomed-sib-link');
    for (const name of ['doomed-dir-link', 'doomed-sib-link', 'doomed-file-link']) assert.equal(existsSync(join(root, name)), false);
    for (const path of ['outdir/secret.txt', 'sib/secret.txt', 'etc/passwd']) {
      await rejectsWithCode(fs.remove(path), 'invalid_argument', path);
      await rejectsWithCode(fs.removeAll(path), 'invalid_argument', path);
    }
    mkdirSync(join(root, 'tree/deeper'), { recursive: true });
    symlinkSync(outsideDir, join(root, 'tree/deeper/out'));
    symlinkSync(sibling.root, join(root, 'tree/sib'));
    await fs.removeAll('tree');
    assert.equal(existsSync(join(root, 'tree')), false);
  });

  test('rename cannot move anything in from or out to a symlinked path; a final symlink moves as itself', async () => {
    await rejectsWithCode(fs.rename('outdir/secret.txt', 'stolen.txt'), 'invalid_argument');
    await rejectsWithCode(fs.rename('sib/secret.txt', 'stolen.txt'), 'invalid_argument');
    await rejectsWithCode(fs.rename('real/file', 'outdir/file'), 'invalid_argument');
    await rejectsWithCode(fs.rename('real/file', 'sib/file'), 'invalid_argument');
    symlinkSync(join(outsideDir, 'secret.txt'), join(root, 'mover'));
    await fs.rename('mover', 'moved-link');
    assert.equal(lstatSync(join(root, 'moved-link')).isSymbolicLink(), true);
    assert.equal(existsSync(join(root, 'stolen.txt')), false);
  });

  test('copy copies links as links (content never read) and never reads or writes through one', async () => {
    await fs.copy('outfile', 'copied-link');
    assert.equal(lstatSync(join(root, 'copied-link')).isSymbolicLink(), true);
    await fs.copy('outdir', 'copied-dir-link');
    assert.equal(lstatSync(join(root, 'copied-dir-link')).isSymbolicLink(), true);
    await rejectsWithCode(fs.copy('outdir/secret.txt', 'stolen.txt'), 'invalid_argument');
    await rejectsWithCode(fs.copy('sib/secret.txt', 'stolen.txt'), 'invalid_argument');
    await rejectsWithCode(fs.copy('real', 'outdir/copied'), 'invalid_argument');
    await rejectsWithCode(fs.copy('real/file', 'sib/copied'), 'invalid_argument');
    mkdirSync(join(root, 'linky'));
    symlinkSync(outsideDir, join(root, 'linky', 'out'));
    writeFileSync(join(root, 'linky', 'ok.txt'), 'ok');
    await fs.copy('linky', 'linky-copy');
    assert.equal(lstatSync(join(root, 'linky-copy/out')).isSymbolicLink(), true);
    assert.equal(await fs.readFile('linky-copy/ok.txt', 'utf8'), 'ok');
  });

  test('exportTar never archives outside content; escaping links are left out, inside links kept', async () => {
    const entries = await readTar(await collect(await fs.exportTar('')));
    for (const entry of entries) {
      assert.ok(!entry.body.includes(SECRET), `${entry.name} carries the secret`);
      assert.ok(!entry.body.includes('root:x:0:0'), `${entry.name} carries /etc/passwd`);
    }
    const symlinks = entries.filter((e) => e.type === 'symlink').map((e) => `${e.name}->${e.linkname}`);
    assert.ok(symlinks.includes('inner->real'));
    for (const name of ['pw', 'outdir', 'outfile', 'sib', 'rel', 'etc', 'dangling']) assert.ok(!entries.some((e) => e.name === name), `${name} archived`);
    for (const path of ['outdir', 'sib', 'etc', 'inner']) await rejectsWithCode(fs.exportTar(path), 'invalid_argument', path);
  });

  test('importTar and copyFromHost refuse a symlinked destination', async () => {
    const archive = await buildTar([{ header: { name: 'x.txt', size: 1 }, body: 'x' }]);
    await rejectsWithCode(fs.importTar('outdir', Readable.from([archive])), 'invalid_argument');
    await rejectsWithCode(fs.importTar('sib/sub', Readable.from([archive])), 'invalid_argument');
    const hostFile = join(tmp.path, 'host-file.txt');
    writeFileSync(hostFile, 'host');
    await rejectsWithCode(fs.copyFromHost(hostFile, 'outdir/host-file.txt'), 'invalid_argument');
    await rejectsWithCode(fs.copyFromHost(hostFile, 'etc/host-file.txt'), 'invalid_argument');
  });

  test('usage does not count what symlinks point at', async () => {
    writeFileSync(join(outsideDir, '..', 'huge-outside.bin'), Buffer.alloc(5_000_000));
    symlinkSync(join(outsideDir, '..', 'huge-outside.bin'), join(root, 'huge'));
    const { bytes } = await fs.usage();
    assert.ok(bytes < 100_000, `usage ${bytes}`);
  });
});

describe('every call applies the lexical policy', () => {
  const escaping = ['../x', 'a/../../x', '/etc/passwd', '\0', 'a\0b', './../', '..', '..\\x', '//x'];
  test('each method refuses each escaping path with invalid_argument (field path)', async () => {
    const { fs } = await newWorkspace();
    await fs.writeFile('ok.txt', 'ok');
    const archive = await buildTar([]);
    const hostFile = join(tmp.path, 'policy-host.txt');
    writeFileSync(hostFile, 'h');
    const calls: Record<string, (p: string) => Promise<unknown>> = {
      readFile: (p) => fs.readFile(p),
      readFileBase64: (p) => fs.readFileBase64(p),
      createReadStream: (p) => fs.createReadStream(p),
      writeFile: (p) => fs.writeFile(p, 'x'),
      writeFileBase64: (p) => fs.writeFileBase64(p, 'eA=='),
      readDir: (p) => fs.readDir(p),
      readDirRecursive: (p) => fs.readDir(p, { recursive: true }),
      stat: (p) => fs.stat(p),
      exists: (p) => fs.exists(p),
      mkdirAll: (p) => fs.mkdirAll(p),
      remove: (p) => fs.remove(p),
      removeAll: (p) => fs.removeAll(p),
      renameFrom: (p) => fs.rename(p, 'dst'),
      renameTo: (p) => fs.rename('ok.txt', p),
      copyFrom: (p) => fs.copy(p, 'dst'),
      copyTo: (p) => fs.copy('ok.txt', p),
      copyFromHost: (p) => fs.copyFromHost(hostFile, p),
      exportTar: (p) => fs.exportTar(p),
      importTar: (p) => fs.importTar(p, Readable.from([archive])),
    };
    let refusals = 0;
    for (const [method, call] of Object.entries(calls)) {
      for (const path of escaping) {
        const err = await rejectsWithCode(call(path), 'invalid_argument', `${method}(${JSON.stringify(path)})`);
        assert.equal((err as { details?: { field?: string } }).details?.field, 'path', `${method}(${JSON.stringify(path)})`);
        refusals += 1;
      }
    }
    assert.equal(refusals, Object.keys(calls).length * escaping.length);
    assert.equal(await fs.readFile('ok.txt', 'utf8'), 'ok');
  });
});

describe('quota', () => {
  test('a write that would pass the quota fails with quota_exceeded and leaves nothing half-written', async () => {
    const { fs, root } = await newWorkspace({ quotaBytes: 1000 });
    await fs.writeFile('a.bin', Buffer.alloc(600));
    await rejectsWithCode(fs.writeFile('b.bin', Buffer.alloc(600)), 'quota_exceeded');
    assert.deepEqual(readdirSync(root), ['a.bin'], 'no temp file, no b.bin');
    await fs.writeFile('a.bin', Buffer.alloc(900, 1));
    assert.equal((await fs.readFile('a.bin')).length, 900, 'replacing credits the old size');
    const stream = Readable.from(
      (function* () {
        for (let i = 0; i < 11; i++) yield Buffer.alloc(100, 2);
      })(),
    );
    await rejectsWithCode(fs.writeFile('a.bin', stream), 'quota_exceeded');
    assert.deepEqual(await fs.readFile('a.bin'), Buffer.alloc(900, 1), 'old content intact after a failed streamed write');
    assert.deepEqual(readdirSync(root), ['a.bin']);
    assert.deepEqual(await fs.usage(), { bytes: 900, files: 1, quotaBytes: 1000 });
  });

  test('copy, importTar and copyFromHost over the quota leave nothing behind', async () => {
    const { fs, root } = await newWorkspace({ quotaBytes: 1000 });
    await fs.writeFile('dir/a.bin', Buffer.alloc(400));
    await fs.writeFile('dir/b.bin', Buffer.alloc(400));
    await rejectsWithCode(fs.copy('dir', 'dir2'), 'quota_exceeded');
    await rejectsWithCode(fs.copy('dir/a.bin', 'c.bin'), 'quota_exceeded');
    const archive = await buildTar([
      { header: { name: 'small.txt', size: 10 }, body: 'x'.repeat(10) },
      { header: { name: 'large.bin', size: 500 }, body: 'y'.repeat(500) },
    ]);
    await rejectsWithCode(fs.importTar('imp', Readable.from([archive])), 'quota_exceeded');
    const hostDir = join(tmp.path, 'quota-host');
    mkdirSync(hostDir);
    writeFileSync(join(hostDir, 'h1'), Buffer.alloc(150));
    writeFileSync(join(hostDir, 'h2'), Buffer.alloc(150));
    await rejectsWithCode(fs.copyFromHost(hostDir, 'fromhost'), 'quota_exceeded');
    assert.deepEqual([...hostTree(root).keys()].sort(), ['dir/a.bin', 'dir/b.bin']);
  });

  test('parallel writes cannot jointly overshoot the quota', async () => {
    const { fs } = await newWorkspace({ quotaBytes: 1000 });
    const results = await Promise.allSettled(Array.from({ length: 10 }, (_, i) => fs.writeFile(`p${i}`, Buffer.alloc(200))));
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 5);
    for (const r of results) if (r.status === 'rejected') assert.ok(isSbxError(r.reason, 'quota_exceeded'));
    assert.equal((await fs.usage()).bytes, 1000);
  });

  test('bytes written behind the API (by a box) are counted by usage and by the next check', async () => {
    const { fs, root } = await newWorkspace({ quotaBytes: 1000 });
    writeFileSync(join(root, 'from-box.bin'), Buffer.alloc(2000));
    assert.equal((await fs.usage()).bytes, 2000);
    await rejectsWithCode(fs.writeFile('more', 'x'), 'quota_exceeded');
    await fs.remove('from-box.bin');
    await fs.writeFile('more', 'x');
  });

  test('hard-linked files count once', async () => {
    const { fs, root } = await newWorkspace();
    writeFileSync(join(root, 'a'), Buffer.alloc(1234));
    execFileSync('ln', [join(root, 'a'), join(root, 'b')]);
    assert.deepEqual(await fs.usage(), { bytes: 1234, files: 2 });
  });
});

describe('tar', () => {
  test('export then import round-trips files, modes, empty dirs and inside symlinks', async () => {
    const source = await newWorkspace();
    const data = randomBytes(200_000);
    await source.fs.writeFile('proj/bin/run.sh', '#!/bin/sh\n', { mode: 0o755 });
    await source.fs.writeFile('proj/data.bin', data);
    await source.fs.writeFile('proj/deep/a/b/c.txt', 'c');
    await source.fs.mkdirAll('proj/empty');
    symlinkSync('deep/a', join(source.root, 'proj/shortcut'));
    symlinkSync('/etc/passwd', join(source.root, 'proj/escaping'));
    const archive = await collect(await source.fs.exportTar('proj'));

    const target = await newWorkspace();
    const result = await target.fs.importTar('restored', Readable.from([archive]));
    const describe = async (fs: WorkspaceFS, path: string) =>
      (await fs.readDir(path, { recursive: true })).map((e) => ({
        name: e.name,
        isDir: e.isDir,
        isSymlink: e.isSymlink,
        mode: e.mode,
        size: e.isDir ? 0 : e.size,
      }));
    const expected = (await describe(source.fs, 'proj')).filter((e) => e.name !== 'escaping');
    assert.deepEqual(await describe(target.fs, 'restored'), expected);
    assert.deepEqual(await target.fs.readFile('restored/data.bin'), data);
    assert.equal(readFileSync(join(target.root, 'restored/shortcut/b/c.txt'), 'utf8'), 'c');
    assert.equal(result.entries, expected.length);
    assert.equal(result.bytes, data.length + '#!/bin/sh\n'.length + 1);
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    assert.equal(sha(await target.fs.readFile('restored/data.bin')), sha(data));
  });

  test('importing over existing content merges directories and replaces files', async () => {
    const { fs } = await newWorkspace();
    await fs.writeFile('d/keep.txt', 'keep');
    await fs.writeFile('d/replace.txt', 'old');
    await fs.importTar(
      'd',
      await buildTar([
        { header: { name: 'replace.txt', size: 3 }, body: 'new' },
        { header: { name: 'added.txt', size: 1 }, body: 'a' },
      ]),
    );
    assert.deepEqual(
      (await fs.readDir('d')).map((e) => e.name),
      ['added.txt', 'keep.txt', 'replace.txt'],
    );
    assert.equal(await fs.readFile('d/replace.txt', 'utf8'), 'new');
    await rejectsWithCode(fs.importTar('', await buildTar([{ header: { name: 'd', size: 1 }, body: 'x' }])), 'conflict');
    assert.equal(await fs.readFile('d/keep.txt', 'utf8'), 'keep');
  });

  describe('malicious archives are refused and write nothing anywhere', () => {
    const good = { header: { name: 'good.txt', size: 4 }, body: 'good' };
    const cases: Array<[string, Array<{ header: Partial<tar.Header> & { name: string }; body?: string }>]> = [
      ['parent path', [good, { header: { name: '../evil', size: 4 }, body: 'evil' }]],
      ['climbing path', [good, { header: { name: 'a/../../evil', size: 4 }, body: 'evil' }]],
      ['absolute path', [good, { header: { name: '/tmp/sbx-abs-evil', size: 4 }, body: 'evil' }]],
      [
        'symlink to /etc then a file through it',
        [good, { header: { name: 'link', type: 'symlink', linkname: '/etc' } }, { header: { name: 'link/passwd', size: 4 }, body: 'evil' }],
      ],
      ['symlink escaping with ..', [good, { header: { name: 'sub/link', type: 'symlink', linkname: '../../outside' } }]],
      [
        'inside symlink then a file through it',
        [
          good,
          { header: { name: 'real', type: 'directory' } },
          { header: { name: 'ok', type: 'symlink', linkname: 'real' } },
          { header: { name: 'ok/x', size: 4 }, body: 'evil' },
        ],
      ],
      ['hard link to /etc/passwd', [good, { header: { name: 'hl', type: 'link', linkname: '/etc/passwd' } }]],
      ['hard link climbing out', [good, { header: { name: 'hl', type: 'link', linkname: '../../etc/passwd' } }]],
      ['hard link to a file not in the archive', [good, { header: { name: 'hl', type: 'link', linkname: 'not-there' } }]],
      ['character device', [good, { header: { name: 'null', type: 'character-device', devmajor: 1, devminor: 3 } }]],
      ['FIFO', [good, { header: { name: 'pipe', type: 'fifo' } }]],
    ];
    for (const [label, entries] of cases) {
      test(label, async () => {
        const { fs, root } = await newWorkspace();
        const passwd = readFileSync('/etc/passwd', 'utf8');
        const archive = await buildTar(entries);
        await rejectsWithCode(fs.importTar('dest', Readable.from([archive])), 'invalid_argument', label);
        assert.deepEqual(readdirSync(root), [], 'nothing imported, not even the good entry');
        assert.deepEqual(readdirSync(join(root, '..', 'staging')), [], 'staging cleaned up');
        assert.equal(existsSync(join(root, '..', 'evil')), false);
        assert.equal(existsSync(join(root, 'evil')), false);
        assert.equal(existsSync('/tmp/sbx-abs-evil'), false);
        assert.equal(readFileSync('/etc/passwd', 'utf8'), passwd);
      });
    }
  });

  test('a hard link to an earlier file of the archive is imported', async () => {
    const { fs, root } = await newWorkspace();
    await fs.importTar(
      '',
      await buildTar([{ header: { name: 'a.txt', size: 1 }, body: 'a' }, { header: { name: 'b/link.txt', type: 'link', linkname: 'a.txt' } }]),
    );
    assert.equal(readFileSync(join(root, 'b/link.txt'), 'utf8'), 'a');
    assert.equal(statSync(join(root, 'a.txt')).ino, statSync(join(root, 'b/link.txt')).ino);
  });

  test('a truncated or garbage archive is invalid_argument and writes nothing', async () => {
    const { fs, root } = await newWorkspace();
    const archive = await buildTar([{ header: { name: 'a.bin', size: 10_000 }, body: 'z'.repeat(10_000) }]);
    await rejectsWithCode(fs.importTar('', Readable.from([archive.subarray(0, 3000)])), 'invalid_argument');
    await rejectsWithCode(fs.importTar('', Readable.from([Buffer.from('this is not a tar archive'.repeat(40))])), 'invalid_argument');
    assert.deepEqual(readdirSync(root), []);
  });
});

describe('copyFromHost', () => {
  test('copies a host directory tree (files, modes, nested dirs, symlinks as symlinks)', async () => {
    const hostDir = join(tmp.path, 'host-tree');
    mkdirSync(join(hostDir, 'nested/deeper'), { recursive: true });
    writeFileSync(join(hostDir, 'top.txt'), 'top');
    writeFileSync(join(hostDir, 'nested/deeper/leaf.txt'), 'leaf');
    writeFileSync(join(hostDir, 'nested/tool.sh'), '#!/bin/sh', { mode: 0o750 });
    symlinkSync('nested/deeper', join(hostDir, 'shortcut'));
    const { fs, root } = await newWorkspace();
    await fs.copyFromHost(hostDir);
    assert.equal(await fs.readFile('host-tree/top.txt', 'utf8'), 'top');
    assert.equal(await fs.readFile('host-tree/nested/deeper/leaf.txt', 'utf8'), 'leaf');
    assert.equal(statSync(join(root, 'host-tree/nested/tool.sh')).mode & 0o777, 0o750);
    assert.equal(lstatSync(join(root, 'host-tree/shortcut')).isSymbolicLink(), true);
    await fs.copyFromHost(hostDir, 'elsewhere/copy');
    assert.deepEqual(
      (await fs.readDir('elsewhere/copy', { recursive: true })).map((e) => e.name),
      (await fs.readDir('host-tree', { recursive: true })).map((e) => e.name),
    );
  });

  test('copies a single host file, by default under its basename', async () => {
    const hostFile = join(tmp.path, 'single-host.txt');
    writeFileSync(hostFile, 'single');
    const { fs } = await newWorkspace();
    await fs.copyFromHost(hostFile);
    assert.equal(await fs.readFile('single-host.txt', 'utf8'), 'single');
    await fs.copyFromHost(hostFile, 'sub/renamed.txt');
    assert.equal(await fs.readFile('sub/renamed.txt', 'utf8'), 'single');
    await rejectsWithCode(fs.copyFromHost('relative/path'), 'invalid_argument');
    await rejectsWithCode(fs.copyFromHost(join(tmp.path, 'missing-host')), 'not_found');
  });
});
