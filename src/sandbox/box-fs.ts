/**
 * BoxFS: files anywhere in a box (`box.files()`), with the workspace API's names and types. Every
 * call is one run of sbx's file tool inside the box (`<tool> fs <op> …`, agent/fs.go) through the
 * box's exec as the box user (or `user`), so the box's kernel applies that user's permissions:
 * nothing here decides who may touch what. Content streams both ways through the exec's stdin
 * and stdout; nothing is held whole. See docs/box-files.md.
 */
import { createInterface } from 'node:readline';
import { Transform, type Readable, type Writable } from 'node:stream';
import { SbxError, existsBy, invalidArgument } from '../errors.js';
import { userSpec } from '../runtime/bounds.js';
import type { ExecStream } from '../runtime/types.js';
import { parseOrThrow } from '../util/validation.js';
import { ReadDirOptionsSchema, WriteFileOptionsSchema, fileMode } from '../workspace/schemas.js';
import type { DirEntry, FileContent, FileStat, ReadDirOptions, WriteFileOptions } from '../workspace/types.js';
import { parseBoxEntryPath, parseBoxPath } from './box-path.js';
import { z } from 'zod';

/**
 * Options of `box.files()`.
 *
 * @example
 * const rootFiles = box.files({ user: 'root' });
 */
export interface BoxFilesOptions {
  /** Whose permissions the calls run with; default the box's user. */
  user?: string;
}

/**
 * One event of `BoxFS.watch`. `name` is relative to the watched path ('' is the path itself).
 *
 * @example
 * for await (const e of files.watch('/tmp/w')) if (e.type === 'write') console.log(e.name);
 */
export interface BoxWatchEvent {
  type: 'create' | 'write' | 'remove' | 'rename' | 'chmod';
  name: string;
  isDir?: boolean;
}

/**
 * Options of `BoxFS.watch`.
 *
 * @example
 * const ac = new AbortController(); files.watch('/app', { recursive: true, signal: ac.signal });
 */
export interface WatchOptions {
  /** Also every directory below the path (and those created later). */
  recursive?: boolean;
  /** Ends the watch: the iteration then finishes without an error. */
  signal?: AbortSignal;
}

/**
 * What `BoxFS.watch` returns: the events, and `ready`, which settles once the watch is in place
 * (changes before it are not reported) or rejects as the first `next()` would.
 *
 * @example
 * const w = files.watch('/tmp/w'); await w.ready; await files.writeFile('/tmp/w/a', 'x');
 */
export interface BoxWatch extends AsyncIterable<BoxWatchEvent> {
  readonly ready: Promise<void>;
}

/**
 * Options of `BoxFS.stat`.
 *
 * @example
 * const { owner } = await files.stat('/etc/hosts', { details: true });
 */
export interface BoxStatOptions {
  /** Adds the entry's details (BoxEntryDetails); the box's own BoxFS only, a remote one ignores it. */
  details?: boolean;
}

/**
 * Options of `BoxFS.readDir`.
 *
 * @example
 * await files.readDir('/home/user', { details: true });
 */
export interface BoxReadDirOptions extends ReadDirOptions, BoxStatOptions {}

const BoxStatOptionsSchema = z.object({ details: z.boolean().optional() }).strict();
const BoxReadDirOptionsSchema = ReadDirOptionsSchema.extend({ details: z.boolean().optional() }).strict();

/**
 * What `BoxFS.stat` and `readDir` add to an entry with `details: true` (what e2b's envd reports): owner
 * and group by name (the number when the box's /etc/passwd or /etc/group has none), a symlink's
 * resolved target with the type and permission bits of what it points at, and the file's
 * metadata (its `user.e2b.*` extended attributes, without the prefix).
 *
 * @example
 * const { owner, group, symlinkTarget } = await files.stat('/home/user/link', { details: true });
 */
export interface BoxEntryDetails {
  owner: string;
  group: string;
  /** Only for a symlink: its fully resolved target, or its own path when that cannot be resolved. */
  symlinkTarget?: string;
  /** Only for a symlink whose target exists: what that is. */
  targetType?: 'file' | 'dir' | 'other';
  targetMode?: number;
  metadata?: Record<string, string>;
}

/**
 * Options of `BoxFS.writeFile`: the workspace API's, and what envd's writes need.
 *
 * @example
 * await box.files({ user: 'root' }).writeFile('/opt/app/a.txt', 'x', { owner: 'user', metadata: { k: 'v' } });
 */
