/**
 * The envd access token of an e2b sandbox (`envdAccessToken` in the control plane's answers,
 * `X-Access-Token` on every envd request): `<key id>.<mac>`, the MAC an HMAC of the id of the API
 * key the control plane gave it to, under `Manager.boxSecret` (an HMAC of the box id and the
 * box's own nonce under a key derived for this purpose).
 *
 * So it is bound to one box's life (a later box under the same id gets another) and to the key
 * that asked for it: each key that creates, connects to or reads a sandbox gets a token of its
 * own, and revoking (deleting) a key ends every token handed to it, at once, while the tokens
 * of the owner's other keys keep working. It needs no storage and survives a server restart.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { SbxError, isSbxError } from '../../errors.js';
import type { LocalBox } from '../../sandbox/index.js';
import type { Manager } from '../../sandbox/manager.js';
import { ActionLimiter } from '../../util/concurrency.js';
import { mayAccess } from '../auth.js';
import type { KeyStore } from '../keys.js';

export const ENVD_TOKEN_LABEL = 'e2b envd access token v1';
const TOKEN = /^([0-9a-f]{16})\.[A-Za-z0-9_-]{43}$/;

/** The envd access token of box `boxId` for the API key `keyId`. */
export async function envdAccessToken(manager: Manager, boxId: string, keyId: string): Promise<string> {
  const mac = createHmac('sha256', await manager.secrets.boxSecret(ENVD_TOKEN_LABEL, boxId))
    .update(keyId)
    .digest('base64url');
  return `${keyId}.${mac}`;
}

/** A Map that keeps its `max` most recently used entries: a full one drops its least recent, never everything. */
class LruMap<K, V> {
  private readonly map = new Map<K, V>();
  constructor(private readonly max: number) {}

  get(key: K): V | undefined {
    const value = this.map.get(key);
    if (value !== undefined) {
      this.map.delete(key);
      this.map.set(key, value);
    }
    return value;
  }

  set(key: K, value: V): void {
    this.map.delete(key);
    if (this.map.size >= this.max) this.map.delete(this.map.keys().next().value as K);
    this.map.set(key, value);
  }

  delete(key: K): void {
    this.map.delete(key);
  }

  entries(): IterableIterator<[K, V]> {
    return this.map.entries();
  }
}

/** The token's box id by token, for requests that name no box (bounded; verified again on every use). */
const byToken = new LruMap<string, string>(1024);
const BY_TOKEN_MAX = 1024;

/**
 * The keys each box's envd access token was handed to (or was used by) since the server started:
 * a signed file URL is looked for among these first, one hash per pair, instead of every key ×
 * every box. Bounded: the boxes used most recently, a few keys each; what falls out (and
 * everything after a restart) is found by the bounded full search, and indexed again.
 */
const issued = new LruMap<string, Set<string>>(10_000);
const ISSUED_KEYS_MAX = 32;

function recordIssued(boxId: string, keyId: string): void {
  const set = issued.get(boxId) ?? new Set<string>();
  if (!set.has(keyId)) {
    if (set.size >= ISSUED_KEYS_MAX) set.delete(set.values().next().value!);
    set.add(keyId);
  }
  issued.set(boxId, set);
}

/** envdAccessToken() for handing out (create, connect, getInfo, fork): its signed file URLs are then found at once. */
export async function issueEnvdAccessToken(manager: Manager, boxId: string, keyId: string): Promise<string> {
  const token = await envdAccessToken(manager, boxId, keyId);
  recordIssued(boxId, keyId);
  return token;
}

/**
 * The id of the box whose envd access token `token` is, for a request without `E2b-Sandbox-Id`:
 * older e2b Python SDKs (2.20 among them) send none after `Sandbox.connect(id)` (e2b's own proxy finds the
 * sandbox by host name, sbx's one envd URL cannot). Only the boxes the token's key may see are
 * tried. A token that names no live key is unauthorized (as a wrong token is); one that does but
 * matches no box is not_found (a removed sandbox's token reads as not running). The caller still
 * verifies the token against the id, as for one named in the header.
 */
