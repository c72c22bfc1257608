/**
 * Workspaces over the HTTP API: the WorkspaceManager's calls (`sbx.workspaces`) and the
 * WorkspaceFS file API (`box.workspace()`, `sbx.workspaces.fs(id)`), streamed both ways.
 */
import { createReadStream, type Stats } from 'node:fs';
import { stat as hostStat } from 'node:fs/promises';
import { basename, isAbsolute } from 'node:path';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { SbxError, existsBy, invalidArgument } from '../errors.js';
// The library's path policy, a leaf module (it imports errors.js only): the same paths are
// refused with the same errors before anything is sent.
import { parseWorkspacePath } from '../workspace/workspace-path.js';
import type {
  CreateWorkspaceOptions,
  DeleteWorkspaceOptions,
  DirEntry,
  FileContent,
  FileStat,
  ImportResult,
  ListWorkspacesOptions,
  ReadDirOptions,
  UpdateWorkspaceOptions,
  Workspace,
  WorkspaceUsage,
  WriteFileOptions,
} from '../workspace/types.js';
import type { WorkspaceFS as LibraryWorkspaceFS } from '../workspace/fs.js';
import { encodePath } from './http.js';
import { packHostTree } from './tar-pack.js';
import type { Transport } from './http.js';

/**
 * The library's WorkspaceFS as a structural type (its public members only), so the library's
 * class and the SDK's remote one both satisfy it.
 */
export type WorkspaceFS = { [K in keyof LibraryWorkspaceFS]: LibraryWorkspaceFS[K] };

const DEFAULT_DIR_MODE = 0o755;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** What `sbx.workspaces.create` takes: the library's options; `owner` and `node` default on the server. */
export type RemoteCreateWorkspaceOptions = Omit<CreateWorkspaceOptions, 'owner' | 'node'> & { owner?: string; node?: string };

export class RemoteWorkspaces {
  constructor(private readonly transport: Transport) {}

  create(options: RemoteCreateWorkspaceOptions): Promise<Workspace> {
    return this.transport.json<Workspace>('POST', '/v1/workspaces', { json: options });
  }

  get(id: string): Promise<Workspace> {
    return this.transport.json<Workspace>('GET', `/v1/workspaces/${encodeURIComponent(id)}`);
  }

  async list(filter: ListWorkspacesOptions = {}): Promise<Workspace[]> {
    return (await this.transport.json<{ workspaces: Workspace[] }>('GET', '/v1/workspaces', { query: { owner: filter.owner, node: filter.node } })).workspaces;
  }

  update(id: string, changes: UpdateWorkspaceOptions): Promise<Workspace> {
    return this.transport.json<Workspace>('PATCH', `/v1/workspaces/${encodeURIComponent(id)}`, { json: changes });
  }

  async delete(id: string, options: DeleteWorkspaceOptions = {}): Promise<void> {
    await this.transport.json('DELETE', `/v1/workspaces/${encodeURIComponent(id)}`, { query: { force: options.force } });
  }

  usage(id: string): Promise<WorkspaceUsage> {
    return this.transport.json<WorkspaceUsage>('GET', `/v1/workspaces/${encodeURIComponent(id)}/usage`);
  }

  /** The file API of one workspace; not_found if it does not exist (or is another owner's). */
  async fs(id: string): Promise<WorkspaceFS> {
    await this.get(id);
    return new RemoteWorkspaceFS(this.transport, id);
  }
}

/** WorkspaceFS over `/v1/workspaces/:id/files` and `/tar`. Paths as in the library: relative, `/`. */
export class RemoteWorkspaceFS implements WorkspaceFS {
  constructor(
    private readonly transport: Transport,
    readonly id: string,
  ) {}

  private route(kind: 'files' | 'tar', path: string, field = 'path'): string {
    const components = parseWorkspacePath(path, field);
    const base = `/v1/workspaces/${encodeURIComponent(this.id)}/${kind}`;
    return components.length === 0 ? (kind === 'files' ? base : `${base}/`) : `${base}/${encodePath(components)}`;
  }

  private async get(path: string, query?: Record<string, boolean>): Promise<Response> {
    return this.transport.request('GET', this.route('files', path), query ? { query } : {});
  }

  private async body(res: Response, path: string): Promise<unknown> {
    try {
      return await res.json();
    } catch (err) {
      throw this.transport.readFailed(err, 'GET', this.route('files', path));
    }
  }

  readFile(path: string): Promise<Buffer>;
  readFile(path: string, encoding: BufferEncoding): Promise<string>;
  async readFile(path: string, encoding?: BufferEncoding): Promise<Buffer | string> {
    const res = await this.get(path);
    let data: Buffer;
    try {
      data = Buffer.from(await res.arrayBuffer());
    } catch (err) {
      throw this.transport.readFailed(err, 'GET', this.route('files', path));
    }
    return encoding ? data.toString(encoding) : data;
  }

  /** The file as a stream, read as it arrives. A missing file rejects here, not on the stream. */
  async createReadStream(path: string): Promise<Readable> {
    const res = await this.get(path);
    return bodyStream(res);
  }

  async writeFile(path: string, data: FileContent | Readable, options: WriteFileOptions = {}): Promise<void> {
    const mode = options.mode === undefined ? undefined : checkMode(options.mode);
    if (typeof data !== 'string' && !(data instanceof Uint8Array) && !isAsyncIterable(data)) {
      throw invalidArgument('data', 'must be a string, a Uint8Array or a Readable');
    }
    const route = this.route('files', path);
    if (parseWorkspacePath(path).length === 0) throw invalidArgument('path', 'name a file inside the workspace');
    const body = typeof data === 'string' ? Buffer.from(data) : data instanceof Uint8Array ? data : bytes(data);
    await this.transport.json('PUT', route, { body, query: mode === undefined ? {} : { mode: mode.toString(8).padStart(3, '0') } });
  }

