/**
 * Files between this machine and a box or workspace as tar streams: a host tree packed with
 * tar-stream, an archive unpacked here with the checks a download from a box needs (no entry
 * leaves the target, none writes through a symlink the archive made), and a byte counter that
 * draws a progress line on a terminal.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { lstat, mkdir, readdir, readlink, rm, stat, symlink, chmod, utimes } from 'node:fs/promises';
import { join, posix, sep } from 'node:path';
import type { Readable } from 'node:stream';
import { PassThrough, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { SbxError } from '../errors.js';
import { formatBytes } from './output.js';

/** Bytes that pass, drawn as `label  12.3 MiB / 40 MiB  31%` on a terminal (stderr), at most 10 times a second. */
export class Progress {
  bytes = 0;
  private last = 0;
  private drawn = false;
  private readonly tty: boolean;

  constructor(
    private readonly label: string,
    private readonly total?: number,
    stream: { isTTY?: boolean } = process.stderr,
  ) {
    this.tty = stream.isTTY === true;
  }

  add(n: number): void {
    this.bytes += n;
    const now = Date.now();
    if (this.tty && now - this.last >= 100) {
      this.last = now;
      this.draw();
    }
  }

  private draw(): void {
    const pct = this.total ? `  ${Math.min(100, Math.floor((this.bytes / this.total) * 100))}%` : '';
    const of = this.total !== undefined ? ` / ${formatBytes(this.total)}` : '';
    process.stderr.write(`\r\x1b[2K${this.label}  ${formatBytes(this.bytes)}${of}${pct}`);
    this.drawn = true;
  }

  /** The final line on a terminal; nothing otherwise (the data went where it was asked to). */
  done(): void {
    if (!this.tty) return;
    this.draw();
    if (this.drawn) process.stderr.write('\n');
  }

  counter(): Transform {
    return new Transform({
      transform: (chunk: Buffer, _enc, cb) => {
        this.add(chunk.length);
        cb(null, chunk);
      },
    });
  }
}

/** Bytes of regular files under `path` (the progress total of an upload). */
export async function treeSize(path: string): Promise<number> {
  const st = await lstat(path);
  if (st.isFile()) return st.size;
  if (!st.isDirectory()) return 0;
  let sum = 0;
  for (const name of await readdir(path)) sum += await treeSize(join(path, name));
  return sum;
}

/**
 * `path` (a file or a directory tree) as a tar stream whose entries start with `top`, or sit
 * at the root with `top` empty. Directories, regular files and symlinks; other kinds are left out.
 */
export function packHost(path: string, top: string, progress?: Progress): Readable {
  const pack = tar.pack();
  const out = new PassThrough();
  const add = (header: Partial<tar.Header> & { name: string }, body?: Readable): Promise<void> =>
    new Promise((resolve, reject) => {
      const entry = pack.entry(header as tar.Header, (err) => (err ? reject(err) : resolve()));
      if (body) {
        body.on('data', (c: Buffer) => progress?.add(c.length));
        body.on('error', reject);
        body.pipe(entry);
      }
    });
  const walk = async (abs: string, name: string, first: boolean): Promise<void> => {
    // The path given on the command line is followed if it is a symlink, as cp does; those inside are kept as links.
    const st = first ? await stat(abs) : await lstat(abs);
    const common = { mode: st.mode & 0o7777, mtime: st.mtime };
    if (st.isDirectory()) {
      if (name) await add({ ...common, name: `${name}/`, type: 'directory' });
      for (const child of (await readdir(abs)).sort()) await walk(join(abs, child), name ? `${name}/${child}` : child, false);
    } else if (st.isSymbolicLink()) {
      await add({ ...common, name, type: 'symlink', linkname: await readlink(abs) });
    } else if (st.isFile()) {
      await add({ ...common, name, type: 'file', size: st.size }, createReadStream(abs));
    }
  };
  void walk(path, top, true).then(
    () => pack.finalize(),
    (err: Error) => pack.destroy(err),
  );
  // tar-stream is a streamx stream; a Node PassThrough gives callers ordinary backpressure and errors.
  pack.on('error', (err: Error) => out.destroy(err));
  pack.on('data', (chunk: unknown) => {
    if (!out.write(chunk as Buffer)) {
      pack.pause();
      out.once('drain', () => pack.resume());
    }
  });
  pack.on('end', () => out.end());
  return out;
}

export interface ExtractOptions {
  /** Entries start with one top-level name, which becomes `target` (a box's `tar -c NAME`); else entries go inside `target`. */
  renameTop?: boolean;
  progress?: Progress;
}

/** Unpacks a tar stream at `target` on this machine; resolves with the entries written. */
export async function extractHost(source: Readable, target: string, opts: ExtractOptions = {}): Promise<number> {
  const extract = tar.extract();
  const links = new Set<string>();
  let entries = 0;
  if (!opts.renameTop) await mkdir(target, { recursive: true });
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (header, body, next) => {
      void (async () => {
        const local = localPath(header.name, target, opts.renameTop === true);
        if (local === undefined) return body.resume();
        for (const link of links) if (local.startsWith(link + sep)) throw unsafe(header.name, 'it lies under a symlink of the archive');
        const mode = (header.mode ?? 0o644) & 0o7777;
        if (header.type === 'directory') {
          await mkdir(local, { recursive: true });
          await chmod(local, mode | 0o700);
          body.resume();
        } else if (header.type === 'file' || header.type === 'contiguous-file') {
          await rm(local, { force: true });
          const out = createWriteStream(local, { mode });
          if (opts.progress) await pipeline(body, opts.progress.counter(), out);
          else await pipeline(body, out);
          await chmod(local, mode);
        } else if (header.type === 'symlink') {
          await rm(local, { force: true, recursive: true });
          await symlink(header.linkname ?? '', local);
          links.add(local);
          body.resume();
        } else {
          // Devices, FIFOs, hard links: nothing a copy of files needs.
          body.resume();
          return;
        }
        entries++;
        if (header.mtime && header.type !== 'symlink') await utimes(local, header.mtime, header.mtime).catch(() => undefined);
      })().then(() => next(), reject);
    });
    extract.on('finish', resolve);
    extract.on('error', reject);
  });
  source.on('error', (err) => extract.destroy(err));
  source.pipe(extract as unknown as NodeJS.WritableStream);
  await done;
  return entries;
}

function unsafe(name: string, why: string): SbxError {
  return new SbxError('invalid_argument', `refusing archive entry '${name}': ${why}`, { details: { field: 'archive', entry: name } });
}

function localPath(name: string, target: string, renameTop: boolean): string | undefined {
  if (name.startsWith('/')) throw unsafe(name, 'the path is absolute');
  const norm = posix.normalize(name).replace(/\/+$/, '');
  if (norm === '..' || norm.startsWith('../')) throw unsafe(name, 'it leaves the target');
  const parts = norm === '.' || norm === '' ? [] : norm.split('/');
  if (renameTop) {
    if (parts.length === 0) return undefined;
    parts.shift();
  }
  return parts.length === 0 ? target : join(target, ...parts);
}
