/**
 * Copies of whole trees into a (staging) directory: from inside a workspace, walked by fds, or
 * from the host, which is trusted. Symlinks are copied as symlinks (their target text, never
 * followed); devices, FIFOs and sockets are skipped.
 */
import { createReadStream } from 'node:fs';
import { lstat, readdir, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { FileHandle } from 'node:fs/promises';
import { createSymlinkAtomic, writeFileAtomic } from './atomic-write.js';
import { openDirAt, type DirHandle } from './contained-path.js';
import type { FileOwner } from './types.js';
import { walkTree } from './tree-walk.js';
import { formatWorkspacePath } from './workspace-path.js';

const CHUNK_BYTES = 64 * 1024;

/**
 * How trees are written.
 *
 * @example
 * const opts: CopyOptions = { owner: undefined, onBytes: (n) => reservation.add(n) };
 */
export interface CopyOptions {
  owner?: FileOwner | undefined;
  onBytes?: ((bytes: number) => void) | undefined;
}

/**
 * Reads an open file from its start in bounded chunks.
 *
 * @example
 * await writeFileAtomic(dir, 'copy.bin', fileChunks(file), { mode: 0o644 });
 */
export async function* fileChunks(file: FileHandle): AsyncGenerator<Uint8Array> {
  let position = 0;
  for (;;) {
    const buffer = Buffer.allocUnsafe(CHUNK_BYTES);
    const { bytesRead } = await file.read(buffer, 0, CHUNK_BYTES, position);
    if (bytesRead === 0) return;
    position += bytesRead;
    yield buffer.subarray(0, bytesRead);
  }
}

/**
 * Copies everything below workspace directory `source` into `into`, keeping names and modes.
 *
 * @example
 * await using stage = await StagedTree.create(stagingPath);
 * await copyTreeInto(srcDir, stage.dir, { owner });
 */
export async function copyTreeInto(source: DirHandle, into: DirHandle, opts: CopyOptions): Promise<void> {
  for await (const entry of walkTree(source)) {
    const display = formatWorkspacePath(entry.path);
    const mode = entry.stat.mode & 0o777;
    if (entry.stat.isDirectory()) {
      await (await openDirAt(into, entry.path, { display, action: 'copy', create: { mode: mode | 0o700, owner: opts.owner } })).close();
      continue;
    }
    if (!entry.stat.isFile() && !entry.stat.isSymbolicLink()) continue;
    const parent = await openDirAt(into, entry.path.slice(0, -1), { display, action: 'copy', create: { mode: 0o755, owner: opts.owner } });
    try {
      if (entry.stat.isSymbolicLink()) {
        await createSymlinkAtomic(parent, entry.name, await entry.parent.readlink(entry.name), opts.owner);
        continue;
      }
      const { file } = await entry.parent.openRegularFile(entry.name, display, 'copy');
      try {
        await writeFileAtomic(parent, entry.name, fileChunks(file), { mode, owner: opts.owner, onBytes: opts.onBytes });
      } finally {
        await file.close();
      }
    } finally {
      await parent.close();
    }
  }
}

/**
 * Copies host directory `hostDir` (trusted: any path the caller may name) into `into`.
 *
 * @example
 * await copyHostTreeInto('/srv/templates/node', stage.dir, { owner });
 */
export async function copyHostTreeInto(hostDir: string, into: DirHandle, opts: CopyOptions, prefix: string[] = []): Promise<void> {
  for (const name of (await readdir(hostDir)).sort()) {
    const hostPath = join(hostDir, name);
    const stat = await lstat(hostPath);
    const path = [...prefix, name];
    const display = formatWorkspacePath(path);
    if (stat.isDirectory()) {
      await (await openDirAt(into, path, { display, action: 'copy', create: { mode: (stat.mode & 0o777) | 0o700, owner: opts.owner } })).close();
      await copyHostTreeInto(hostPath, into, opts, path);
      continue;
    }
    if (!stat.isFile() && !stat.isSymbolicLink()) continue;
    const parent = await openDirAt(into, prefix, { display, action: 'copy', create: { mode: 0o755, owner: opts.owner } });
    try {
      if (stat.isSymbolicLink()) await createSymlinkAtomic(parent, name, await readlink(hostPath), opts.owner);
      else await writeFileAtomic(parent, name, createReadStream(hostPath), { mode: stat.mode & 0o777, owner: opts.owner, onBytes: opts.onBytes });
    } finally {
      await parent.close();
    }
  }
}
