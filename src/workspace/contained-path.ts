/**
 * The race-proof path resolver: openat(2) emulated on Linux through /proc/self/fd.
 *
 * Node has no openat(), so a directory is held open as an fd and its children are named as
 * `/proc/self/fd/<fd>/<name>`. The kernel resolves the magic link `/proc/self/fd/<fd>` to the
 * inode that fd has open — not to whatever path it had — so once a directory is open, swapping
 * it (or any ancestor) for a symlink cannot redirect anything done inside it. Each step of a walk
 * opens the next component with O_DIRECTORY|O_NOFOLLOW, so a symlinked component fails
 * (ENOTDIR on this kernel) instead of being followed. Final components are never followed either:
 * files are opened O_PATH|O_NOFOLLOW, checked to be regular, then reopened through their own fd
 * (so no device driver's open() ever runs for a node a box planted, and no FIFO blocks us).
 * Everything else (mkdir, unlink, rmdir, rename, symlink, link, lstat, readlink) acts on a
 * final component, which those system calls do not follow.
 */
import { constants, type Dirent, type Stats } from 'node:fs';
import { lchown, link, lstat, mkdir, open, readdir, readlink, rename, rmdir, symlink, unlink, type FileHandle } from 'node:fs/promises';
import { SbxError } from '../errors.js';
import { errnoOf, symlinkRefused, toWorkspaceError } from './fs-errors.js';
import type { FileOwner } from './types.js';

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_DIRECTORY, O_NOFOLLOW } = constants;
/** Linux O_PATH (x86-64 and arm64); node:fs does not export it. */
const O_PATH = 0o10000000;
const DIR_FLAGS = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;

/**
 * An open directory and the operations on its direct children, all bound to its inode.
 * Close it (or `await using` it); a handle must stay open while any path built by `at()` is in use,
 * because a closed fd number can be reused by something else.
 *
 * @example
 * await using root = await DirHandle.openHostDir('/var/lib/sbx/workspaces/local/ws-1/root');
 * await using src = await openDirAt(root, ['src'], { display: 'src', action: 'list' });
 * console.log(await src.list());
 */
export class DirHandle implements AsyncDisposable {
  private closed = false;

  private constructor(private readonly handle: FileHandle) {}

  /**
   * Opens a directory whose host path is trusted (a workspace root, a staging directory); only the
   * last component is checked not to be a symlink.
   *
   * @example
   * await using root = await DirHandle.openHostDir(layout.root('local', 'ws-1'));
   */
  static async openHostDir(hostPath: string): Promise<DirHandle> {
    return new DirHandle(await open(hostPath, DIR_FLAGS));
  }

  /** Kernel path of `name` inside exactly this directory inode. `name` must be a plain name. */
  at(name: string): string {
    return `/proc/self/fd/${this.handle.fd}/${name}`;
  }

  /** Kernel path of this directory itself. */
  get self(): string {
    return `/proc/self/fd/${this.handle.fd}`;
  }

  /** Opens child directory `name` without following a symlink; raw errno errors (ENOTDIR for a symlink). */
  async openDir(name: string): Promise<DirHandle> {
    return new DirHandle(await open(this.at(name), DIR_FLAGS));
  }

  /** A second, independently closable handle on the same directory. */
  async reopen(): Promise<DirHandle> {
    // Following the magic link is the point here (it is our own fd), so no O_NOFOLLOW.
    return new DirHandle(await open(this.self, O_RDONLY | O_DIRECTORY));
  }

  async list(): Promise<string[]> {
    return readdir(this.self);
  }

  /** Names with their types from the directory itself (d_type), without an lstat per entry. */
  async entries(): Promise<Dirent[]> {
    return readdir(this.self, { withFileTypes: true });
  }

  stat(): Promise<Stats> {
    return this.handle.stat();
  }

  lstat(name: string): Promise<Stats> {
    return lstat(this.at(name));
  }

  /** lstat that answers undefined for a missing entry. */
  async lstatIfExists(name: string): Promise<Stats | undefined> {
    try {
      return await lstat(this.at(name));
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') return undefined;
      throw err;
    }
  }

