/**
 * What envd's filesystem surfaces (the Filesystem service and the /files routes) act on: the
 * box's filesystem as the requesting user, and that user's home directory, which relative
 * paths are resolved against (envd's rule; the SDK sends paths as the user wrote them).
 */
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import type { BoxEntryDetails, BoxWriteOptions } from '../../../sandbox/box-fs.js';
import type { DirEntry, FileContent, FileStat } from '../../../workspace/types.js';

/** The part of the box filesystem (`box.files()`) that envd uses. */
export interface EnvdFiles {
  readFile(path: string, encoding: BufferEncoding): Promise<string>;
  createReadStream(path: string): Promise<Readable>;
  writeFile(path: string, data: FileContent | Readable, options?: BoxWriteOptions): Promise<void>;
  readDir(path: string, options?: { recursive?: boolean; details?: boolean }): Promise<(DirEntry & Partial<BoxEntryDetails>)[]>;
  stat(path: string, options?: { details?: boolean }): Promise<FileStat & Partial<BoxEntryDetails>>;
  exists(path: string): Promise<boolean>;
  mkdirAll(path: string, mode?: number): Promise<void>;
  removeAll(path: string): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  /** `ready` settles once the watch is in place: changes before it are not reported. */
  watch(path: string, options?: { recursive?: boolean; signal?: AbortSignal }): AsyncIterable<WatchEventLike> & { readonly ready: Promise<void> };
}

export interface WatchEventLike {
  type: 'create' | 'write' | 'remove' | 'rename' | 'chmod';
  name: string;
  isDir?: boolean;
}

export interface UserFS {
  boxId: string;
  files: EnvdFiles;
  /** The box's files as root: envd's uploads, which hand what they create to `user` (as E2B's envd, which runs as root). */
  rootFiles: EnvdFiles;
  user: string;
  home: string;
}

/** Absolute box path of `path` for this user: `~`, `~/x` and relative paths are under the home. */
export function resolveUserPath(home: string, path: string): string {
  if (path === '' || path === '~') return home;
  if (path.startsWith('~/')) return posix.join(home, path.slice(2));
  return posix.resolve(home, path);
}
