/**
 * Tar archives of workspace trees. Export walks by fds and never follows a symlink; import
 * validates every entry and writes through the same contained walk into a staging directory.
 */
import type { Stats } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { Readable, finished } from 'node:stream';
import * as tar from 'tar-stream';
import { SbxError, invalidArgument } from '../errors.js';
import { createHardLinkAtomic, createSymlinkAtomic, writeFileAtomic } from './atomic-write.js';
import { openDirAt, type DirHandle } from './contained-path.js';
import { errnoOf, toWorkspaceError } from './fs-errors.js';
import type { FileOwner, ImportResult } from './types.js';
import { walkTree } from './tree-walk.js';
import { formatWorkspacePath, parseWorkspacePath, symlinkStaysInside } from './workspace-path.js';

const CHUNK_BYTES = 64 * 1024;

type TarHeader = Partial<tar.Header> & { name: string };
type TarEntry = tar.Extract extends AsyncIterable<infer Entry> ? Entry : never;
type TarSink = ReturnType<tar.Pack['entry']>;

/**
 * A tar stream of everything below `dir` (which the stream owns and closes). Regular files are
 * stored with their content (a hard-linked file as a plain copy), directories as directories,
 * symlinks as symlink entries only when their target stays inside the archived tree (others are
 * omitted, so every export is importable and no consumer is pointed outside). Devices, FIFOs and
 * sockets are omitted. A file that shrinks while it is read is padded with zeros, one that grows
 * is cut at the size it had when opened.
 *
 * @example
 * const archive = packTree(await openDirAt(root, ['src'], { display: 'src', action: 'export' }));
 * await pipeline(archive, fs.createWriteStream('/tmp/src.tar'));
 */
export function packTree(dir: DirHandle): Readable {
  const pack = tar.pack();
  // Settles when the reader goes away (or the pack ends), so no wait below can hang holding fds.
  const closed = new Promise<never>((_, reject) => {
    pack.once('close', () => reject(new Error('tar stream closed')));
  });
  closed.catch(() => undefined);
  const untilClosed = <T>(work: Promise<T>): Promise<T> => Promise.race([work, closed]);
  void (async () => {
    try {
      for await (const entry of walkTree(dir)) {
        if (pack.destroyed) return;
        const name = formatWorkspacePath(entry.path);
        const common = { mode: entry.stat.mode & 0o7777, mtime: entry.stat.mtime, uid: entry.stat.uid, gid: entry.stat.gid };
        if (entry.stat.isDirectory()) {
          await untilClosed(addEntry(pack, { ...common, name: `${name}/`, type: 'directory' }));
        } else if (entry.stat.isSymbolicLink()) {
          const target = await entry.parent.readlink(entry.name).catch(() => undefined);
          if (target === undefined || !symlinkStaysInside(entry.path.slice(0, -1), target)) continue;
          await untilClosed(addEntry(pack, { ...common, name, type: 'symlink', linkname: target }));
        } else if (entry.stat.isFile()) {
          await addFile(pack, entry.parent, entry.name, name, common, untilClosed);
        }
      }
      pack.finalize();
    } catch (err) {
      if (!pack.destroyed) pack.destroy(err instanceof Error ? err : new Error(String(err)));
    } finally {
      await dir.close();
    }
  })();
  return toNodeReadable(pack);
}

/**
 * tar-stream is built on streamx; callers get a real Node Readable with backpressure, whose
 * destruction (a reader giving up early) destroys the pack and so ends the producer.
 */
function toNodeReadable(pack: tar.Pack): Readable {
  const out = new Readable({
    read() {
      pack.resume();
    },
    destroy(err, callback) {
      pack.destroy();
      callback(err);
    },
  });
  pack.on('data', (chunk: unknown) => {
    if (!out.push(chunk)) pack.pause();
  });
  pack.on('end', () => out.push(null));
  pack.on('error', (err: Error) => out.destroy(err));
  return out;
}