export interface BoxWriteOptions extends WriteFileOptions {
  /** Hands the file, and every parent directory the write creates (mode 0755), to this user (name or uid); needs a writer that may chown (root). */
  owner?: string;
  /** The file's metadata, kept as `user.e2b.<key>` extended attributes (keys lowercased); a replaced file's set is replaced whole. */
  metadata?: Record<string, string>;
}

const BoxWriteOptionsSchema = WriteFileOptionsSchema.extend({
  owner: userSpec.optional(),
  metadata: z
    .record(
      z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,200}$/, 'a key of 1-200 HTTP token characters'),
      z.string().regex(/^[\x20-\x7e]{0,4096}$/, 'printable ASCII, at most 4096 characters'),
    )
    .optional(),
}).strict();

/** What a BoxFS needs from its box: where the tool is, and the box's exec. */
export interface BoxFSHost {
  readonly boxId: string;
  /** The tool's in-box path; null when the box cannot have it. */
  tool(): Promise<string | null>;
  /** Starts a command as `user`; `hold` keeps the box in use until it exits. */
  run(cmd: string[], opts: { user?: string }, hold: boolean): Promise<ExecStream>;
}

export const BoxFilesOptionsSchema = z.object({ user: userSpec.optional() }).strict();
const WatchOptionsSchema = z.object({ recursive: z.boolean().optional(), signal: z.instanceof(AbortSignal).optional() }).strict();

/** Exit codes of the tool (agent/fs.go fsExitCodes), for when its error line is missing. */
const EXIT_CODES: Record<number, SbxError['code']> = {
  10: 'not_found',
  11: 'forbidden',
  12: 'conflict',
  13: 'invalid_argument',
  14: 'quota_exceeded',
  15: 'internal',
  16: 'cancelled',
};
const FRAME_BYTES = 256 * 1024;
const COMMIT = Buffer.alloc(4);

/**
 * The box's filesystem as one user. Paths are absolute box paths. As in the workspace API:
 * `stat` and `readDir` describe symlinks as themselves, recursive listings never descend
 * through one, writes are atomic (a temp file beside the target, renamed in) and create missing
 * parent directories. Unlike it, a symlink as an intermediate component is followed, as the
 * user's own programs would.
 *
 * @example
 * const files = box.files();
 * await files.writeFile('/home/sandbox/app.py', 'print(1)\n');
 * console.log(await files.readFile('/home/sandbox/app.py', 'utf8'));
 */
export class BoxFS {
  readonly user: string | undefined;

  constructor(
    private readonly host: BoxFSHost,
    options: BoxFilesOptions = {},
  ) {
    this.user = parseOrThrow(BoxFilesOptionsSchema, options, 'options').user;
  }

  /**
   * Whole file content.
   *
   * @example
   * const text = await files.readFile('/etc/os-release', 'utf8');
   */
  readFile(path: string): Promise<Buffer>;
  readFile(path: string, encoding: BufferEncoding): Promise<string>;
  async readFile(path: string, encoding?: BufferEncoding): Promise<Buffer | string> {
    const chunks: Buffer[] = [];
    for await (const chunk of await this.createReadStream(path)) chunks.push(chunk as Buffer);
    const data = Buffer.concat(chunks);
    return encoding ? data.toString(encoding) : data;
  }

  /**
   * A stream of a (large) file, read as the box sends it. A missing or unreadable file rejects
   * here; the stream fails only when the read fails midway. Destroying it ends the read.
   *
   * @example
   * await pipeline(await files.createReadStream('/var/log/app.log'), process.stdout);
   */
  async createReadStream(path: string): Promise<Readable> {
    const p = parseBoxPath(path);
    return this.streamOut(['read', p], p);
  }

  /**
   * Runs an operation that answers `{"ok":true,…}` and a newline, then streams bytes: its failure
   * before that line rejects; the stream ends only once the tool exited 0 (a failure midway is
   * the stream's error, not a short result); destroying the stream ends the operation.
   */
  protected async streamOut(args: string[], p: string): Promise<Readable> {
    const s = await this.start(args, true);
    s.stdin.end();
    const stderr = text(s.stderr);
    const header = await headerLine(s.stdout);
    if (header === undefined || !isOk(header)) {
      const code = await s.wait();
      throw this.failure(code, await stderr, p);
    }
    const exited = s.wait();
    // The end is held back until the tool exited 0: a read that failed midway is an error, not a short file.
    const out = new Transform({
      transform: (chunk, _enc, cb) => cb(null, chunk),
      flush: (cb) => {
        exited.then(
          (code) => cb(code === 0 ? null : this.failure(code, '', p)),
          (err: unknown) => cb(err as Error),
        );
      },
    });
    s.stdout.on('error', (err) => out.destroy(err));
    out.on('close', () => {
      if (!out.writableFinished) void s.cancel().catch(() => undefined);
    });
    return s.stdout.pipe(out);
  }

