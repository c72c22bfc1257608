/**
 * Atomic creation of directory entries inside an open directory: content goes to an exclusive
 * temp file beside the target, is fsynced, then renamed over the target, and the directory is
 * fsynced. Readers see the old entry or the new one, never a half-written file.
 */
import type { FileHandle } from 'node:fs/promises';
import type { DirHandle } from './contained-path.js';
import { tempName } from './temp-names.js';
import type { FileContent, FileOwner } from './types.js';

/**
 * Options of `writeFileAtomic`.
 *
 * @example
 * const opts: AtomicWriteOptions = { mode: 0o644, onBytes: (n) => reservation.add(n) };
 */
export interface AtomicWriteOptions {
  mode: number;
  owner?: FileOwner | undefined;
  mtime?: Date | undefined;
  /** Called before each chunk is written, with its size; throwing aborts the write cleanly. */
  onBytes?: ((bytes: number) => void) | undefined;
}

/**
 * Writes `content` as `name` in `dir` atomically and returns the bytes written. A Readable or
 * other async iterable is consumed one chunk at a time, so memory stays bounded.
 *
 * @example
 * await using parent = await openDirAt(root, ['docs'], { display: 'docs/a.md', action: 'write' });
 * await writeFileAtomic(parent, 'a.md', '# hello\n', { mode: 0o644 });
 */
export async function writeFileAtomic(dir: DirHandle, name: string, content: FileContent, opts: AtomicWriteOptions): Promise<number> {
  const temp = tempName();
  const file = await dir.createExclusive(temp, 0o600);
  let bytes = 0;
  try {
    try {
      bytes = await writeContent(file, content, opts.onBytes);
      if (opts.owner) await file.chown(opts.owner.uid, opts.owner.gid);
      await file.chmod(opts.mode);
      if (opts.mtime) await file.utimes(opts.mtime, opts.mtime);
      await file.sync();
    } finally {
      await file.close();
    }
    await dir.rename(temp, dir, name);
  } catch (err) {
    await dir.unlink(temp).catch(() => undefined);
    throw err;
  }
  await dir.sync();
  return bytes;
}

/**
 * Creates (or replaces) `name` in `dir` as a symlink to `target`, atomically. The target is
 * stored, never resolved.
 *
 * @example
 * await createSymlinkAtomic(dir, 'current', 'releases/v2');
 */
export async function createSymlinkAtomic(dir: DirHandle, name: string, target: string, owner?: FileOwner): Promise<void> {
  const temp = tempName();
  await dir.symlink(target, temp);
  try {
    if (owner) await dir.lchown(temp, owner);
    await dir.rename(temp, dir, name);
  } catch (err) {
    await dir.unlink(temp).catch(() => undefined);
    throw err;
  }
}

/**
 * Creates (or replaces) `toName` in `to` as a hard link of `name` in `from`, atomically.
 *
 * @example
 * await createHardLinkAtomic(stage, 'a.txt', stage, 'b.txt');
 */
export async function createHardLinkAtomic(from: DirHandle, name: string, to: DirHandle, toName: string): Promise<void> {
  const temp = tempName();
  await from.link(name, to, temp);
  try {
    await to.rename(temp, to, toName);
  } catch (err) {
    await to.unlink(temp).catch(() => undefined);
    throw err;
  }
}

async function writeContent(file: FileHandle, content: FileContent, onBytes: ((bytes: number) => void) | undefined): Promise<number> {
  if (typeof content === 'string' || content instanceof Uint8Array) {
    const buffer = typeof content === 'string' ? Buffer.from(content) : content;
    onBytes?.(buffer.byteLength);
    await writeAll(file, buffer);
    return buffer.byteLength;
  }
  let bytes = 0;
  for await (const chunk of content) {
    const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    onBytes?.(buffer.byteLength);
    await writeAll(file, buffer);
    bytes += buffer.byteLength;
  }
  return bytes;
}

async function writeAll(file: FileHandle, buffer: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < buffer.byteLength) {
    const { bytesWritten } = await file.write(buffer, offset, buffer.byteLength - offset);
    offset += bytesWritten;
  }
}