  async readDir(path: string, options: ReadDirOptions = {}): Promise<DirEntry[]> {
    const res = await this.get(path, { list: true, recursive: options.recursive ?? false });
    return ((await this.body(res, path)) as { entries: DirEntry[] }).entries;
  }

  async stat(path: string): Promise<FileStat> {
    return (await this.body(await this.get(path, { stat: true }), path)) as FileStat;
  }

  exists(path: string): Promise<boolean> {
    return existsBy(this.stat(path));
  }

  /**
   * `mkdir -p`. The server's mkdir takes no mode (it uses 0o755), so another mode is refused
   * rather than silently dropped.
   */
  async mkdirAll(path: string, mode: number = DEFAULT_DIR_MODE): Promise<void> {
    if (checkMode(mode) !== DEFAULT_DIR_MODE) throw new SbxError('not_available', 'mkdirAll with a mode other than 0o755 is not served by the HTTP API yet');
    await this.transport.json('POST', this.route('files', path), { json: { op: 'mkdir' } });
  }

  async remove(path: string): Promise<void> {
    await this.transport.json('DELETE', this.route('files', path));
  }

  async removeAll(path: string): Promise<void> {
    try {
      await this.transport.json('DELETE', this.route('files', path), { query: { recursive: true } });
    } catch (err) {
      if (err instanceof SbxError && err.code === 'not_found' && err.details?.['field'] === 'path') return;
      throw err;
    }
  }

  async rename(from: string, to: string): Promise<void> {
    parseWorkspacePath(to);
    await this.transport.json('POST', this.route('files', from), { json: { op: 'rename', to } });
  }

  async copy(from: string, to: string): Promise<void> {
    parseWorkspacePath(to);
    await this.transport.json('POST', this.route('files', from), { json: { op: 'copy', to } });
  }

  async readFileBase64(path: string): Promise<string> {
    return (await this.readFile(path)).toString('base64');
  }

  async writeFileBase64(path: string, base64: string, options: WriteFileOptions = {}): Promise<void> {
    const compact = typeof base64 === 'string' ? base64.replace(/\s+/g, '') : undefined;
    if (compact === undefined || compact.length % 4 !== 0 || !BASE64.test(compact)) throw invalidArgument('data', 'is not valid base64');
    await this.writeFile(path, Buffer.from(compact, 'base64'), options);
  }

  /**
   * Copies a file or directory tree of the machine this SDK runs on into the workspace,
   * streamed, with modes; symlinks in a tree are copied as symlinks (the server refuses ones
   * that point outside the tree).
   */
  async copyFromHost(hostPath: string, dest?: string): Promise<void> {
    if (typeof hostPath !== 'string' || !isAbsolute(hostPath)) throw invalidArgument('hostPath', 'must be an absolute host path');
    const st: Stats = await hostStat(hostPath).catch((err: unknown) => {
      const code = (err as NodeJS.ErrnoException).code;
      throw new SbxError(code === 'ENOENT' ? 'not_found' : 'internal', `cannot copy from host ${hostPath}: ${(err as Error).message}`, {
        cause: err,
        details: { field: 'hostPath' },
      });
    });
    if (st.isDirectory()) {
      // Staged and merged on the server, all or nothing, as the library's copy is.
      await this.importTar(dest ?? basename(hostPath), Readable.from(packHostTree(hostPath)));
      return;
    }
    if (!st.isFile()) throw invalidArgument('hostPath', `${hostPath} is not a regular file or directory`);
    await this.writeFile(dest ?? basename(hostPath), createReadStream(hostPath), { mode: st.mode & 0o777 });
  }

  async exportTar(path: string): Promise<Readable> {
    return bodyStream(await this.transport.request('GET', this.route('tar', path)));
  }

  async importTar(dest: string, tarStream: Readable | NodeJS.ReadableStream | Uint8Array): Promise<ImportResult> {
    const body = tarStream instanceof Uint8Array ? tarStream : bytes(tarStream as AsyncIterable<Uint8Array | string>);
    return this.transport.json<ImportResult>('PUT', this.route('tar', dest), { body, headers: { 'content-type': 'application/x-tar' } });
  }

  usage(): Promise<WorkspaceUsage> {
    return this.transport.json<WorkspaceUsage>('GET', `/v1/workspaces/${encodeURIComponent(this.id)}/usage`);
  }
}

export function bodyStream(res: Response): Readable {
  if (!res.body) return Readable.from([]);
  return Readable.fromWeb(res.body as WebReadableStream<Uint8Array>);
}

export async function* bytes(source: AsyncIterable<Uint8Array | string>): AsyncIterable<Uint8Array> {
  for await (const chunk of source) yield typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
}

export function isAsyncIterable(v: unknown): v is AsyncIterable<Uint8Array | string> {
  return v !== null && typeof v === 'object' && typeof (v as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function';
}

export function checkMode(mode: unknown): number {
  if (typeof mode !== 'number' || !Number.isInteger(mode) || mode < 0 || mode > 0o7777)
    throw invalidArgument('mode', 'must be an integer permission mode such as 0o644');
  return mode & 0o777;
}