  /**
   * Writes a file atomically, streamed with bounded memory: a temp file beside `path` is filled
   * and renamed in, so readers see the old content or the new, never a part. A source that fails
   * midway leaves the old file as it was. Missing parent directories are created. Without `mode`
   * a replaced file keeps its mode (and, written by root, its owner), a new one gets 0o644.
   *
   * @example
   * await files.writeFile('/tmp/big.bin', fs.createReadStream('big.bin'), { mode: 0o600 });
   */
  async writeFile(path: string, data: FileContent | Readable, options: BoxWriteOptions = {}): Promise<void> {
    const p = parseBoxEntryPath(path);
    const { mode, owner, metadata } = parseOrThrow(BoxWriteOptionsSchema, options, 'options');
    if (typeof data !== 'string' && !(data instanceof Uint8Array) && !isAsyncIterable(data)) {
      throw invalidArgument('data', 'must be a string, a Uint8Array or a Readable');
    }
    await this.streamIn(
      [
        'write',
        p,
        ...(mode === undefined ? [] : [(mode & 0o777).toString(8)]),
        ...(owner === undefined ? [] : [`--owner=${owner}`]),
        ...Object.entries(metadata ?? {}).map(([k, v]) => `--meta=${k}=${v}`),
      ],
      p,
      typeof data === 'string' || data instanceof Uint8Array ? [data] : data,
    );
  }

  /**
   * Runs an operation that reads `source` as `fs write`'s frames on stdin; its stdout as text. A
   * source that fails sends no commit frame, so the tool writes nothing, and its error is thrown.
   */
  protected async streamIn(args: string[], p: string, source: Iterable<Uint8Array | string> | AsyncIterable<Uint8Array | string>): Promise<string> {
    const s = await this.start(args, true);
    const stderr = text(s.stderr);
    const stdout = text(s.stdout);
    stdout.catch(() => undefined); // read only on success; a failure is reported from the exit
    const exited = s.wait();
    let sourceError: unknown;
    try {
      await sendFrames(source, s.stdin, exited);
    } catch (err) {
      sourceError = err;
      s.stdin.end(); // without the commit frame: the tool drops what it staged
    }
    const code = await exited;
    if (sourceError !== undefined) throw sourceError;
    if (code !== 0) throw this.failure(code, await stderr, p);
    return stdout;
  }

  /**
   * Directory listing, by name; symlinks listed as themselves. With `recursive`, names are paths
   * relative to `path`, symlinks are not entered, and directories the user cannot read are
   * listed but not entered.
   *
   * @example
   * const entries = await files.readDir('/home/sandbox', { recursive: true });
   */
  async readDir(path: string, options: BoxReadDirOptions = {}): Promise<(DirEntry & Partial<BoxEntryDetails>)[]> {
    const p = parseBoxPath(path);
    const { recursive, details } = parseOrThrow(BoxReadDirOptionsSchema, options, 'options');
    const entries = JSON.parse(await this.call(['ls', p, ...(recursive ? ['--recursive'] : []), ...(details ? ['--details'] : [])], p)) as (DirEntry & {
      isFile?: boolean;
    })[];
    return entries.map(({ isFile: _isFile, ...e }) => e);
  }

  /**
   * Describes a path without following a final symlink (lstat).
   *
   * @example
   * const { isDir, size, mode, mtime } = await files.stat('/etc/hosts');
   */
  async stat(path: string, options: BoxStatOptions = {}): Promise<FileStat & Partial<BoxEntryDetails>> {
    const p = parseBoxPath(path);
    const { details } = parseOrThrow(BoxStatOptionsSchema, options, 'options');
    return JSON.parse(await this.call(['stat', p, ...(details ? ['--details'] : [])], p)) as FileStat & Partial<BoxEntryDetails>;
  }

