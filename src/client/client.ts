/**
 * `Sbx`: the library Manager's calls, served by `sbx serve`. Code moves between the two by
 * changing the line that makes the Manager.
 */
import { SbxError, invalidArgument } from '../errors.js';
import type { ImageInfo, PullProgress, RegistryAuth } from '../runtime/types.js';
import type { NodeInfo } from '../runtime/remote/hub.js';
import type { PoolConfig } from '../sandbox/config.js';
import type { BoxInfo, BoxStats, CreateOptions, HeartbeatInput, ListOptions, PoolInfo } from '../sandbox/types.js';
import type { SnapshotInfo } from '../sandbox/snapshots.js';
import type { ApiKeyInfo, Role } from '../server/keys.js';
import { RemoteBox } from './box.js';
import type { Box } from './box.js';
import { Transport, fromWire } from './http.js';
import { readSse } from './sse.js';
import { RemoteWorkspaces } from './workspace.js';

export interface SbxOptions {
  /** The server, e.g. `http://127.0.0.1:7070`. Default `$SBX_URL`, else `http://127.0.0.1:7070`. */
  url?: string;
  /** An API key (`sbxk_…`). Default `$SBX_API_KEY`. */
  apiKey?: string;
  /** Extra tries of a GET after a connection error (refused, reset). Default 3. Other calls are never retried. */
  retries?: number;
  /** Backoff before the first retry, doubled each time. Default 200. */
  retryDelayMs?: number;
}

export const DEFAULT_URL = 'http://127.0.0.1:7070';

/** What `Sbx.whoami()` answers. */
export interface WhoAmI {
  keyId: string;
  name: string;
  role: Role;
  owner: string;
  admin: boolean;
}

export interface PullOptions {
  auth?: RegistryAuth;
  signal?: AbortSignal;
}

/**
 * A client of `sbx serve` with the Manager's shape: `create`, `get`, `getOrCreate`, `list`,
 * `remove`, `info`, `heartbeat`, `pools`/`addPool`/`removePool`, `imageExists`/`pullImage`/
 * `ensureImage`, `workspaces`; plus what only the server has: `keys`, and `images` as a short
 * form. It needs nothing but `fetch` and `ws`.
 *
 * @example
 * const sbx = new Sbx();                 // SBX_URL, SBX_API_KEY
 * await using box = await sbx.create({ image: 'sbx-base:latest' });
 * console.log((await box.exec(['echo', 'hello'])).stdout);
 */
export class Sbx {
  readonly url: string;
  readonly workspaces: RemoteWorkspaces;
  /** Admin: API keys. */
  readonly keys: {
    create(input: { name: string; role: Role; owner?: string }): Promise<ApiKeyInfo & { key: string; e2bKey: string }>;
    list(): Promise<ApiKeyInfo[]>;
    revoke(id: string): Promise<void>;
  };
  /** Admin: images, with the pool optional (the server's first pool). */
  readonly images: {
    exists(ref: string, opts?: { pool?: string }): Promise<boolean>;
    pull(ref: string, opts?: PullOptions & { pool?: string }): AsyncIterable<PullProgress>;
    list(opts?: { pool?: string }): Promise<ImageInfo[]>;
    /** `force`: as the engine takes it (docker: untag an image a box uses). */
    remove(ref: string, opts?: { pool?: string; force?: boolean }): Promise<void>;
  };
  /**
   * Snapshots (`box.snapshot()`), the Manager's `snapshots`: the caller's own (an admin's list
   * takes `owner` to narrow it); another owner's answers not_found. `get` and `delete` take an id
   * or a name.
   */
  readonly snapshots: {
    list(opts?: { owner?: string }): Promise<SnapshotInfo[]>;
    get(idOrName: string): Promise<SnapshotInfo>;
    delete(idOrName: string): Promise<void>;
  };
  /** Admin: remote nodes (`sbx node`): list, a one-time join token, drain, revoke. */
  readonly nodes: {
    list(): Promise<NodeInfo[]>;
    createJoinToken(opts?: { ttlMs?: number }): Promise<{ token: string; expiresAt: string }>;
    /** `draining: false` undoes a drain. */
    drain(name: string, opts?: { draining?: boolean }): Promise<NodeInfo>;
    revoke(name: string): Promise<NodeInfo>;
  };
  private readonly transport: Transport;

