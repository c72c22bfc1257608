/**
 * GET /v2/sandboxes (and the older GET /sandboxes): filters, order and pagination as the e2b API
 * has them. The page token is opaque to clients: base64url of the last item's start time and id,
 * so a page follows the previous one even when boxes come and go in between.
 */
import { invalidArgument } from '../../../errors.js';

export type SandboxState = 'running' | 'paused';

export interface ListQuery {
  metadata: Record<string, string>;
  states: Set<SandboxState>;
  template: string | undefined;
  startedAfter: number | undefined;
  order: 'asc' | 'desc';
  limit: number;
  after: Cursor | undefined;
}

export interface Cursor {
  startedAt: number;
  id: string;
}

/** Default and ceiling of a page, as e2b has them. */
export const DEFAULT_LIMIT = 100;
export const MAX_LIMIT = 100;

/** A query parameter given at most once (given twice: a 400 naming it). */
export function one(q: Record<string, unknown>, name: string): string | undefined {
  const v = q[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw invalidArgument(name, 'must be given once');
  return v;
}

/**
 * `metadata` is itself a query string, `k=v&k2=v2`, whose keys and values the SDK encoded once
 * more (encodeURIComponent before URLSearchParams), so each is decoded again here.
 */
export function parseMetadataFilter(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!text) return out;
  for (const [k, v] of new URLSearchParams(text)) {
    try {
      out[decodeURIComponent(k)] = decodeURIComponent(v);
    } catch {
      throw invalidArgument('metadata', `'${k}' is not a valid percent-encoded key or value`);
    }
  }
  return out;
}

export function parseListQuery(q: Record<string, unknown>): ListQuery {
  const stateText = one(q, 'state');
  const states = new Set<SandboxState>();
  for (const s of (stateText ?? 'running,paused').split(',')) {
    if (s !== 'running' && s !== 'paused') throw invalidArgument('state', `'${s}' is not a state (running, paused)`);
    states.add(s);
  }
  const order = one(q, 'order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw invalidArgument('order', "must be 'asc' or 'desc'");
  const startedText = one(q, 'startedAfter');
  const startedAfter = startedText === undefined ? undefined : Date.parse(startedText);
  if (startedAfter !== undefined && Number.isNaN(startedAfter)) throw invalidArgument('startedAfter', 'must be an ISO 8601 time');
  return {
    metadata: parseMetadataFilter(one(q, 'metadata')),
    states,
    template: one(q, 'template') || undefined,
    startedAfter,
    order,
    ...parsePage(q),
  };
}

/** `limit` and `nextToken`, which every e2b list takes (the snapshot list takes only these and its filters). */
export function parsePage(q: Record<string, unknown>): Pick<ListQuery, 'limit' | 'after'> {
  const limitText = one(q, 'limit');
  const limit = limitText === undefined ? DEFAULT_LIMIT : /^\d{1,4}$/.test(limitText) ? Number(limitText) : NaN;
  if (!(limit >= 1 && limit <= MAX_LIMIT)) throw invalidArgument('limit', `must be an integer 1-${MAX_LIMIT}`);
  const token = one(q, 'nextToken');
  return { limit, after: token ? decodeCursor(token) : undefined };
}

export function encodeCursor(c: Cursor): string {
  return Buffer.from(JSON.stringify([c.startedAt, c.id])).toString('base64url');
}

function decodeCursor(token: string): Cursor {
  try {
    const v: unknown = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
    if (Array.isArray(v) && v.length === 2 && typeof v[0] === 'number' && typeof v[1] === 'string') return { startedAt: v[0], id: v[1] };
  } catch {
    // Garbled: refused below like any token this server did not make.
  }
  throw invalidArgument('nextToken', 'is not a token this server gave');
}

/** Sorted by start time (then id, so ties have one order) in the asked direction. */
function compare(a: Cursor, b: Cursor): number {
  return a.startedAt - b.startedAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/**
 * One page of `items` (already filtered) after the cursor, and the token of the next page when
 * there are more.
 */
export function paginate<T extends Cursor>(items: T[], q: Pick<ListQuery, 'order' | 'limit' | 'after'>): { page: T[]; nextToken: string | undefined } {
  const dir = q.order === 'asc' ? 1 : -1;
  const sorted = [...items].sort((a, b) => dir * compare(a, b));
  const rest = q.after ? sorted.filter((x) => dir * compare(x, q.after!) > 0) : sorted;
  const page = rest.slice(0, q.limit);
  const last = page.at(-1);
  return { page, nextToken: rest.length > q.limit && last ? encodeCursor(last) : undefined };
}