  /**
   * Whether something (a symlink counts) is at `path`.
   *
   * @example
   * if (!(await files.exists('/app/.env'))) await files.writeFile('/app/.env', '');
   */
  exists(path: string): Promise<boolean> {
    return existsBy(this.stat(path));
  }

  /**
   * `mkdir -p`; an existing directory is fine, an existing non-directory is a `conflict`.
   *
   * @example
   * await files.mkdirAll('/home/sandbox/app/src', 0o750);
   */
  async mkdirAll(path: string, mode = 0o755): Promise<void> {
    const p = parseBoxPath(path);
    const m = parseOrThrow(fileMode, mode, 'mode') & 0o777;
    await this.call(['mkdir', p, m.toString(8)], p);
  }

  /**
   * Removes a file, a symlink (not its target) or an empty directory; a non-empty one is a `conflict`.
   *
   * @example
   * await files.remove('/tmp/old.log');
   */
  async remove(path: string): Promise<void> {
    const p = parseBoxEntryPath(path);
    await this.call(['rm', p], p);
  }

  /**
   * `rm -rf`, never following symlinks; a missing path is fine, the root directory is refused.
   *
   * @example
   * await files.removeAll('/tmp/build');
   */
  async removeAll(path: string): Promise<void> {
    const p = parseBoxEntryPath(path);
    await this.call(['rm', p, '--recursive'], p);
  }

  /**
   * rename(2): replaces a file, or an empty directory with a directory; creates `to`'s missing
   * parents. Both must be on one filesystem of the box (else invalid_argument, errno EXDEV).
   *
   * @example
   * await files.rename('/tmp/draft.md', '/home/sandbox/final.md');
   */
  async rename(from: string, to: string): Promise<void> {
    const source = parseBoxEntryPath(from, 'from');
    const target = parseBoxEntryPath(to, 'to');
    await this.call(['mv', source, target], source);
  }

  /**
   * Changes below `path` as they happen (inotify in the box), names relative to `path`. Runs
   * until `signal` aborts, the loop is left, or `path` goes away (a last `remove`/`rename` of
   * '' then ends it). Writes through `writeFile` show as `create` and `write` of the real name;
   * its temp files are not reported. A write(2) loop shows as one `write` per burst.
   *
   * @example
   * const ac = new AbortController();
   * for await (const e of files.watch('/app', { recursive: true, signal: ac.signal })) console.log(e.type, e.name);
   */
  watch(path: string, options: WatchOptions = {}): BoxWatch {
    const p = parseBoxPath(path);
    const { recursive, signal } = parseOrThrow(WatchOptionsSchema, options, 'options');
    const started = this.start(['watch', p, ...(recursive ? ['--recursive'] : [])], false);
    const opened = started.then(async (s) => {
      const onAbort = () => void s.cancel().catch(() => undefined);
      if (signal?.aborted) onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      const stderr = text(s.stderr);
      s.stdin.end();
      const lines = createInterface({ input: s.stdout, crlfDelay: Infinity })[Symbol.asyncIterator]();
      const first = await lines.next();
      if (first.done) {
        signal?.removeEventListener('abort', onAbort);
        const code = await s.wait();
        if (signal?.aborted) return { s, lines, onAbort };
        throw this.failure(code === 0 ? 15 : code, await stderr, p);
      }
      return { s, lines, onAbort };
    });
    const ready = opened.then(() => undefined);
    ready.catch(() => undefined); // a caller that only iterates gets the error from next()
    const failure = (code: number) => this.failure(code, '', p);
    return {
      ready,
      async *[Symbol.asyncIterator]() {
        const { s, lines, onAbort } = await opened;
        try {
          for (;;) {
            const line = await lines.next();
            if (line.done) break;
            if (line.value) yield JSON.parse(line.value) as BoxWatchEvent;
          }
          const code = await s.wait();
          if (code !== 0 && !signal?.aborted) throw failure(code);
        } finally {
          signal?.removeEventListener('abort', onAbort);
          await s.cancel().catch(() => undefined);
        }
      },
    };
  }

  /** Runs one operation whose answer is small; its stdout as text. */
  protected async call(args: string[], path: string): Promise<string> {
    const s = await this.start(args, true);
    s.stdin.end();
    const [out, err, code] = await Promise.all([text(s.stdout), text(s.stderr), s.wait()]);
    if (code !== 0) throw this.failure(code, err, path);
    return out;
  }