function addEntry(pack: tar.Pack, header: TarHeader): Promise<void> {
  return new Promise((resolve, reject) => {
    pack.entry(header, (err) => (err ? reject(err) : resolve()));
  });
}

async function addFile(
  pack: tar.Pack,
  parent: DirHandle,
  name: string,
  display: string,
  common: Omit<TarHeader, 'name'>,
  untilClosed: <T>(work: Promise<T>) => Promise<T>,
): Promise<void> {
  let opened: { file: FileHandle; stat: Stats };
  try {
    opened = await parent.openRegularFile(name, display, 'export');
  } catch {
    return; // swapped for something else since the walk saw it: leave it out
  }
  const { file, stat } = opened;
  try {
    await untilClosed(
      new Promise<void>((resolve, reject) => {
        const header: TarHeader = { ...common, name: display, type: 'file', size: stat.size, mode: stat.mode & 0o7777, mtime: stat.mtime };
        const sink = pack.entry(header, (err) => (err ? reject(err) : resolve()));
        copyExactly(file, stat.size, sink, untilClosed).catch(reject);
      }),
    );
  } finally {
    await file.close();
  }
}

async function copyExactly(file: FileHandle, size: number, sink: TarSink, untilClosed: <T>(work: Promise<T>) => Promise<T>): Promise<void> {
  let offset = 0;
  while (offset < size) {
    const want = Math.min(CHUNK_BYTES, size - offset);
    const buffer = Buffer.alloc(want);
    const { bytesRead } = await file.read(buffer, 0, want, offset);
    // bytesRead 0 = the file shrank; the zeros of the fresh buffer pad it.
    const chunk = bytesRead === 0 ? buffer : buffer.subarray(0, bytesRead);
    offset += chunk.byteLength;
    if (!sink.write(chunk)) await untilClosed(new Promise<void>((resolve) => sink.once('drain', () => resolve())));
  }
  sink.end(undefined);
}

/**
 * How `extractTar` writes.
 *
 * @example
 * const opts: ExtractOptions = { owner: { uid: 1000, gid: 1000 }, onBytes: (n) => reservation.add(n) };
 */
export interface ExtractOptions {
  owner?: FileOwner | undefined;
  onBytes?: ((bytes: number) => void) | undefined;
}

/**
 * Extracts a tar stream into `into` (a staging directory). Refused with `invalid_argument`
 * (nothing outside `into` is ever touched): entry paths that are absolute or climb out with `..`,
 * symlinks whose target is absolute or climbs out of the archive, hard links to anything but an
 * earlier regular file of the same archive, device/FIFO entries, and any entry whose path goes
 * through a symlink (including one created earlier in the same archive). A truncated or
 * unreadable archive is `invalid_argument` (field `tar`).
 *
 * @example
 * await using stage = await StagedTree.create(stagingPath);
 * const { entries } = await extractTar(fs.createReadStream('a.tar'), stage.dir, {});
 */
export async function extractTar(source: NodeJS.ReadableStream, into: DirHandle, opts: ExtractOptions): Promise<ImportResult> {
  const extract = tar.extract();
  // finished(), not on('error'): a source that already failed or closed before this call (a client
  // gone while the staging area was made) must fail the extraction too, not leave it waiting forever.
  const stopWatching = finished(source, (err) => {
    if (err) extract.destroy(err);
  });
  source.pipe(extract as unknown as NodeJS.WritableStream);
  const result: ImportResult = { entries: 0, bytes: 0 };
  try {
    for await (const entry of extract) {
      try {
        result.bytes += await extractEntry(entry, into, opts);
      } finally {
        entry.resume();
      }
      result.entries += 1;
    }
    return result;
  } catch (err) {
    extract.destroy();
    if (err instanceof SbxError) throw err;
    // Anything else came from parsing or from the source stream: the caller's archive is bad.
    throw new SbxError('invalid_argument', `tar: cannot read the archive: ${err instanceof Error ? err.message : String(err)}`, {
      cause: err,
      details: { field: 'tar' },
    });
  } finally {
    stopWatching();
    if (typeof (source as Readable).destroy === 'function' && !(source as Readable).readableEnded) (source as Readable).destroy();
  }
}

