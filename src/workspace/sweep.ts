/**
 * Removal of what a crash leaves behind: temp entries (temp-names.ts) whose writer has gone, and
 * workspace id directories without metadata. Everything is reached through directory fds
 * (contained-path.ts), so a box that plants symlinks or swaps directories in its root can make
 * the sweep skip things there, never remove anything outside it.
 */
import type { DirHandle } from './contained-path.js';
import { errnoOf } from './fs-errors.js';
import { METADATA_FILE } from './layout.js';
import { TEMP_PREFIX, type WriterCheck } from './temp-names.js';
import { removeTree } from './tree-walk.js';

/** Deepest nesting of a workspace root the sweep enters (each level holds one fd). */
const MAX_SWEEP_DEPTH = 512;

/**
 * Removes the dead writers' temp entries directly in `dir`, whole trees included (for the
 * host-private directories: node, workspace and staging directories). Returns how many went.
 *
 * @example
 * await using staging = await DirHandle.openHostDir(layout.staging('local', 'ws-1'));
 * await sweepTempEntries(staging, new WriterCheck());
 */
export async function sweepTempEntries(dir: DirHandle, writers: WriterCheck): Promise<number> {
  let removed = 0;
  for (const name of await dir.list()) {
    if (!name.startsWith(TEMP_PREFIX) || !(await writers.gone(name))) continue;
    await removeTree(dir, name);
    removed += 1;
  }
  return removed;
}

/**
 * Removes the dead writers' temp files and symlinks anywhere below a workspace root (a crashed
 * `writeFile` leaves its temp file beside the target, at any depth). Directories are never
 * removed here — sbx makes none with a temp name in a root, so one is the box's own — and never
 * entered through a symlink. Deeper than MAX_SWEEP_DEPTH levels is left unswept.
 *
 * @example
 * await using root = await DirHandle.openHostDir(layout.root('local', 'ws-1'));
 * const removed = await sweepRoot(root, new WriterCheck());
 */
export async function sweepRoot(dir: DirHandle, writers: WriterCheck, depth = 0): Promise<number> {
  let removed = 0;
  for (const entry of await dir.entries()) {
    if (entry.isDirectory()) {
      if (depth >= MAX_SWEEP_DEPTH) continue;
      let child: DirHandle;
      try {
        child = await dir.openDir(entry.name);
      } catch (err) {
        if (racedAway(err)) continue; // gone, or swapped for a symlink since the listing
        throw err;
      }
      try {
        removed += await sweepRoot(child, writers, depth + 1);
      } finally {
        await child.close();
      }
    } else if (entry.name.startsWith(TEMP_PREFIX) && (await writers.gone(entry.name))) {
      // unlink acts on the name in this directory inode and never follows a symlink.
      try {
        await dir.unlink(entry.name);
        removed += 1;
      } catch (err) {
        if (errnoOf(err) !== 'ENOENT' && errnoOf(err) !== 'EISDIR') throw err;
      }
    }
  }
  return removed;
}

/**
 * Removes workspace directory `id` of `node` if it has no metadata file: a create that crashed
 * before this design built workspaces under a temp name, or a hand-made directory. Its contents
 * are removed through the fd of the directory that was checked, and the final rmdir only takes an
 * empty directory, so a workspace that took the name meanwhile is never touched.
 *
 * @example
 * await using nodeDir = await DirHandle.openHostDir(layout.node('local'));
 * if (await removeIfOrphan(nodeDir, 'ws-1')) console.log('removed');
 */
export async function removeIfOrphan(node: DirHandle, id: string): Promise<boolean> {
  let dir: DirHandle;
  try {
    dir = await node.openDir(id);
  } catch (err) {
    if (racedAway(err)) return false;
    throw err;
  }
  try {
    if (await dir.lstatIfExists(METADATA_FILE)) return false;
    for (const name of await dir.list()) await removeTree(dir, name);
  } finally {
    await dir.close();
  }
  try {
    await node.rmdir(id);
    return true;
  } catch (err) {
    const code = errnoOf(err);
    if (code === 'ENOENT' || code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOTDIR') return false;
    throw err;
  }
}

function racedAway(err: unknown): boolean {
  const code = errnoOf(err);
  return code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP';
}