export async function sandboxOfToken(manager: Manager, keys: KeyStore, token: string | undefined): Promise<string> {
  if (!token) throw new SbxError('unauthorized', 'X-Access-Token is required');
  const m = TOKEN.exec(token);
  const key = m ? keys.principal(m[1]!) : undefined;
  if (!m || !key) throw new SbxError('unauthorized', 'X-Access-Token is not the access token of this sandbox');
  const cached = byToken.get(token);
  if (cached !== undefined) return cached;
  const keyId = m[1]!;
  const matches = async (box: { id: string; createdAt: string }) => sameText(await cachedToken(manager, box.id, box.createdAt, keyId).catch(() => ''), token);
  // The boxes this key was handed tokens of, the most recent first: one (cached) HMAC each.
  for (const [id, keyIds] of [...issued.entries()].reverse()) {
    if (!keyIds.has(keyId)) continue;
    const box = await manager.get(id).catch(() => undefined);
    if (box && mayAccess(key, box.owner) && (await matches(box))) {
      byToken.set(token, box.id);
      return box.id;
    }
  }
  // Then every box the key may see (a token from before a restart), as a signature's full search:
  // one at a time server-wide, yielding the event loop (key ids are no secret, so anyone could ask).
  const found = await searchSlot(async () => {
    let turnStart = performance.now();
    for (const box of await manager.list(key.role === 'admin' ? {} : { owner: key.owner })) {
      if (performance.now() - turnStart >= SEARCH_TURN_MS) {
        await new Promise((resolve) => setImmediate(resolve));
        turnStart = performance.now();
      }
      if (await matches(box)) return box.id;
    }
    return undefined;
  });
  if (found === undefined) throw new SbxError('not_found', 'the sandbox of this X-Access-Token was not found');
  byToken.set(token, found);
  return found;
}

/**
 * The box `boxId`, once `token` checked out as its envd access token for a key that is still live
 * and may still see the box; unauthorized otherwise. The expected token comes from the token
 * cache (per box life and key), so a request costs no HMAC after the first of its pair.
 *
 * An unknown box is not_found only for a token that could have been issued for it, one naming a
 * live key (a removed box's token cannot be checked any more: its nonce is gone, and the e2b SDK
 * must read a removed sandbox as not running). Any other token for an unknown id is unauthorized
 * with the very answer a known box gives to a wrong token, so ids cannot be probed without a key
 * id; the caller counts not_found toward the address's failure limit too.
 */
export async function verifyEnvdAccessToken(manager: Manager, keys: KeyStore, boxId: string, token: string | undefined): Promise<LocalBox> {
  if (!token) throw new SbxError('unauthorized', 'X-Access-Token is required');
  const wrong = () => new SbxError('unauthorized', 'X-Access-Token is not the access token of this sandbox');
  const m = TOKEN.exec(token);
  const key = m ? keys.principal(m[1]!) : undefined;
  let box: LocalBox;
  try {
    box = await manager.get(boxId);
  } catch (err) {
    if (isSbxError(err) && err.code === 'not_found' && !key) throw wrong();
    throw err;
  }
  if (!m || !sameText(await cachedToken(manager, box.id, box.createdAt, m[1]!), token)) throw wrong();
  if (!key || !mayAccess(key, box.owner)) {
    throw new SbxError('unauthorized', 'X-Access-Token was issued to an API key that has been revoked; connect to the sandbox again with a live key');
  }
  // A token in use (perhaps issued before a restart): its signed URLs are found without a search.
  recordIssued(boxId, m[1]!);
  return box;
}

/** What a signed file URL (`sandbox.downloadUrl`/`uploadUrl`) says: envd's `/files` query, and the operation of its method. */
export interface SignedFileRequest {
  path: string;
  operation: 'read' | 'write';
  /** The `username` parameter; '' when absent (the sandbox's default user). */
  user: string;
  signature: string;
  /** `signature_expiration` (Unix seconds) as the URL gives it, when it has one. */
  expiration?: string | undefined;
}

/**
 * envd's v1 signature of a file URL, as the SDK's getSignature() builds it: `v1_` and the
 * unpadded base64 of sha256(`path:operation:user:token[:expiration]`).
 */
export function fileUrlSignature(req: Omit<SignedFileRequest, 'signature'>, token: string): string {
  const raw = [req.path, req.operation, req.user, token, ...(req.expiration === undefined ? [] : [req.expiration])].join(':');
  return 'v1_' + createHash('sha256').update(raw).digest('base64').replace(/=+$/, '');
}

/** Tokens by box (and its creation, so a later box under the same id is another) and key: two HMACs each, spared per request. */
const tokenCache = new LruMap<string, string>(100_000);
/** The box and key of signatures that matched, so a URL used again costs one check (verified again on every use). */
const bySignature = new LruMap<string, { boxId: string; keyId: string }>(BY_TOKEN_MAX);