async function extractEntry(entry: TarEntry, into: DirHandle, opts: ExtractOptions): Promise<number> {
  const header = entry.header;
  const components = parseWorkspacePath(header.name.replace(/\/+$/, ''), 'path');
  const display = formatWorkspacePath(components);
  const mode = (header.mode ?? 0o644) & 0o777;
  const type = header.type ?? 'file';
  if (components.length === 0) {
    if (type === 'directory') return 0; // the archive's own root, "./"
    throw invalidArgument('path', `tar entry ${JSON.stringify(header.name)} has no name`);
  }
  const parentPath = components.slice(0, -1);
  const name = components.at(-1) as string;
  const walk = { display, action: 'import', create: { mode: 0o755, owner: opts.owner } };
  try {
    switch (type) {
      case 'directory': {
        const dir = await openDirAt(into, components, { ...walk, create: { mode: mode | 0o700, owner: opts.owner } });
        await dir.close();
        return 0;
      }
      case 'file':
      case 'contiguous-file': {
        const parent = await openDirAt(into, parentPath, walk);
        try {
          return await writeFileAtomic(parent, name, entry as AsyncIterable<Uint8Array>, {
            mode,
            owner: opts.owner,
            mtime: header.mtime,
            onBytes: opts.onBytes,
          });
        } finally {
          await parent.close();
        }
      }
      case 'symlink': {
        const target = header.linkname ?? '';
        if (!symlinkStaysInside(parentPath, target)) {
          throw invalidArgument('path', `tar entry ${JSON.stringify(display)} is a symlink to ${JSON.stringify(target)}, which points outside the archive`);
        }
        const parent = await openDirAt(into, parentPath, walk);
        try {
          await createSymlinkAtomic(parent, name, target, opts.owner);
        } finally {
          await parent.close();
        }
        return 0;
      }
      case 'link':
        await extractHardLink(into, header.linkname ?? '', parentPath, name, display, walk);
        return 0;
      default:
        throw invalidArgument(
          'path',
          `tar entry ${JSON.stringify(display)} has unsupported type ${String(type)}; only files, directories, symlinks and hard links are imported`,
        );
    }
  } catch (err) {
    // System-call failures get their path; stream errors (a truncated entry) go up as they are.
    throw errnoOf(err) === undefined ? err : toWorkspaceError(err, display, 'import');
  }
}

async function extractHardLink(
  into: DirHandle,
  linkname: string,
  parentPath: string[],
  name: string,
  display: string,
  walk: { display: string; action: string; create: { mode: number; owner: FileOwner | undefined } },
): Promise<void> {
  let target: string[];
  try {
    target = parseWorkspacePath(linkname.replace(/\/+$/, ''), 'path');
  } catch {
    throw invalidArgument('path', `tar entry ${JSON.stringify(display)} is a hard link to ${JSON.stringify(linkname)}, which points outside the archive`);
  }
  const targetName = target.at(-1);
  if (targetName === undefined) throw invalidArgument('path', `tar entry ${JSON.stringify(display)} is a hard link without a target`);
  const notEarlierFile = invalidArgument(
    'path',
    `tar entry ${JSON.stringify(display)} is a hard link to ${JSON.stringify(linkname)}, which is not an earlier file of this archive`,
  );
  let targetParent: DirHandle;
  try {
    targetParent = await openDirAt(into, target.slice(0, -1), { display, action: 'import' });
  } catch (err) {
    if (err instanceof SbxError && err.code === 'not_found') throw notEarlierFile;
    throw err;
  }
  try {
    const stat = await targetParent.lstatIfExists(targetName);
    if (!stat?.isFile()) throw notEarlierFile;
    const parent = await openDirAt(into, parentPath, walk);
    try {
      await createHardLinkAtomic(targetParent, targetName, parent, name);
    } finally {
      await parent.close();
    }
  } finally {
    await targetParent.close();
  }
}