  /**
   * Opens regular file `name` for reading. Symlinks, directories, devices, FIFOs and sockets are
   * refused without being opened for I/O (see the module comment).
   */
  async openRegularFile(name: string, display: string, action: string): Promise<{ file: FileHandle; stat: Stats }> {
    let pathHandle: FileHandle;
    try {
      pathHandle = await open(this.at(name), O_PATH | O_NOFOLLOW);
    } catch (err) {
      throw toWorkspaceError(err, display, action);
    }
    try {
      const stat = await pathHandle.stat();
      if (stat.isSymbolicLink()) throw symlinkRefused(display, action);
      if (stat.isDirectory())
        throw new SbxError('invalid_argument', `cannot ${action} ${JSON.stringify(display)}: it is a directory`, { details: { field: 'path', path: display } });
      if (!stat.isFile())
        throw new SbxError(
          'invalid_argument',
          `cannot ${action} ${JSON.stringify(display)}: not a regular file (devices, FIFOs and sockets are never opened)`,
          { details: { field: 'path', path: display } },
        );
      // The O_PATH fd pins the inode, so the reopen cannot land on anything else.
      const file = await open(`/proc/self/fd/${pathHandle.fd}`, O_RDONLY);
      return { file, stat };
    } catch (err) {
      throw toWorkspaceError(err, display, action);
    } finally {
      // Not waited for: nothing uses the O_PATH fd any more, and its close is a thread-pool
      // round trip a read would otherwise wait for (a third of a small read's time).
      pathHandle.close().catch(() => undefined);
    }
  }

  /**
   * The whole content of regular file `name`, refused as `openRegularFile` refuses. Read with
   * one read(2) of the size the open saw, not fs's readFile (an fstat more and 512 KiB reads); a
   * file that changes meanwhile gives what the reads found, as readFile would.
   */
  async readRegularFile(name: string, display: string, action: string): Promise<Buffer> {
    const { file, stat } = await this.openRegularFile(name, display, action);
    try {
      return await readOpened(file, stat.size);
    } catch (err) {
      throw toWorkspaceError(err, display, action);
    } finally {
      file.close().catch(() => undefined);
    }
  }

