/**
 * HostWorkspaceFS: the WorkspaceFS of a workspace on this machine's disk, file I/O that cannot
 * leave its root. Every call parses its path
 * lexically (workspace-path.ts) and then reaches it by the fd walk of contained-path.ts, so
 * neither `..` nor a symlink or a directory swapped by a box mid-call can take it outside.
 */
import { createReadStream as createHostReadStream, type Stats } from 'node:fs';
import { stat as hostStat } from 'node:fs/promises';
import { basename, isAbsolute } from 'node:path';
import { Readable } from 'node:stream';
import { SbxError, existsBy, invalidArgument, isMissingPath } from '../errors.js';
import { createSymlinkAtomic, writeFileAtomic } from './atomic-write.js';
import { DirHandle, openDirAt, type CreateDirs } from './contained-path.js';
import { errnoOf, toWorkspaceError } from './fs-errors.js';
import { ReadDirOptionsSchema, WriteFileOptionsSchema, fileMode } from './schemas.js';
import { parseOrThrow } from '../util/validation.js';
import { decodeBase64 } from './validation.js';
import { UsageTracker, type Reservation } from './quota.js';
import { StagedTree, mergeTree } from './staging.js';
import { extractTar, packTree } from './tar.js';
import { copyHostTreeInto, copyTreeInto, fileChunks } from './tree-copy.js';
import { removeTree, toDirEntry, walkTree } from './tree-walk.js';
import type { DirEntry, FileContent, FileOwner, FileStat, ImportResult, ReadDirOptions, WorkspaceFS, WorkspaceUsage, WriteFileOptions } from './types.js';
import { formatWorkspacePath, parseEntryPath, parseWorkspacePath } from './workspace-path.js';

export type { WorkspaceFS } from './types.js';

const DEFAULT_FILE_MODE = 0o644;
const DEFAULT_DIR_MODE = 0o755;

/**
 * Where a workspace lives on the host and how it is written. Built by WorkspaceManager.
 *
 * @example
 * new HostWorkspaceFS({ id: 'ws-1', rootPath: layout.root('local', 'ws-1'), stagingPath: layout.staging('local', 'ws-1') });
 */
export interface HostWorkspaceFSOptions {
  id: string;
  /** Host path of the directory boxes mount. */
  rootPath: string;
  /** Host-private scratch directory on the same filesystem as the root. */
  stagingPath: string;
  /** Owner of what this FS creates; applied only when the process runs as root. */
  fileOwner?: FileOwner | undefined;
  quotaBytes?: number | undefined;
}

type Entry = { parent: DirHandle; name: string; display: string };

/**
 * Root-contained file I/O on one workspace in a host directory (the WorkspaceFS of host nodes). Paths are relative to the workspace root and use
 * `/`; '' and '.' are the root. Symlinks are never followed: as a final component they are
 * reported (stat, readDir) or replaced/removed as themselves, as an intermediate component they
 * make the call fail with `invalid_argument`. Operations that create something create missing
 * parent directories.
 *
 * @example
 * const ws = await manager.fs('ws-1');
 * await ws.writeFile('src/main.ts', 'console.log(1)\n');
 * console.log(await ws.readFile('src/main.ts', 'utf8'));
 * for (const e of await ws.readDir('', { recursive: true })) console.log(e.name);
 */
export class HostWorkspaceFS implements WorkspaceFS {
  readonly id: string;
  private readonly owner: FileOwner | undefined;
  private readonly tracker: UsageTracker;

  constructor(private readonly options: HostWorkspaceFSOptions) {
    this.id = options.id;
    this.owner = process.getuid?.() === 0 ? options.fileOwner : undefined;
    this.tracker = new UsageTracker(() => this.measure(), options.quotaBytes || undefined, options.id);
  }

  /**
   * Whole file content.
   *
   * @example
   * const bytes = await ws.readFile('logo.png');
   * const text = await ws.readFile('README.md', 'utf8');
   */
  readFile(path: string): Promise<Buffer>;
  readFile(path: string, encoding: BufferEncoding): Promise<string>;
  async readFile(path: string, encoding?: BufferEncoding): Promise<Buffer | string> {
    return this.atEntry(path, 'read', false, async ({ parent, name, display }) => {
      const data = await parent.readRegularFile(name, display, 'read');
      return encoding ? data.toString(encoding) : data;
    });
  }

