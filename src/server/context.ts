/**
 * What every route module gets: the Manager, the key store, metrics, the stream registry used by
 * graceful shutdown, and the owner-scoping helpers.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { SbxError } from '../errors.js';
import type { LocalBox, Manager, PortUrlIssuer } from '../sandbox/index.js';
import type { Workspace } from '../workspace/index.js';
import type { Caller } from './auth.js';
import { mayAccess, requireKey } from './auth.js';
import { isGeneratedIdPrefix } from '../sandbox/box-id.js';
import type { KeyStore, Principal } from './keys.js';
import type { ServerMetrics } from './metrics.js';
import type { ExecOutputBudget } from './output-budget.js';

declare module 'fastify' {
  interface FastifyRequest {
    caller?: Caller;
  }
  interface FastifyContextConfig {
    /**
     * Who may call the route; the app's one onRequest hook acts on it (src/server/app.ts):
     * - `key` (the default): an API key (request-auth.ts: Authorization, X-API-KEY, or the
     *   WebSocket subprotocol), checked by the hook before anything else runs; `req.caller`.
     * - `box`: a credential bound to one box, which the route checks before it acts (a port token
     *   or cookie for the proxy and VNC, the e2b envd access token, a box token for the heartbeat).
     * - `public`: no credential (health, metrics, the API document, noVNC's library code).
     */
    auth?: 'key' | 'box' | 'public';
  }
}

/** A set of routes registered on the app after sbx's own (the e2b-compatible surface is one). */
export type ServerPlugin = (app: FastifyInstance, ctx: ServerContext) => void | Promise<void>;

/** A stream (SSE, WebSocket) that graceful shutdown may have to end. */
export interface OpenStream {
  /** Ends the stream, telling the client why. */
  abort(reason: SbxError): void;
  /** Settles when the stream has ended by itself or been aborted. */
  done: Promise<void>;
}

export class StreamRegistry {
  private readonly open = new Set<OpenStream>();
  add(s: OpenStream): void {
    this.open.add(s);
    void s.done.finally(() => this.open.delete(s));
  }
  get size(): number {
    return this.open.size;
  }
  all(): OpenStream[] {
    return [...this.open];
  }
}

export interface ServerContext {
  manager: Manager;
  keys: KeyStore;
  metrics: ServerMetrics;
  streams: StreamRegistry;
  log: Logger;
  /** True once close() began: new work is refused with not_available. */
  shuttingDown(): boolean;
  /** The budget for buffered exec output held at once; absent: one of the default size per app. */
  execOutput?: ExecOutputBudget;
  /** This server's base URL, under which it issues proxy and VNC URLs ('' before it listens). */
  publicUrl(): string;
  /** This server's host-based proxy domain (`<port>-<id>.<domain>`), if any. */
  proxyDomain: string | undefined;
  /** Plugins' say on the port proxy, asked before sbx's own port tokens (port-auth.ts); a plugin adds its own. */
  portGates?: PortGate[];
  /** How often the metrics history samples the registry (metrics-history.ts); default 10 s. */
  metricsHistoryIntervalMs?: number;
}

/**
 * A plugin's own way into the port proxy (e2b's public sandboxes and traffic access tokens,
 * src/server/e2b/api/traffic.ts). The core knows nothing of it but these two things.
 */
export interface PortGate {
  /** Request headers that carry its credential (lower case): never forwarded to the box. */
  headers: readonly string[];
  /**
   * The box when this gate lets the request through; undefined leaves the request to sbx's own
   * credentials; throws to refuse it (a wrong credential: the gate counts the failure).
   */
  authorize(request: FastifyRequest, boxId: string, port: number): Promise<LocalBox | undefined>;
}

/** URLs this server issues for the API key `keyId` (box.proxyUrl, box.vncUrl). */
export function issuerFor(ctx: ServerContext, keyId: string): PortUrlIssuer {
  return { publicUrl: ctx.publicUrl(), proxyDomain: ctx.proxyDomain, keyId };
}

export { WORKSPACE_ID_PATTERN } from '../workspace/schemas.js';

/** What a missing box answers; another owner's box answers exactly this too. */
export function boxNotFound(id: string): SbxError {
  return new SbxError('not_found', `box '${id}' not found`, { details: { id } });
}

/**
 * The box with exactly this id, whoever owns it, or undefined: get() is one map lookup, where
 * list() would copy and filter every box on each call (a cost that grows with the box count).
 */
export async function lookupBox(manager: Pick<Manager, 'get'>, id: string): Promise<LocalBox | undefined> {
  return manager.get(id).catch((err: unknown) => {
    if (err instanceof SbxError && err.code === 'not_found') return undefined;
    throw err;
  });
}

/**
 * The box `id` if the caller may use it; another owner's box answers exactly like a missing
 * one, so ids do not leak. Looking it up does not count as activity.
 *
 * Where no box has that id, `id` may be a prefix of one, as docker takes them: the one box the
 * caller may see whose id starts with it. Only the caller's own boxes (every box for an admin)
 * match or count, so another owner's box neither resolves nor makes a prefix ambiguous, and an
 * ambiguous prefix lists only the caller's own matches.
 */
export async function boxFor(ctx: ServerContext, caller: Caller | undefined, id: string): Promise<LocalBox> {
  const p = requireKey(caller);
  const box = await lookupBox(ctx.manager, id);
  if (box && mayAccess(p, box.owner)) return box;
  // A prefix stands only for a generated id, among the caller's boxes (src/sandbox/box-id.ts).
  const matches = (await ctx.manager.list()).filter((b) => isGeneratedIdPrefix(id, b.id) && mayAccess(p, b.owner));
  if (matches.length === 1) return matches[0]!;
  if (matches.length > 1) {
    const ids = matches.map((b) => b.id).sort();
    throw new SbxError(
      'invalid_argument',
      `box id prefix '${id}' is ambiguous: it starts ${ids.length} of your boxes (${ids.join(', ')}); give more of the id`,
      {
        details: { field: 'id', id, matches: ids },
      },
    );
  }
  throw boxNotFound(id);
}

/** The workspace `id` if the caller may use it; another owner's answers 404. */
export async function workspaceFor(ctx: ServerContext, p: Principal, id: string): Promise<Workspace> {
  let ws: Workspace;
  try {
    ws = await ctx.manager.workspaces.get(id);
  } catch (err) {
    if (err instanceof SbxError && err.code === 'not_found') throw new SbxError('not_found', `workspace '${id}' not found`, { details: { id } });
    throw err;
  }
  if (!mayAccess(p, ws.owner)) throw new SbxError('not_found', `workspace '${id}' not found`, { details: { id } });
  return ws;
}