  constructor(options: SbxOptions = {}) {
    const url = options.url ?? process.env['SBX_URL'] ?? DEFAULT_URL;
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw invalidArgument('url', `is not a URL: ${JSON.stringify(url)}`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw invalidArgument('url', `must be http:// or https://, got ${parsed.protocol}`);
    const retries = options.retries ?? 3;
    const retryDelayMs = options.retryDelayMs ?? 200;
    if (!Number.isInteger(retries) || retries < 0) throw invalidArgument('retries', 'must be a whole number ≥ 0');
    if (!Number.isInteger(retryDelayMs) || retryDelayMs < 0) throw invalidArgument('retryDelayMs', 'must be whole milliseconds ≥ 0');
    this.transport = new Transport({ url: parsed.href, apiKey: options.apiKey ?? process.env['SBX_API_KEY'], retries, retryDelayMs });
    this.url = this.transport.baseUrl;
    this.workspaces = new RemoteWorkspaces(this.transport);
    const t = this.transport;
    this.keys = {
      create: (input) => t.json('POST', '/v1/keys', { json: input }),
      list: async () => (await t.json<{ keys: ApiKeyInfo[] }>('GET', '/v1/keys')).keys,
      revoke: async (id) => void (await t.json('DELETE', `/v1/keys/${encodeURIComponent(id)}`)),
    };
    this.images = {
      exists: async (ref, opts = {}) => (await t.json<{ exists: boolean }>('GET', '/v1/images/exists', { query: { ref, pool: opts.pool } })).exists,
      pull: (ref, opts = {}) => this.pull(opts.pool, ref, opts),
      list: async (opts = {}) => (await t.json<{ images: ImageInfo[] }>('GET', '/v1/images', { query: { pool: opts.pool } })).images,
      remove: async (ref, opts = {}) => void (await t.json('DELETE', '/v1/images', { query: { ref, pool: opts.pool, force: opts.force } })),
    };
    const snapshot = (id: string) => `/v1/snapshots/${encodeURIComponent(id)}`;
    this.snapshots = {
      list: async (opts = {}) => (await t.json<{ snapshots: SnapshotInfo[] }>('GET', '/v1/snapshots', { query: { owner: opts.owner } })).snapshots,
      get: (id) => t.json<SnapshotInfo>('GET', snapshot(id)),
      delete: async (id) => void (await t.json('DELETE', snapshot(id))),
    };
    const node = (name: string) => `/v1/nodes/${encodeURIComponent(name)}`;
    this.nodes = {
      list: async () => (await t.json<{ nodes: NodeInfo[] }>('GET', '/v1/nodes')).nodes,
      createJoinToken: (opts = {}) => t.json('POST', '/v1/nodes/join-tokens', { json: opts }),
      drain: (name, opts = {}) => t.json('POST', `${node(name)}/drain`, { json: { draining: opts.draining ?? true } }),
      revoke: (name) => t.json('POST', `${node(name)}/revoke`),
    };
  }

  /** The API key this client calls with: its id, name, role and owner (GET /v1/whoami). */
  whoami(): Promise<WhoAmI> {
    return this.transport.json<WhoAmI>('GET', '/v1/whoami');
  }

  /** Nothing to connect ahead of time: there for code written against the Manager. */
  async start(): Promise<void> {}

  /** Nothing to release (connections are per call): there for code written against the Manager. */
  async close(): Promise<void> {}

  // --- Boxes ---------------------------------------------------------------------------

  /** Creates and starts a box. Never retried. */
  async create(options: CreateOptions): Promise<Box> {
    return new RemoteBox(this.transport, await this.transport.json<BoxInfo>('POST', '/v1/boxes', { json: options }));
  }

  async get(id: string): Promise<Box> {
    return new RemoteBox(this.transport, await this.info(id));
  }

  /** The box with `options.id`, created if absent (the server joins concurrent calls). */
  async getOrCreate(options: CreateOptions): Promise<Box> {
    if (!options?.id) throw new SbxError('invalid_argument', 'id: getOrCreate needs an id', { details: { field: 'id' } });
    return new RemoteBox(this.transport, await this.transport.json<BoxInfo>('POST', '/v1/boxes', { json: options, query: { getOrCreate: true } }));
  }

  async list(opts: ListOptions = {}): Promise<Box[]> {
    const label = Object.entries(opts.labels ?? {}).map(([k, v]) => `${k}=${v}`);
    const { boxes } = await this.transport.json<{ boxes: BoxInfo[] }>('GET', '/v1/boxes', {
      query: { owner: opts.owner, pool: opts.pool, ...(label.length > 0 ? { label } : {}) },
    });
    return boxes.map((info) => new RemoteBox(this.transport, info));
  }

  async remove(id: string): Promise<void> {
    await this.transport.json('DELETE', `/v1/boxes/${encodeURIComponent(id)}`);
  }

  async info(id: string): Promise<BoxInfo> {
    return this.transport.json<BoxInfo>('GET', `/v1/boxes/${encodeURIComponent(id)}`);
  }

  /** A box's CPU and memory use (GET /v1/boxes/:id/stats; `box.stats()` without the lookup): not use of the box. */
  async stats(id: string): Promise<BoxStats> {
    return this.transport.json<BoxStats>('GET', `/v1/boxes/${encodeURIComponent(id)}/stats`);
  }

  async heartbeat(id: string, input: HeartbeatInput): Promise<void> {
    await this.transport.json('POST', `/v1/boxes/${encodeURIComponent(id)}/heartbeat`, { json: input });
  }

  // --- Pools (admin) -------------------------------------------------------------------

  async pools(): Promise<PoolInfo[]> {
    return (await this.transport.json<{ pools: PoolInfo[] }>('GET', '/v1/pools')).pools;
  }

  /** Takes what `pools()` returns too; its status fields are dropped. */
  async addPool(def: PoolConfig | PoolInfo): Promise<PoolInfo> {
    const { connected: _c, boxes: _b, ...settings } = def as PoolInfo;
    if ('runtime' in settings) throw invalidArgument('runtime', 'a Runtime object cannot be sent to a server; give addr');
    return this.transport.json<PoolInfo>('POST', '/v1/pools', { json: settings });
  }

  async removePool(name: string, opts: { force?: boolean } = {}): Promise<void> {
    await this.transport.json('DELETE', `/v1/pools/${encodeURIComponent(name)}`, { query: { force: opts.force } });
  }

  // --- Images (admin) ------------------------------------------------------------------

  async imageExists(pool: string, ref: string): Promise<boolean> {
    return this.images.exists(ref, { pool });
  }

  /** Progress events as the engine reports them; throws the SbxError the server sends. */
  pullImage(pool: string, ref: string, opts: PullOptions = {}): AsyncIterable<PullProgress> {
    return this.pull(pool, ref, opts);
  }

  /** Pulls `ref` unless the pool already has it. */
  async ensureImage(pool: string, ref: string, opts: { auth?: RegistryAuth } = {}): Promise<{ pulled: boolean }> {
    if (await this.imageExists(pool, ref)) return { pulled: false };
    for await (const _ of this.pullImage(pool, ref, opts)) {
      /* progress is for callers of pullImage */
    }
    return { pulled: true };
  }

  private async *pull(pool: string | undefined, ref: string, opts: PullOptions): AsyncGenerator<PullProgress> {
    const res = await this.transport.request('POST', '/v1/images/pull', {
      json: { ref, ...(pool !== undefined ? { pool } : {}), ...(opts.auth ? { auth: opts.auth } : {}) },
      headers: { accept: 'text/event-stream' },
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    if (!res.body) throw new SbxError('internal', 'the pull answer has no body');
    try {
      for await (const msg of readSse(res.body as AsyncIterable<Uint8Array>)) {
        const data = JSON.parse(msg.data) as unknown;
        if (msg.event === 'progress') yield data as PullProgress;
        else if (msg.event === 'done') return;
        else if (msg.event === 'error') throw fromWire((data as { error: Parameters<typeof fromWire>[0] }).error);
      }
    } catch (err) {
      if (err instanceof SbxError) throw err;
      if (opts.signal?.aborted) throw new SbxError('cancelled', `pull of ${ref} aborted`, { cause: opts.signal.reason });
      throw this.transport.readFailed(err, 'POST', '/v1/images/pull');
    }
    throw new SbxError('runtime_unavailable', `the pull of ${ref} from ${this.url} ended without a result`, { details: { url: this.url } });
  }
}