  private async start(args: string[], hold: boolean): Promise<ExecStream> {
    const tool = await this.host.tool();
    if (!tool) {
      throw new SbxError('not_available', `box '${this.host.boxId}' has no file tool: its root filesystem is read-only or the runtime cannot give it one`, {
        details: { id: this.host.boxId, reason: 'no_file_tool' },
      });
    }
    try {
      return await this.host.run([tool, 'fs', ...args], this.user === undefined ? {} : { user: this.user }, hold);
    } catch (err) {
      // The tool itself missing (deleted from a box it was copied into) is not the caller's path.
      if (err instanceof SbxError && err.code === 'not_found' && err.details?.['field'] === 'cmd') {
        throw new SbxError('not_available', `box '${this.host.boxId}' lost its file tool (${tool})`, {
          cause: err,
          details: { id: this.host.boxId, reason: 'no_file_tool' },
        });
      }
      throw err;
    }
  }

  /** The tool's error line (agent/fs.go) as an SbxError; its exit code when the line is missing. */
  private failure(exitCode: number, stderr: string, path: string): SbxError {
    const line = stderr.trim().split('\n').pop() ?? '';
    try {
      const e = JSON.parse(line) as { code?: unknown; errno?: unknown; message?: unknown; path?: unknown };
      if (typeof e.code === 'string' && typeof e.message === 'string') {
        return new SbxError(e.code as SbxError['code'], e.message, {
          details: { field: 'path', path: typeof e.path === 'string' && e.path ? e.path : path, ...(typeof e.errno === 'string' ? { errno: e.errno } : {}) },
        });
      }
    } catch {
      // not the tool's line: fall through to the exit code
    }
    const code = EXIT_CODES[exitCode] ?? 'internal';
    return new SbxError(code, `box file operation on ${path} failed (exit ${exitCode})${line ? `: ${line}` : ''}`, {
      details: { field: 'path', path, exitCode },
    });
  }
}

function isOk(line: string): boolean {
  try {
    return (JSON.parse(line) as { ok?: unknown }).ok === true;
  } catch {
    return false;
  }
}

/**
 * The first line of a stream (at most 4 KiB), the rest left in it unread; undefined when it
 * ends first.
 */
function headerLine(stream: Readable): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    let seen = Buffer.alloc(0);
    const done = (line: string | undefined) => {
      stream.off('readable', onReadable);
      stream.off('end', onEnd);
      stream.off('error', reject);
      resolve(line);
    };
    const onEnd = () => done(undefined);
    const onReadable = () => {
      for (let chunk = stream.read() as Buffer | null; chunk !== null; chunk = stream.read() as Buffer | null) {
        seen = Buffer.concat([seen, chunk]);
        const nl = seen.indexOf(10);
        if (nl >= 0) {
          if (nl + 1 < seen.length) stream.unshift(seen.subarray(nl + 1));
          return done(seen.subarray(0, nl).toString('utf8'));
        }
        if (seen.length > 4096) return done(undefined);
      }
    };
    stream.on('readable', onReadable);
    stream.once('end', onEnd);
    stream.once('error', reject);
  });
}

/** Everything a stream gives, as text (the tool's small answers and error lines). */
async function text(stream: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * Sends `source` as `fs write`'s frames (4-byte length + bytes; a zero length commits), waiting
 * for the exec's stdin to drain, so at most a frame or two is in memory. Stops early when the
 * tool exits first (it refused the write); the caller reads its error.
 */
async function sendFrames(source: Iterable<Uint8Array | string> | AsyncIterable<Uint8Array | string>, stdin: Writable, exited: Promise<number>): Promise<void> {
  stdin.on('error', () => undefined); // a tool that exited early: its error line says why
  let gone = false;
  void exited.finally(() => (gone = true)).catch(() => undefined);
  const send = async (buf: Buffer) => {
    if (gone) return;
    if (!stdin.write(buf)) await Promise.race([new Promise((r) => stdin.once('drain', r)), exited]);
  };
  for await (const chunk of source) {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    for (let at = 0; at < buf.length && !gone; at += FRAME_BYTES) {
      const part = buf.subarray(at, at + FRAME_BYTES);
      const header = Buffer.alloc(4);
      header.writeUInt32BE(part.length);
      await send(header);
      await send(part);
    }
    if (gone) return;
  }
  await send(COMMIT);
  stdin.end();
}

function isAsyncIterable(v: unknown): v is AsyncIterable<Uint8Array | string> {
  return v !== null && typeof v === 'object' && typeof (v as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function';
}
