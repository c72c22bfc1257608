/**
 * The seed's WorkspaceFS object: it holds the workspace's id, name and node and reaches the
 * files through the process-wide Manager's WorkspaceManager on every call.
 */
import { realpath, stat as hostStat } from 'node:fs/promises';
import { basename, isAbsolute } from 'node:path';
import { SbxError, invalidArgument } from '../errors.js';
import { M } from './singleton.js';
import type { Workspace, WorkspaceFS as LibWorkspaceFS } from '../workspace/index.js';
import { DirHandle } from '../workspace/contained-path.js';
import { packTree } from '../workspace/tar.js';
import { PERM_NAME, seedNames } from './options.js';
import type { DirEntry, FileInfo, WorkspaceInfo } from './types.js';

/**
 * Files of one workspace, paths relative to its root ('' is the root), never leaving it.
 *
 * @example
 * const ws = await workspace.Create({ name: 'notes', owner: 'alice', node: 'local' });
 * await ws.WriteFile('a.txt', 'hello');
 * console.log(await ws.ReadFile('a.txt'));
 */
export class WorkspaceFS {
  readonly id: string;
  readonly name: string;
  readonly node: string;

  /** @internal Made by the `workspace` namespace and `box.Workspace()`. */
  constructor(w: Workspace) {
    this.id = w.id;
    this.name = w.name;
    this.node = w.node;
  }

  private fs(): Promise<LibWorkspaceFS> {
    return M().workspaces.fs(this.id);
  }

  /** Whole file content as UTF-8 text (binary content: `ReadFileBase64`). */
  async ReadFile(path: string): Promise<string> {
    return (await this.fs()).readFile(path, 'utf8');
  }

  /** Writes a file atomically; `perm` (e.g. 0o644) defaults to the replaced file's, else 0o644. */
  async WriteFile(path: string, data: string | Uint8Array, perm?: number): Promise<void> {
    const files = await this.fs();
    await seedNames(() => files.writeFile(path, data, perm === undefined ? {} : { mode: perm }), PERM_NAME);
  }

  /** The entries of a directory (default the root), sorted by name; symlinks as themselves. */
  async ReadDir(path = ''): Promise<DirEntry[]> {
    const entries = await (await this.fs()).readDir(path);
    return entries.map((e) => ({ name: e.name, is_dir: e.isDir, size: e.size }));
  }

  /** Describes a path without following a final symlink. */
  async Stat(path: string): Promise<FileInfo> {
    const s = await (await this.fs()).stat(path);
    return { name: s.name, size: s.size, is_dir: s.isDir, mod_time: s.mtime };
  }

  /** `mkdir -p`; `perm` defaults to 0o755. */
  async MkdirAll(path: string, perm?: number): Promise<void> {
    const files = await this.fs();
    await seedNames(() => files.mkdirAll(path, perm), PERM_NAME);
  }

  /** Removes a file, a symlink or an empty directory. */
  async Remove(path: string): Promise<void> {
    await (await this.fs()).remove(path);
  }

  /** `rm -rf`; a missing path is fine. */
  async RemoveAll(path: string): Promise<void> {
    await (await this.fs()).removeAll(path);
  }

  async Rename(from: string, to: string): Promise<void> {
    await (await this.fs()).rename(from, to);
  }

  async ReadFileBase64(path: string): Promise<string> {
    return (await this.fs()).readFileBase64(path);
  }

  /** Writes base64 content (validated strictly) like `WriteFile`. */
  async WriteFileBase64(path: string, b64: string, perm?: number): Promise<void> {
    const files = await this.fs();
    await seedNames(() => files.writeFileBase64(path, b64, perm === undefined ? {} : { mode: perm }), PERM_NAME);
  }

  /** Copies a host file or directory tree into the workspace; `destPath` defaults to its basename. */
  async CopyFromHost(hostPath: string, destPath?: string): Promise<void> {
    await (await this.fs()).copyFromHost(hostPath, destPath);
  }

  /**
   * Copies a host directory tree as one tar stream, extracted all or nothing: an archive with a
   * bad entry, or one past the quota, leaves the workspace as it was. Symlinks pointing outside
   * the tree are left out (CopyFromHost copies them). A host file is copied as CopyFromHost does.
   */
  async CopyFromHostArchive(hostPath: string, destPath?: string): Promise<void> {
    if (typeof hostPath !== 'string' || !isAbsolute(hostPath)) throw invalidArgument('hostPath', 'must be an absolute host path');
    const files = await this.fs();
    // The host side is trusted and followed as given, as CopyFromHost follows it; the packer
    // itself opens directories without following, so it gets the resolved path.
    const tree = await realpath(hostPath)
      .then(async (real) => ((await hostStat(real)).isDirectory() ? DirHandle.openHostDir(real) : undefined))
      .catch((err: unknown) => {
        const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
        throw new SbxError(missing ? 'not_found' : 'internal', `cannot archive ${hostPath}: ${(err as Error).message}`, {
          cause: err,
          details: { field: 'hostPath' },
        });
      });
    if (!tree) return files.copyFromHost(hostPath, destPath);
    // The library has no public host-tree packer; its workspace exporter walks any directory by fd.
    const archive = packTree(tree);
    try {
      await files.importTar(destPath ?? basename(hostPath), archive);
    } finally {
      archive.destroy();
    }
  }
}

export function toWorkspaceInfo(w: Workspace): WorkspaceInfo {
  return { id: w.id, name: w.name, owner: w.owner, node: w.node, labels: w.labels, created_at: w.createdAt, updated_at: w.updatedAt };
}