  /** Creates and opens a new file for writing; fails if anything (even a dangling symlink) has the name. */
  createExclusive(name: string, mode: number): Promise<FileHandle> {
    return open(this.at(name), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
  }

  mkdir(name: string, mode: number): Promise<void> {
    return mkdir(this.at(name), { mode });
  }

  unlink(name: string): Promise<void> {
    return unlink(this.at(name));
  }

  rmdir(name: string): Promise<void> {
    return rmdir(this.at(name));
  }

  rename(name: string, to: DirHandle, toName: string): Promise<void> {
    return rename(this.at(name), to.at(toName));
  }

  symlink(target: string, name: string): Promise<void> {
    return symlink(target, this.at(name));
  }

  readlink(name: string): Promise<string> {
    return readlink(this.at(name));
  }

  /** Hard-links child `name` as `toName` in `to`; link(2) does not follow a symlink `name`. */
  link(name: string, to: DirHandle, toName: string): Promise<void> {
    return link(this.at(name), to.at(toName));
  }

  lchown(name: string, owner: FileOwner): Promise<void> {
    return lchown(this.at(name), owner.uid, owner.gid);
  }

  chown(owner: FileOwner): Promise<void> {
    return this.handle.chown(owner.uid, owner.gid);
  }

  chmod(mode: number): Promise<void> {
    return this.handle.chmod(mode);
  }

  /** fsync the directory, making renames and creations inside it durable. */
  sync(): Promise<void> {
    return this.handle.sync();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.handle.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * Closes without being waited for, for a handle nothing uses any more at the end of a call:
   * the answer need not wait a thread-pool round trip for it. A failed close is ignored (the fd
   * is gone either way).
   */
  release(): void {
    this.close().catch(() => undefined);
  }
}

/**
 * The content of an open file of `size` bytes (an fstat's): read until that many bytes or the
 * end. A size of 0 may be a file whose size the kernel does not know: read to the end then.
 */
async function readOpened(file: FileHandle, size: number): Promise<Buffer> {
  if (size === 0) return file.readFile();
  const buffer = Buffer.allocUnsafe(size);
  let filled = 0;
  while (filled < size) {
    const { bytesRead } = await file.read(buffer, filled, size - filled, filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return filled === size ? buffer : buffer.subarray(0, filled);
}

/**
 * How `openDirAt` creates missing directories.
 *
 * @example
 * const create: CreateDirs = { mode: 0o755, owner: { uid: 1000, gid: 1000 } };
 */
export interface CreateDirs {
  mode: number;
  /** chown of each directory created (when sbx runs as root). */
  owner?: FileOwner | undefined;
}

/**
 * How `openDirAt` reports and creates.
 *
 * @example
 * const opts: WalkOptions = { display: 'a/b', action: 'write', create: { mode: 0o755 } };
 */
export interface WalkOptions {
  /** Workspace path shown in errors. */
  display: string;
  /** Verb shown in errors ("read", "write", ...). */
  action: string;
  /** Create missing components (mkdir -p) instead of failing with not_found. */
  create?: CreateDirs | undefined;
}

/**
 * Walks from `base` down `components` one directory at a time, never following a symlink, and
 * returns a new handle on the last directory (`base` itself, reopened, for an empty list). The
 * caller closes it. Refusals: a symlinked component -> invalid_argument (reason symlink); a missing
 * one -> not_found (or created); a non-directory component -> not_found (conflict when creating).
 *
 * @example
 * await using parent = await openDirAt(root, ['a', 'b'], { display: 'a/b/c.txt', action: 'write', create: { mode: 0o755 } });
 */
export async function openDirAt(base: DirHandle, components: readonly string[], opts: WalkOptions): Promise<DirHandle> {
  let dir = await base.reopen();
  try {
    for (const name of components) {
      const next = await openChildDir(dir, name, opts);
      await dir.close();
      dir = next;
    }
    return dir;
  } catch (err) {
    await dir.close();
    throw err;
  }
}

async function openChildDir(dir: DirHandle, name: string, opts: WalkOptions): Promise<DirHandle> {
  try {
    return await dir.openDir(name);
  } catch (err) {
    const code = errnoOf(err);
    if (code === 'ENOENT' && opts.create) return createChildDir(dir, name, opts, opts.create);
    if (code === 'ENOTDIR' || code === 'ELOOP') throw await notADirectory(dir, name, opts);
    throw toWorkspaceError(err, opts.display, opts.action);
  }
}

async function createChildDir(dir: DirHandle, name: string, opts: WalkOptions, create: CreateDirs): Promise<DirHandle> {
  let created = false;
  try {
    // 0o700 until chmod/chown below, so nobody else gets a window on a half-set-up directory.
    await dir.mkdir(name, 0o700);
    created = true;
  } catch (err) {
    if (errnoOf(err) !== 'EEXIST') throw toWorkspaceError(err, opts.display, opts.action);
  }
  let child: DirHandle;
  try {
    child = await dir.openDir(name);
  } catch (err) {
    const code = errnoOf(err);
    if (code === 'ENOTDIR' || code === 'ELOOP') throw await notADirectory(dir, name, opts);
    throw toWorkspaceError(err, opts.display, opts.action);
  }
  if (created) {
    try {
      if (create.owner) await child.chown(create.owner);
      await child.chmod(create.mode);
    } catch (err) {
      await child.close();
      throw toWorkspaceError(err, opts.display, opts.action);
    }
  }
  return child;
}

async function notADirectory(dir: DirHandle, name: string, opts: WalkOptions): Promise<SbxError> {
  const stat = await dir.lstatIfExists(name).catch(() => undefined);
  if (stat?.isSymbolicLink()) return symlinkRefused(opts.display, opts.action);
  const message = `cannot ${opts.action} ${JSON.stringify(opts.display)}: ${JSON.stringify(name)} is not a directory`;
  return new SbxError(opts.create ? 'conflict' : 'not_found', message, { details: { field: 'path', path: opts.display } });
}