  /**
   * A stream of a (large) file, read with bounded memory. Errors resolving the path reject the
   * promise; the stream itself only fails on I/O errors.
   *
   * @example
   * await pipeline(await ws.createReadStream('data.bin'), res);
   */
  async createReadStream(path: string): Promise<Readable> {
    return this.atEntry(path, 'read', false, async ({ parent, name, display }) => {
      const { file } = await parent.openRegularFile(name, display, 'read');
      return file.createReadStream({ highWaterMark: 64 * 1024 });
    });
  }

  /**
   * Writes a file atomically (temp file, fsync, rename): readers and boxes see the old content
   * or the new, never a mix. A Readable (any async iterable) is streamed with bounded memory.
   * Replacing a symlink replaces the link itself. Throws `quota_exceeded` (leaving the old file)
   * when the workspace's quota would be passed.
   *
   * @example
   * await ws.writeFile('notes.txt', 'hello');
   * await ws.writeFile('big.iso', fs.createReadStream('/srv/big.iso'), { mode: 0o600 });
   */
  async writeFile(path: string, data: FileContent | Readable, options: WriteFileOptions = {}): Promise<void> {
    const { mode } = parseOrThrow(WriteFileOptionsSchema, options, 'options');
    const requestedMode = mode === undefined ? undefined : checkMode(mode);
    if (typeof data !== 'string' && !(data instanceof Uint8Array) && !isAsyncIterable(data)) {
      throw invalidArgument('data', 'must be a string, a Uint8Array or a Readable');
    }
    await this.atEntry(path, 'write', true, (entry) => this.replaceFile(entry, data, requestedMode));
  }

  /**
   * Directory listing; symlinks are listed as themselves, never entered. With `recursive`, names
   * are paths relative to `path` and the walk never descends through a symlink.
   *
   * @example
   * const entries = await ws.readDir('src', { recursive: true });
   */
  async readDir(path: string, options: ReadDirOptions = {}): Promise<DirEntry[]> {
    parseOrThrow(ReadDirOptionsSchema, options, 'options');
    return this.atDir(path, 'list', undefined, async (dir) => {
      const entries: DirEntry[] = [];
      if (options.recursive) {
        for await (const entry of walkTree(dir)) entries.push(toDirEntry(formatWorkspacePath(entry.path), entry.stat));
        return entries;
      }
      for (const name of (await dir.list()).sort()) {
        const stat = await dir.lstatIfExists(name);
        if (stat) entries.push(toDirEntry(name, stat));
      }
      return entries;
    });
  }

  /**
   * Describes a path without following a final symlink (lstat). '' describes the root.
   *
   * @example
   * const { isDir, size, mtime } = await ws.stat('build');
   */
  async stat(path: string): Promise<FileStat> {
    const components = parseWorkspacePath(path);
    if (components.length === 0) {
      await using root = await this.openRoot('stat');
      return toFileStat('', await root.stat());
    }
    return this.atEntry(path, 'stat', false, async ({ parent, name }) => toFileStat(name, await parent.lstat(name)));
  }

  /**
   * Whether something (a symlink counts, dangling or not) exists at `path`. Still refuses
   * paths the policy refuses.
   *
   * @example
   * if (!(await ws.exists('package.json'))) await ws.writeFile('package.json', '{}');
   */
  exists(path: string): Promise<boolean> {
    return existsBy(this.stat(path));
  }

  /**
   * `mkdir -p`; an existing directory is fine, an existing non-directory is a `conflict`.
   *
   * @example
   * await ws.mkdirAll('a/b/c', 0o750);
   */
  async mkdirAll(path: string, mode: number = DEFAULT_DIR_MODE): Promise<void> {
    const create = { mode: checkMode(mode), owner: this.owner };
    await this.atDir(path, 'create directory', create, async () => undefined);
  }

  /**
   * Removes a file, a symlink (not its target) or an empty directory.
   *
   * @example
   * await ws.remove('old.log');
   */
  async remove(path: string): Promise<void> {
    await this.atEntry(path, 'remove', false, async ({ parent, name }) => {
      const stat = await parent.lstat(name);
      try {
        await parent.unlink(name);
      } catch (err) {
        if (errnoOf(err) !== 'EISDIR') throw err;
        await parent.rmdir(name);
      }
      if (stat.isFile() && stat.nlink === 1) this.tracker.adjust(-stat.size, -1);
    });
  }