async function cachedToken(manager: Manager, boxId: string, createdAt: string, keyId: string): Promise<string> {
  const k = `${boxId}/${createdAt}/${keyId}`;
  let token = tokenCache.get(k);
  if (token === undefined) {
    token = await envdAccessToken(manager, boxId, keyId);
    tokenCache.set(k, token);
  }
  return token;
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** A search gives the event loop a turn after this long (a few hundred hashes, fewer with cold tokens): it never holds it for long. */
const SEARCH_TURN_MS = 5;
/** Full searches at a time, and waiting: beyond these a request is refused (429) before it costs anything. */
const SEARCHES_MAX = 1;
const SEARCH_QUEUE_MAX = 4;
const SEARCH_RETRY_MS = 1000;

/** The full searches running and waiting (server-wide: their cost is the server's, whoever asks). */
const searches = new ActionLimiter(SEARCHES_MAX);

async function searchSlot<T>(fn: () => Promise<T>): Promise<T> {
  if (searches.full && searches.waiting >= SEARCH_QUEUE_MAX) {
    throw new SbxError('limit_exceeded', 'too many signed file URLs are being looked up at once; retry shortly', {
      details: { limit: 'signatureSearches', retryAfterMs: SEARCH_RETRY_MS },
    });
  }
  return searches.run(fn);
}

/** The (box, key) pairs a search tries, and a hash counter that yields the event loop now and then. */
class SignatureSearch {
  private hashes = 0;
  private turnStart = performance.now();
  readonly tried = new Set<string>();
  constructor(
    private readonly manager: Manager,
    private readonly req: SignedFileRequest,
  ) {}

  /** Whether key `keyId`'s token of `box` signed the URL. */
  async matches(box: { id: string; createdAt: string }, keyId: string): Promise<boolean> {
    const pair = `${box.id}/${keyId}`;
    if (this.tried.has(pair)) return false;
    this.tried.add(pair);
    this.hashes++;
    if (performance.now() - this.turnStart >= SEARCH_TURN_MS) {
      await new Promise((resolve) => setImmediate(resolve));
      this.turnStart = performance.now();
    }
    const token = await cachedToken(this.manager, box.id, box.createdAt, keyId).catch(() => '');
    return token !== '' && sameText(fileUrlSignature(this.req, token), this.req.signature);
  }

  get count(): number {
    return this.hashes;
  }
}

/** The number of signatures the last sandboxOfSignature() computed (for measurements). */
export let lastSignatureSearchHashes = 0;

/**
 * The id of the box whose envd access token signed this file URL. The URL names no sandbox (the
 * SDK builds it as `/files` at the root of E2B_SANDBOX_URL's host), so the signature is looked for:
 *
 * 1. among the signatures that matched before (one hash);
 * 2. among the tokens handed out (create, connect, getInfo, fork) or used as X-Access-Token since
 *    the server started: one hash per (box, key) pair indexed, however many boxes there are;
 * 3. only then, for a URL signed before a restart (or whose token fell out of the bounded index),
 *    every live key's token of every box that key may see: a full search, at most SEARCHES_MAX at a
 *    time server-wide with SEARCH_QUEUE_MAX waiting (more: limit_exceeded, 429), yielding the
 *    event loop every SEARCH_TURN_MS. Its match is indexed, so the next use is step 1.
 *
 * The match is checked as an X-Access-Token is (live key, may still see the box). No match is
 * unauthorized ("invalid signature"), which the caller counts as a failed authentication.
 * `search: false` tries only step 1 (the caller's choice for an address over the failure limit).
 * The expiry is the caller's to check.
 */
export async function sandboxOfSignature(manager: Manager, keys: KeyStore, req: SignedFileRequest, opts: { search?: boolean } = {}): Promise<string> {
  const invalid = () =>
    new SbxError('unauthorized', 'invalid signature: it is not the signature of this path, operation and user by the access token of a running sandbox');
  lastSignatureSearchHashes = 0;
  const known = bySignature.get(req.signature);
  if (known) {
    const box = await manager.get(known.boxId).catch(() => undefined);
    const token = box ? await cachedToken(manager, box.id, box.createdAt, known.keyId).catch(() => '') : '';
    if (token !== '' && sameText(fileUrlSignature(req, token), req.signature)) {
      await verifyEnvdAccessToken(manager, keys, known.boxId, token);
      return known.boxId;
    }
    bySignature.delete(req.signature);
  }
  if (opts.search === false) throw invalid();
  const search = new SignatureSearch(manager, req);
  const found = async (boxId: string, keyId: string): Promise<string> => {
    await verifyEnvdAccessToken(manager, keys, boxId, await envdAccessToken(manager, boxId, keyId));
    bySignature.set(req.signature, { boxId, keyId });
    return boxId;
  };
  const boxId = await searchSlot(async () => {
    // Step 2: the issued pairs, the most recent first (a snapshot: the index may change meanwhile).
    for (const [id, keyIds] of [...issued.entries()].reverse().map(([b, k]) => [b, [...k]] as const)) {
      const box = await manager.get(id).catch(() => undefined);
      if (!box) continue;
      for (const keyId of keyIds) {
        const key = keys.principal(keyId);
        if (key && mayAccess(key, box.owner) && (await search.matches(box, keyId))) return { boxId: box.id, keyId };
      }
    }
    // Step 3: every other pair.
    for (const key of keys.list()) {
      for (const box of await manager.list(key.role === 'admin' ? {} : { owner: key.owner })) {
        if (await search.matches(box, key.id)) return { boxId: box.id, keyId: key.id };
      }
    }
    return undefined;
  });
  lastSignatureSearchHashes = search.count;
  if (!boxId) throw invalid();
  return found(boxId.boxId, boxId.keyId);
}
