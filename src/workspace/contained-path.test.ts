import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { constants, mkdirSync, readFileSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { isSbxError } from '../errors.js';
import { DirHandle, openDirAt } from './contained-path.js';
import { makeTempDir, rejectsWithCode } from '../testing/workspace/fixtures.js';
import { parseWorkspacePath, symlinkStaysInside } from './workspace-path.js';

const O_PATH = 0o10000000;
const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW } = constants;

describe('the /proc/self/fd trick on this kernel', () => {
  let tmp: Awaited<ReturnType<typeof makeTempDir>>;
  let root: string;
  let outside: string;

  before(async () => {
    tmp = await makeTempDir('procfd');
    root = join(tmp.path, 'root');
    outside = join(tmp.path, 'outside');
    mkdirSync(join(root, 'd'), { recursive: true });
    mkdirSync(outside);
    writeFileSync(join(root, 'd', 'file'), 'inside');
    writeFileSync(join(outside, 'file'), 'SECRET');
  });
  after(() => tmp.remove());

  test('a directory fd keeps resolving to its inode after the path is swapped for a symlink', async () => {
    const rootFd = await open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    const dirFd = await open(`/proc/self/fd/${rootFd.fd}/d`, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    try {
      renameSync(join(root, 'd'), join(root, 'd.moved'));
      symlinkSync(outside, join(root, 'd'));
      assert.equal(readFileSync(join(root, 'd', 'file'), 'utf8'), 'SECRET', 'a path-based read follows the swapped-in symlink');
      assert.equal(readFileSync(`/proc/self/fd/${dirFd.fd}/file`, 'utf8'), 'inside', 'the fd-based read stays on the original directory');
      await assert.rejects(
        open(`/proc/self/fd/${rootFd.fd}/d`, O_RDONLY | O_DIRECTORY | O_NOFOLLOW),
        (err: NodeJS.ErrnoException) => err.code === 'ENOTDIR' || err.code === 'ELOOP',
      );
    } finally {
      await dirFd.close();
      await rootFd.close();
    }
  });

  test('O_PATH|O_NOFOLLOW opens a symlink itself, and a regular file can be reopened through it', async () => {
    symlinkSync(join(outside, 'file'), join(root, 'flink'));
    const rootFd = await open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    try {
      const link = await open(`/proc/self/fd/${rootFd.fd}/flink`, O_PATH | O_NOFOLLOW);
      assert.equal((await link.stat()).isSymbolicLink(), true);
      await link.close();
      const file = await open(`/proc/self/fd/${rootFd.fd}/d.moved/file`, O_PATH | O_NOFOLLOW);
      const reopened = await open(`/proc/self/fd/${file.fd}`, O_RDONLY);
      assert.equal(await reopened.readFile('utf8'), 'inside');
      await reopened.close();
      await file.close();
    } finally {
      await rootFd.close();
    }
  });
});

describe('path policy: lexical checks', () => {
  const escaping: Array<[string, unknown]> = [
    ['parent', '../x'],
    ['bare dotdot', '..'],
    ['dotdot slash', '../'],
    ['climb after descend', 'a/../../x'],
    ['absolute', '/etc/passwd'],
    ['absolute root', '/'],
    ['double-slash absolute', '//etc/passwd'],
    ['absolute with dotdot', '/../x'],
    ['NUL alone', '\0'],
    ['NUL inside', 'a\0b'],
    ['NUL component', 'ok/\0/x'],
    ['dot then parent', './../'],
    ['dot parent file', './../x'],
    ['three up', 'a/b/../../../x'],
    ['deep climb', '../../../../../../etc/passwd'],
    ['dots mixed', 'a/./../.././x'],
    ['parent of dot', '.././.'],
    ['climb at end', 'x/../..'],
    ['double slash climb', 'a//../../x'],
    ['sibling workspace', '../../ws-other/root/secret'],
    ['backslash parent', '..\\x'],
    ['backslash climb', 'a\\..\\..\\x'],
    ['backslash absolute', '\\etc\\passwd'],
    ['windows drive', 'C:\\Windows'],
    ['name too long', 'x'.repeat(256)],
    ['path too long', 'a/'.repeat(2100)],
    ['not a string', 42],
    ['undefined', undefined],
  ];

  for (const [label, input] of escaping) {
    test(`refuses ${label}: ${JSON.stringify(input)?.slice(0, 40)}`, () => {
      assert.throws(
        () => parseWorkspacePath(input),
        (err: unknown) => isSbxError(err, 'invalid_argument') && err.details?.field === 'path',
      );
    });
  }

  const inside: Array<[string, string[]]> = [
    ['', []],
    ['.', []],
    ['./', []],
    ['a/../b', ['b']],
    ['a/b/..', ['a']],
    ['a/b/../../c', ['c']],
    ['./a//b/', ['a', 'b']],
    ['...', ['...']],
    ['..a', ['..a']],
    ['a..', ['a..']],
    ['.hidden', ['.hidden']],
    ['%2e%2e/x', ['%2e%2e', 'x']],
    ['\u2025/x', ['\u2025', 'x']],
    [' .. ', [' .. ']],
    ['C:x', ['C:x']],
  ];
  for (const [input, components] of inside) {
    test(`accepts ${JSON.stringify(input)} as ${JSON.stringify(components)}`, () => {
      assert.deepEqual(parseWorkspacePath(input), components);
    });
  }

  test('symlink targets are inside only when relative and not climbing out', () => {
    assert.equal(symlinkStaysInside([], 'a/b'), true);
    assert.equal(symlinkStaysInside(['a'], '../b'), true);
    assert.equal(symlinkStaysInside(['a'], '../../b'), false);
    assert.equal(symlinkStaysInside([], '/etc'), false);
    assert.equal(symlinkStaysInside([], ''), false);
    assert.equal(symlinkStaysInside(['a', 'b'], './../../c/../d'), true);
  });
});

describe('openDirAt', () => {
  let tmp: Awaited<ReturnType<typeof makeTempDir>>;
  let root: string;

  before(async () => {
    tmp = await makeTempDir('walk');
    root = join(tmp.path, 'root');
    mkdirSync(join(root, 'real', 'sub'), { recursive: true });
    writeFileSync(join(root, 'file'), 'x');
    symlinkSync('real', join(root, 'inner'));
    symlinkSync('/etc', join(root, 'etc'));
  });
  after(() => tmp.remove());

  test('walks real directories', async () => {
    await using base = await DirHandle.openHostDir(root);
    await using sub = await openDirAt(base, ['real', 'sub'], { display: 'real/sub', action: 'list' });
    assert.deepEqual(await sub.list(), []);
  });

  test('refuses a symlinked component, even one pointing inside', async () => {
    await using base = await DirHandle.openHostDir(root);
    for (const components of [['inner'], ['inner', 'sub'], ['etc']]) {
      const err = await rejectsWithCode(
        openDirAt(base, components, { display: components.join('/'), action: 'list' }),
        'invalid_argument',
        components.join('/'),
      );
      assert.equal((err as { details?: { reason?: string } }).details?.reason, 'symlink');
    }
  });

  test('a file component is not_found when reading and conflict when creating', async () => {
    await using base = await DirHandle.openHostDir(root);
    await rejectsWithCode(openDirAt(base, ['file', 'x'], { display: 'file/x', action: 'read' }), 'not_found');
    await rejectsWithCode(openDirAt(base, ['file', 'x'], { display: 'file/x', action: 'write', create: { mode: 0o755 } }), 'conflict');
  });

  test('creates missing directories with the asked mode', async () => {
    await using base = await DirHandle.openHostDir(root);
    await using made = await openDirAt(base, ['n1', 'n2'], { display: 'n1/n2', action: 'write', create: { mode: 0o750 } });
    assert.equal((await made.stat()).mode & 0o777, 0o750);
  });
});

describe('DirHandle.readRegularFile', () => {
  let tmp: Awaited<ReturnType<typeof makeTempDir>>;
  let root: string;

  before(async () => {
    tmp = await makeTempDir('read');
    root = join(tmp.path, 'root');
    mkdirSync(join(root, 'dir'), { recursive: true });
    writeFileSync(join(root, 'big'), Buffer.alloc(3 * 1024 * 1024 + 7, 'ab'));
    writeFileSync(join(root, 'empty'), '');
    symlinkSync('big', join(root, 'link'));
    execFileSync('mkfifo', [join(root, 'fifo')]);
  });
  after(() => tmp.remove());

  test('reads a file whole in one buffer, and an empty one', async () => {
    await using base = await DirHandle.openHostDir(root);
    assert.ok((await base.readRegularFile('big', 'big', 'read')).equals(readFileSync(join(root, 'big'))));
    assert.equal((await base.readRegularFile('empty', 'empty', 'read')).length, 0);
  });

  test('reads what the kernel gives for a file whose fstat says 0 bytes', async () => {
    await using proc = await DirHandle.openHostDir(`/proc/${process.pid}`);
    assert.match((await proc.readRegularFile('status', 'status', 'read')).toString(), /^Name:/);
  });

  test('refuses a symlink, a directory and a FIFO without opening them', async () => {
    await using base = await DirHandle.openHostDir(root);
    await rejectsWithCode(base.readRegularFile('link', 'link', 'read'), 'invalid_argument', 'link');
    await rejectsWithCode(base.readRegularFile('dir', 'dir', 'read'), 'invalid_argument', 'dir');
    // Opened for reading, a FIFO without a writer would block this call forever.
    await rejectsWithCode(base.readRegularFile('fifo', 'fifo', 'read'), 'invalid_argument', 'fifo');
  });
});