  /**
   * `rm -rf`, walking by fds: never descends through a symlink, so nothing outside the root can
   * be deleted. A missing path is fine; the root itself is refused.
   *
   * @example
   * await ws.removeAll('node_modules');
   */
  async removeAll(path: string): Promise<void> {
    try {
      await this.atEntry(path, 'remove', false, async ({ parent, name }) => {
        const removed = await removeTree(parent, name);
        this.tracker.adjust(-removed.bytes, -removed.files);
      });
    } catch (err) {
      if (isMissingPath(err)) return;
      throw err;
    }
  }

  /**
   * Moves an entry within the workspace (rename(2) semantics: replaces a file, or an empty
   * directory with a directory). Symlinks move as themselves.
   *
   * @example
   * await ws.rename('draft.md', 'posts/final.md');
   */
  async rename(from: string, to: string): Promise<void> {
    const source = parseEntryPath(from);
    const target = parseEntryPath(to);
    const display = formatWorkspacePath(source.components);
    await using root = await this.openRoot('rename');
    await using fromDir = await openDirAt(root, source.parent, { display, action: 'rename' });
    await using toDir = await openDirAt(root, target.parent, { display: formatWorkspacePath(target.components), action: 'rename', create: this.dirCreate() });
    try {
      const replaced = await toDir.lstatIfExists(target.name);
      await fromDir.rename(source.name, toDir, target.name);
      if (replaced?.isFile() && replaced.nlink === 1) this.tracker.adjust(-replaced.size, -1);
      await toDir.sync();
    } catch (err) {
      throw toWorkspaceError(err, display, 'rename');
    }
  }

  /**
   * Copies a file, symlink (as a symlink) or directory tree within the workspace. A tree is
   * built in private staging first and merged into `to` (directories merge, files replace), so
   * a failure (quota) leaves nothing behind.
   *
   * @example
   * await ws.copy('template', 'projects/new');
   */
  async copy(from: string, to: string): Promise<void> {
    const source = parseEntryPath(from);
    const target = parseEntryPath(to);
    const display = formatWorkspacePath(source.components);
    await using root = await this.openRoot('copy');
    await using fromDir = await openDirAt(root, source.parent, { display, action: 'copy' });
    const stat = await fromDir.lstat(source.name).catch((err: unknown) => {
      throw toWorkspaceError(err, display, 'copy');
    });
    if (stat.isDirectory()) {
      await using tree = await fromDir.openDir(source.name).catch((err: unknown) => {
        throw toWorkspaceError(err, display, 'copy');
      });
      await this.stageAndMerge(root, target.components, 'copy', (stage, onBytes) => copyTreeInto(tree, stage, { owner: this.owner, onBytes }));
      return;
    }
    if (!stat.isFile() && !stat.isSymbolicLink()) {
      throw new SbxError('invalid_argument', `cannot copy ${JSON.stringify(display)}: not a file, directory or symlink`, {
        details: { field: 'path', path: display },
      });
    }
    await using toDir = await openDirAt(root, target.parent, { display: formatWorkspacePath(target.components), action: 'copy', create: this.dirCreate() });
    try {
      if (stat.isSymbolicLink()) {
        await createSymlinkAtomic(toDir, target.name, await fromDir.readlink(source.name), this.owner);
        return;
      }
      const { file } = await fromDir.openRegularFile(source.name, display, 'copy');
      try {
        await this.replaceFile({ parent: toDir, name: target.name, display: formatWorkspacePath(target.components) }, fileChunks(file), stat.mode & 0o777);
      } finally {
        await file.close();
      }
    } catch (err) {
      throw toWorkspaceError(err, display, 'copy');
    }
  }

  /**
   * Whole file content as base64.
   *
   * @example
   * const b64 = await ws.readFileBase64('logo.png');
   */
  async readFileBase64(path: string): Promise<string> {
    return (await this.readFile(path)).toString('base64');
  }

  /**
   * Writes base64-encoded content (validated strictly) like `writeFile`.
   *
   * @example
   * await ws.writeFileBase64('logo.png', b64, { mode: 0o644 });
   */
  async writeFileBase64(path: string, base64: string, options: WriteFileOptions = {}): Promise<void> {
    await this.writeFile(path, decodeBase64(base64), options);
  }

