/**
 * The box filesystem over the HTTP API (`box.files()` of a RemoteBox): the library's BoxFS calls
 * on `/v1/boxes/:id/files/<path>`, streamed both ways, with the same path checks before anything
 * is sent (box-path.ts, a leaf module of the core).
 */
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { existsBy, invalidArgument } from '../errors.js';
import { parseBoxEntryPath, parseBoxPath } from '../sandbox/box-path.js';
import type { BoxFS as LibraryBoxFS, BoxFilesOptions, BoxWatch, BoxWatchEvent, WatchOptions } from '../sandbox/box-fs.js';
import type { DirEntry, FileContent, FileStat, ReadDirOptions, WriteFileOptions } from '../workspace/types.js';
import type { Transport } from './http.js';
import { bodyStream, bytes, checkMode, isAsyncIterable } from './workspace.js';

/** The library's BoxFS as a structural type (its public members), which both sides satisfy. */
export type BoxFS = { [K in keyof LibraryBoxFS]: LibraryBoxFS[K] };

const USER = /^[A-Za-z0-9_.][A-Za-z0-9_.-]*(:[A-Za-z0-9_.][A-Za-z0-9_.-]*)?$/;

export class RemoteBoxFS implements BoxFS {
  readonly user: string | undefined;

  constructor(
    private readonly transport: Transport,
    private readonly boxId: string,
    options: BoxFilesOptions = {},
  ) {
    if (options === null || typeof options !== 'object') throw invalidArgument('options', 'must be an object');
    for (const k of Object.keys(options)) if (k !== 'user') throw invalidArgument(k, 'unknown option');
    if (options.user !== undefined && (typeof options.user !== 'string' || !USER.test(options.user)))
      throw invalidArgument('user', "must be 'user', 'uid' or 'uid:gid'");
    this.user = options.user;
  }

  private route(path: string): string {
    const base = `/v1/boxes/${encodeURIComponent(this.boxId)}/files`;
    return path === '/' ? base : base + path.split('/').map(encodeURIComponent).join('/');
  }

  private query(extra: Record<string, string | boolean | undefined> = {}): Record<string, string | boolean | undefined> {
    return { user: this.user, ...extra };
  }

  readFile(path: string): Promise<Buffer>;
  readFile(path: string, encoding: BufferEncoding): Promise<string>;
  async readFile(path: string, encoding?: BufferEncoding): Promise<Buffer | string> {
    const chunks: Buffer[] = [];
    for await (const chunk of await this.createReadStream(path)) chunks.push(chunk as Buffer);
    const data = Buffer.concat(chunks);
    return encoding ? data.toString(encoding) : data;
  }

  async createReadStream(path: string): Promise<Readable> {
    return bodyStream(await this.transport.request('GET', this.route(parseBoxPath(path)), { query: this.query() }));
  }

  async writeFile(path: string, data: FileContent | Readable, options: WriteFileOptions = {}): Promise<void> {
    const route = this.route(parseBoxEntryPath(path));
    const mode = options.mode === undefined ? undefined : checkMode(options.mode);
    if (typeof data !== 'string' && !(data instanceof Uint8Array) && !isAsyncIterable(data)) {
      throw invalidArgument('data', 'must be a string, a Uint8Array or a Readable');
    }
    const body = typeof data === 'string' ? Buffer.from(data) : data instanceof Uint8Array ? data : bytes(data);
    await this.transport.json('PUT', route, { body, query: this.query({ mode: mode === undefined ? undefined : mode.toString(8).padStart(3, '0') }) });
  }

  async readDir(path: string, options: ReadDirOptions = {}): Promise<DirEntry[]> {
    const route = this.route(parseBoxPath(path));
    return (await this.transport.json<{ entries: DirEntry[] }>('GET', route, { query: this.query({ list: true, recursive: options.recursive ?? false }) }))
      .entries;
  }

  async stat(path: string): Promise<FileStat> {
    return this.transport.json<FileStat>('GET', this.route(parseBoxPath(path)), { query: this.query({ stat: true }) });
  }

  exists(path: string): Promise<boolean> {
    return existsBy(this.stat(path));
  }

  async mkdirAll(path: string, mode = 0o755): Promise<void> {
    const route = this.route(parseBoxPath(path));
    await this.transport.json('POST', route, { json: { op: 'mkdir', mode: checkMode(mode) }, query: this.query() });
  }

  async remove(path: string): Promise<void> {
    await this.transport.json('DELETE', this.route(parseBoxEntryPath(path)), { query: this.query() });
  }

  async removeAll(path: string): Promise<void> {
    await this.transport.json('DELETE', this.route(parseBoxEntryPath(path)), { query: this.query({ recursive: true }) });
  }

  async rename(from: string, to: string): Promise<void> {
    const route = this.route(parseBoxEntryPath(from, 'from'));
    await this.transport.json('POST', route, { json: { op: 'rename', to: parseBoxEntryPath(to, 'to') }, query: this.query() });
  }

  watch(path: string, options: WatchOptions = {}): BoxWatch {
    const route = this.route(parseBoxPath(path));
    const { recursive, signal } = options;
    const opened = this.transport
      .request('GET', route, { query: this.query({ watch: true, recursive: recursive ?? false }), ...(signal ? { signal } : {}) })
      .then(async (res) => {
        const body = bodyStream(res);
        // An abort (or a dropped connection) errors the body; readline would leave that unhandled.
        let broken: unknown;
        body.on('error', (err) => (broken = err));
        const lines = createInterface({ input: body, crlfDelay: Infinity })[Symbol.asyncIterator]();
        await lines.next(); // {"ready":true}
        return { lines, broken: () => (signal?.aborted ? undefined : broken) };
      });
    const ready = opened.then(() => undefined);
    ready.catch(() => undefined); // a caller that only iterates gets the error from next()
    return {
      ready,
      async *[Symbol.asyncIterator]() {
        const { lines, broken } = await opened;
        try {
          for (;;) {
            // An abort errors the body, and readline's iterator with it: that is the end, not a failure.
            const line = await lines.next().catch((err: unknown) => {
              if (signal?.aborted) return { done: true as const, value: undefined };
              throw err;
            });
            if (line.done) break;
            if (line.value) yield JSON.parse(line.value) as BoxWatchEvent;
          }
          const err = broken();
          if (err) throw err;
        } finally {
          await lines.return?.().catch(() => undefined);
        }
      },
    };
  }
}
