/**
 * Staging for multi-entry writes (importTar, copy of a tree, copyFromHost of a tree): the tree is
 * built in a host-private directory beside the workspace root — same filesystem, invisible to
 * boxes — and only moved into the workspace once complete. A failure (bad archive entry, quota)
 * leaves nothing in the workspace.
 */
import { mkdir } from 'node:fs/promises';
import { SbxError } from '../errors.js';
import { DirHandle } from './contained-path.js';
import { tempName } from './temp-names.js';
import { removeTree } from './tree-walk.js';

/**
 * A fresh, empty staging directory; `dir` is its open handle. Dispose to delete what is left.
 *
 * @example
 * await using stage = await StagedTree.create(layout.staging('local', 'ws-1'));
 * await writeFileAtomic(stage.dir, 'a.txt', 'x', { mode: 0o644 });
 * await mergeTree(stage.dir, destination, 'vendor');
 */
export class StagedTree implements AsyncDisposable {
  private constructor(
    private readonly area: DirHandle,
    private readonly name: string,
    readonly dir: DirHandle,
  ) {}

  static async create(stagingAreaPath: string): Promise<StagedTree> {
    await mkdir(stagingAreaPath, { recursive: true, mode: 0o700 });
    const area = await DirHandle.openHostDir(stagingAreaPath);
    try {
      // A temp name carries this process, so a sweep by another process leaves it alone while we live.
      const name = tempName();
      await area.mkdir(name, 0o700);
      return new StagedTree(area, name, await area.openDir(name));
    } catch (err) {
      await area.close();
      throw err;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.dir.close();
      await removeTree(this.area, this.name);
    } finally {
      await this.area.close();
    }
  }
}

/**
 * Moves the contents of `source` into `destination`: directories merge, files and symlinks replace
 * existing non-directories. A directory meeting a non-directory (either way round) is a `conflict`,
 * found by a dry run before anything moves.
 *
 * @example
 * await mergeTree(stage.dir, destinationDir, 'vendor');
 */
export async function mergeTree(source: DirHandle, destination: DirHandle, display: string): Promise<void> {
  await visit(source, destination, display, 'check');
  await visit(source, destination, display, 'move');
  await destination.sync();
}

async function visit(source: DirHandle, destination: DirHandle, display: string, mode: 'check' | 'move'): Promise<void> {
  for (const name of await source.list()) {
    const staged = await source.lstat(name);
    const existing = await destination.lstatIfExists(name);
    const shown = display === '' ? name : `${display}/${name}`;
    if (!existing) {
      if (mode === 'move') await source.rename(name, destination, name);
      continue;
    }
    if (staged.isDirectory() !== existing.isDirectory()) {
      const what = existing.isDirectory() ? 'a directory' : 'not a directory';
      throw new SbxError('conflict', `cannot write ${JSON.stringify(shown)}: it exists and is ${what}; remove it first`, {
        details: { field: 'path', path: shown },
      });
    }
    if (!staged.isDirectory()) {
      if (mode === 'move') await source.rename(name, destination, name);
      continue;
    }
    const from = await source.openDir(name);
    try {
      const to = await destination.openDir(name);
      try {
        await visit(from, to, shown, mode);
      } finally {
        await to.close();
      }
    } finally {
      await from.close();
    }
  }
}