  /**
   * Copies a host file or directory tree into the workspace (`dest` defaults to its basename).
   * The host side is trusted and followed as given; symlinks inside a host tree are copied as
   * symlinks. The workspace side is contained like every other write.
   *
   * @example
   * await ws.copyFromHost('/srv/templates/node-app', 'app');
   */
  async copyFromHost(hostPath: string, dest?: string): Promise<void> {
    const stat = await statHostSource(hostPath);
    const destination = dest ?? basename(hostPath);
    if (stat.isDirectory()) {
      const components = parseWorkspacePath(destination);
      await using root = await this.openRoot('copy');
      await this.stageAndMerge(root, components, 'copy', (stage, onBytes) => copyHostTreeInto(hostPath, stage, { owner: this.owner, onBytes }));
      return;
    }
    if (!stat.isFile()) throw invalidArgument('hostPath', `${hostPath} is not a regular file or directory`);
    await this.atEntry(destination, 'write', true, (entry) => this.replaceFile(entry, createHostReadStream(hostPath), stat.mode & 0o777));
  }

  /**
   * A tar stream of directory `path` ('' = the whole workspace). Symlinks are stored as symlink
   * entries when their target stays inside the archived tree and left out otherwise; devices,
   * FIFOs and sockets are left out; hard-linked files are stored as plain files.
   *
   * @example
   * await pipeline(await ws.exportTar('src'), fs.createWriteStream('/tmp/src.tar'));
   */
  async exportTar(path: string): Promise<Readable> {
    const components = parseWorkspacePath(path);
    await using root = await this.openRoot('export');
    return packTree(await openDirAt(root, components, { display: formatWorkspacePath(components), action: 'export' }));
  }

  /**
   * Extracts a tar stream (or a whole archive in memory) into directory `dest` (created if missing), all or nothing: entries
   * are validated and written into private staging, then merged into place. Refused with
   * `invalid_argument`: paths that are absolute or leave `dest`, symlinks pointing outside the
   * archive, hard links to anything but an earlier file of the archive, device/FIFO entries.
   *
   * @example
   * const { entries } = await ws.importTar('vendor', fs.createReadStream('vendor.tar'));
   */
  async importTar(dest: string, tarStream: Readable | NodeJS.ReadableStream | Uint8Array): Promise<ImportResult> {
    const components = parseWorkspacePath(dest);
    const source = tarStream instanceof Uint8Array ? Readable.from([tarStream]) : tarStream;
    await using root = await this.openRoot('import');
    let result: ImportResult = { entries: 0, bytes: 0 };
    await this.stageAndMerge(root, components, 'import', async (stage, onBytes) => {
      result = await extractTar(source, stage, { owner: this.owner, onBytes });
    });
    return result;
  }

  /**
   * Bytes and files in the workspace now, by a fresh contained walk (box writes included).
   *
   * @example
   * const { bytes, files, quotaBytes } = await ws.usage();
   */
  usage(): Promise<WorkspaceUsage> {
    return this.tracker.measure();
  }

  private async measure(): Promise<{ bytes: number; files: number }> {
    await using root = await this.openRoot('measure');
    let bytes = 0;
    let files = 0;
    const linked = new Set<string>();
    for await (const { stat } of walkTree(root)) {
      if (!stat.isFile()) continue;
      files += 1;
      if (stat.nlink > 1) {
        const inode = `${stat.dev}:${stat.ino}`;
        if (linked.has(inode)) continue;
        linked.add(inode);
      }
      bytes += stat.size;
    }
    return { bytes, files };
  }

  /**
   * Atomically writes `content` as the entry, under the quota; a replaced file's size is
   * credited and, without `mode`, its mode kept.
   */
  private async replaceFile(entry: Entry, content: FileContent, mode: number | undefined): Promise<void> {
    const existing = await entry.parent.lstatIfExists(entry.name);
    if (existing?.isDirectory()) {
      throw new SbxError('invalid_argument', `cannot write ${JSON.stringify(entry.display)}: it is a directory`, {
        details: { field: 'path', path: entry.display },
      });
    }
    const replaced = existing?.isFile() ? existing : undefined;
    const finalMode = mode ?? (replaced ? replaced.mode & 0o777 : DEFAULT_FILE_MODE);
    await this.reserved(replaced && replaced.nlink === 1 ? replaced.size : 0, async (reservation) => {
      await writeFileAtomic(entry.parent, entry.name, content, { mode: finalMode, owner: this.owner, onBytes: reservation.add });
      reservation.commit({ filesAdded: replaced ? 0 : 1 });
    });
  }

