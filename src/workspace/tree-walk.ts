/**
 * Recursive walks over a directory tree by fds (see contained-path.ts): listing and removal never
 * descend through a symlink, and an entry a box swaps mid-walk is skipped or retried, never followed.
 */
import type { Stats } from 'node:fs';
import { SbxError } from '../errors.js';
import type { DirHandle } from './contained-path.js';
import { errnoOf } from './fs-errors.js';
import type { DirEntry } from './types.js';

/** Deepest nesting `walkTree` enters (listing, export, copy, usage). */
export const MAX_WALK_DEPTH = 512;

/**
 * One entry met by `walkTree`. `parent` is open only until the walk moves on.
 *
 * @example
 * for await (const e of walkTree(dir)) console.log(e.path.join('/'), e.stat.size);
 */
export interface TreeEntry {
  /** Components relative to the walked directory. */
  path: string[];
  name: string;
  parent: DirHandle;
  stat: Stats;
}

/**
 * Depth-first, pre-order, names sorted. Directories are entered by fd with O_NOFOLLOW; an entry
 * that vanishes or stops being a directory between lstat and open is reported but not entered.
 * Deeper than MAX_WALK_DEPTH levels: `limit_exceeded`.
 *
 * @example
 * let bytes = 0;
 * for await (const { stat } of walkTree(root)) if (stat.isFile()) bytes += stat.size;
 */
export async function* walkTree(dir: DirHandle, prefix: readonly string[] = []): AsyncGenerator<TreeEntry> {
  // Each level holds one fd open; a box could nest directories until we ran out.
  if (prefix.length > MAX_WALK_DEPTH) {
    throw new SbxError(
      'limit_exceeded',
      `directory tree deeper than ${MAX_WALK_DEPTH} levels at ${JSON.stringify(prefix.slice(0, 3).join('/'))}/...; flatten it first`,
    );
  }
  const names = (await dir.list()).sort();
  for (const name of names) {
    const stat = await dir.lstatIfExists(name);
    if (!stat) continue;
    const path = [...prefix, name];
    yield { path, name, parent: dir, stat };
    if (!stat.isDirectory()) continue;
    let child: DirHandle;
    try {
      child = await dir.openDir(name);
    } catch (err) {
      if (isRacedAway(err)) continue;
      throw err;
    }
    try {
      yield* walkTree(child, path);
    } finally {
      await child.close();
    }
  }
}

/**
 * `readDir` entry of an lstat result.
 *
 * @example
 * toDirEntry('a.txt', await dir.lstat('a.txt'));
 */
export function toDirEntry(name: string, stat: Stats): DirEntry {
  return {
    name,
    isDir: stat.isDirectory(),
    isSymlink: stat.isSymbolicLink(),
    size: stat.size,
    mode: stat.mode & 0o7777,
    mtime: stat.mtime.toISOString(),
  };
}

/**
 * What a removal freed, for quota bookkeeping.
 *
 * @example
 * const { bytes } = await removeTree(parent, 'build');
 */
export interface Removed {
  bytes: number;
  files: number;
}

const REMOVE_ATTEMPTS = 5;

/**
 * `rm -rf` of child `name` of `parent`, by fds: directories are opened with O_NOFOLLOW and emptied
 * through their own fd, symlinks are unlinked (never followed). A missing entry is fine. When a box
 * keeps refilling or swapping the entry, it gives up after a few rounds with `conflict`.
 *
 * @example
 * await using parent = await openDirAt(root, ['a'], { display: 'a/b', action: 'remove' });
 * await removeTree(parent, 'b');
 */
export async function removeTree(parent: DirHandle, name: string): Promise<Removed> {
  const removed: Removed = { bytes: 0, files: 0 };
  for (let attempt = 0; attempt < REMOVE_ATTEMPTS; attempt++) {
    const stat = await parent.lstatIfExists(name);
    if (!stat) return removed;
    if (!stat.isDirectory()) {
      try {
        await parent.unlink(name);
        if (stat.isFile() && stat.nlink === 1) {
          removed.bytes += stat.size;
          removed.files += 1;
        }
        return removed;
      } catch (err) {
        if (errnoOf(err) === 'ENOENT') return removed;
        if (errnoOf(err) === 'EISDIR') continue;
        throw err;
      }
    }
    let dir: DirHandle;
    try {
      dir = await parent.openDir(name);
    } catch (err) {
      if (isRacedAway(err)) continue;
      throw err;
    }
    try {
      for (const child of await dir.list()) add(removed, await removeTree(dir, child));
    } finally {
      await dir.close();
    }
    try {
      await parent.rmdir(name);
      return removed;
    } catch (err) {
      const code = errnoOf(err);
      if (code === 'ENOENT') return removed;
      // Refilled (ENOTEMPTY) or swapped for a non-directory (ENOTDIR) meanwhile: go round again.
      if (code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOTDIR') continue;
      throw err;
    }
  }
  throw new SbxError('conflict', `could not remove ${JSON.stringify(name)}: it kept changing while being removed (is a box writing to it?)`);
}

function add(into: Removed, more: Removed): void {
  into.bytes += more.bytes;
  into.files += more.files;
}

/** The entry disappeared or became a non-directory (a symlink) between lstat and open. */
function isRacedAway(err: unknown): boolean {
  const code = errnoOf(err);
  return code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP';
}
