/**
 * What every route module gets: the Manager, the key store, metrics, the stream registry used by
 * graceful shutdown, and the owner-scoping helpers.
 */
import type { Logger } from 'pino';
import { SbxError } from '../errors.js';
import type { Box, Manager } from '../sandbox/index.js';
import type { Workspace } from '../workspace/index.js';
import type { Caller } from './auth.js';
import { mayAccess, requireKey } from './auth.js';
import type { KeyStore, Principal } from './keys.js';
import type { ServerMetrics } from './metrics.js';
import type { ExecOutputBudget } from './output-budget.js';

declare module 'fastify' {
  interface FastifyRequest {
    caller?: Caller;
  }
  interface FastifyContextConfig {
    /** No authentication (health, metrics). */
    public?: boolean;
    /** A box token for the `:id` box is accepted (the heartbeat route). */
    boxToken?: boolean;
    /** On a WebSocket upgrade without Authorization, the credential may come as a subprotocol (auth.ts). */
    wsProtocolAuth?: boolean;
    /** The proxy: authorizePort (port-auth.ts) authenticates, not the app's hook. */
    portAuth?: boolean;
  }
}

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
}

export { WORKSPACE_ID_PATTERN } from '../workspace/schemas.js';

/** What a missing box answers; another owner's box answers exactly this too. */
export function boxNotFound(id: string): SbxError {
  return new SbxError('not_found', `box '${id}' not found`, { details: { id } });
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
export async function boxFor(ctx: ServerContext, caller: Caller | undefined, id: string): Promise<Box> {
  const p = requireKey(caller);
  // get() is one map lookup; list() would copy and filter every box on each request.
  const box = await ctx.manager.get(id).catch((err: unknown) => {
    if (err instanceof SbxError && err.code === 'not_found') return undefined;
    throw err;
  });
  if (box && mayAccess(p, box.owner)) return box;
  const matches = (await ctx.manager.list()).filter((b) => b.id.startsWith(id) && mayAccess(p, b.owner));
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