  private async stageAndMerge(
    root: DirHandle,
    destination: string[],
    action: string,
    fill: (stage: DirHandle, onBytes: (bytes: number) => void) => Promise<void>,
  ): Promise<void> {
    const display = formatWorkspacePath(destination);
    await this.reserved(0, async (reservation) => {
      await using stage = await StagedTree.create(this.options.stagingPath);
      await fill(stage.dir, reservation.add);
      await using target = await openDirAt(root, destination, { display, action, create: this.dirCreate() });
      try {
        await mergeTree(stage.dir, target, display);
      } catch (err) {
        throw toWorkspaceError(err, display, action);
      }
      // Merges may replace files of unknown size: measure again at the next quota check.
      reservation.commit({ exact: false });
    });
  }

  private async reserved(creditBytes: number, write: (reservation: Reservation) => Promise<void>): Promise<void> {
    const reservation = await this.tracker.reserve(creditBytes);
    try {
      await write(reservation);
    } finally {
      reservation.release(); // no-op after commit
    }
  }

  private dirCreate(mode = DEFAULT_DIR_MODE): CreateDirs {
    return { mode, owner: this.owner };
  }

  private async openRoot(action: string): Promise<DirHandle> {
    try {
      return await DirHandle.openHostDir(this.options.rootPath);
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') throw new SbxError('not_found', `workspace ${this.id} not found (deleted?)`, { cause: err, details: { id: this.id } });
      throw toWorkspaceError(err, '', action);
    }
  }

  private async atEntry<T>(path: string, action: string, create: boolean, fn: (entry: Entry) => Promise<T>): Promise<T> {
    const { parent: parentPath, name, components } = parseEntryPath(path);
    const display = formatWorkspacePath(components);
    const root = await this.openRoot(action);
    let parent: DirHandle | undefined;
    try {
      // An entry at the root is reached through the root's own handle: a second one would cost
      // an open and a close for nothing.
      parent = parentPath.length === 0 ? root : await openDirAt(root, parentPath, { display, action, create: create ? this.dirCreate() : undefined });
      return await fn({ parent, name, display });
    } catch (err) {
      throw toWorkspaceError(err, display, action);
    } finally {
      // Done with both: the answer does not wait for their closes (a small read's time is a few
      // such round trips).
      parent?.release();
      root.release();
    }
  }

  private async atDir<T>(path: string, action: string, create: CreateDirs | undefined, fn: (dir: DirHandle) => Promise<T>): Promise<T> {
    const components = parseWorkspacePath(path);
    const display = formatWorkspacePath(components);
    await using root = await this.openRoot(action);
    await using dir = await openDirAt(root, components, { display, action, create });
    try {
      return await fn(dir);
    } catch (err) {
      throw toWorkspaceError(err, display, action);
    }
  }
}

/**
 * The host side of `copyFromHost`: an absolute path (trusted, followed as given), stat'ed;
 * `invalid_argument` or `not_found` on field `hostPath`.
 *
 * @example
 * if ((await statHostSource('/srv/app.tar')).isFile()) …
 */
export async function statHostSource(hostPath: unknown): Promise<Stats> {
  if (typeof hostPath !== 'string' || !isAbsolute(hostPath)) throw invalidArgument('hostPath', 'must be an absolute host path');
  return hostStat(hostPath).catch((err: unknown) => {
    throw new SbxError(errnoOf(err) === 'ENOENT' ? 'not_found' : 'internal', `cannot copy from host ${hostPath}: ${(err as Error).message}`, {
      cause: err,
      details: { field: 'hostPath' },
    });
  });
}

function toFileStat(name: string, stat: Stats): FileStat {
  return { ...toDirEntry(name, stat), isFile: stat.isFile() };
}

/** not_found about a path inside the workspace (not about the workspace itself). */
function checkMode(mode: unknown): number {
  // Permission bits only: no setuid/setgid/sticky on what the API writes.
  return parseOrThrow(fileMode, mode, 'mode') & 0o777;
}

function isAsyncIterable(value: unknown): value is AsyncIterable<Uint8Array | string> {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value;
}
