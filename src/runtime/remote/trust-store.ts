/**
 * What a Manager knows of its nodes, in `<dataDir>/nodes/nodes.json` (0600, written atomically):
 * each joined node's name, pinned certificate, the SHA-256 of its credential (never the
 * credential), its address (direct mode), draining and revocation; and the SHA-256 of each
 * outstanding one-time join token with its expiry. Tokens and credentials are 32 random bytes, so
 * a plain SHA-256 is as good as a slow hash; comparisons are constant-time.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { SbxError, invalidArgument } from '../../errors.js';
import { writeFileAtomic } from '../../util/atomic-file.js';
import { certificateFingerprint, isFingerprint } from './identity.js';

/** How a node and its Manager connect: the Manager dials the node, or the node dials the Manager. */
export type NodeMode = 'direct' | 'reverse';

export interface NodeRecord {
  name: string;
  mode: NodeMode;
  /** `host:port` the Manager dials (direct mode). */
  address?: string;
  /** The node's certificate, pinned at join, and its fingerprint. */
  cert: string;
  fingerprint: string;
  credentialHash: string;
  /** At most this many boxes on the node (absent: no count limit, memory still applies). */
  maxBoxes?: number;
  joinedAt: string;
  draining: boolean;
  /** Set when revoked: the node is refused at once and for good (its name stays taken). */
  revokedAt?: string;
}

interface JoinTokenRecord {
  hash: string;
  expiresAt: string;
}

const recordSchema = z.object({
  name: z.string(),
  mode: z.enum(['direct', 'reverse']),
  address: z.string().optional(),
  cert: z.string(),
  fingerprint: z.string(),
  credentialHash: z.string(),
  maxBoxes: z.number().int().positive().optional(),
  joinedAt: z.string(),
  draining: z.boolean(),
  revokedAt: z.string().optional(),
});
const fileSchema = z.object({
  nodes: z.array(recordSchema),
  joinTokens: z.array(z.object({ hash: z.string(), expiresAt: z.string() })),
});

/** Node names: what `sbx node join --name` takes (DNS-label-like, so it fits ids, labels and logs). */
export const NODE_NAME = /^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/;
const TOKEN_PREFIX = 'sbxjoin_';
const CREDENTIAL_PREFIX = 'sbxnode_';
/** A join token lives this long unless asked otherwise. */
export const DEFAULT_JOIN_TOKEN_TTL_MS = 60 * 60_000;

function sha256(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}

/** `host:port` with a port a connection can go to. */
function validAddress(address: string | undefined): boolean {
  const m = /^(\[[0-9a-fA-F:]+\]|[a-zA-Z0-9.-]+):(\d{1,5})$/.exec(address ?? '');
  const port = Number(m?.[2]);
  return m !== null && port >= 1 && port <= 65535;
}

function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex');
  const y = Buffer.from(b, 'hex');
  return x.length === y.length && x.length > 0 && timingSafeEqual(x, y);
}

export interface JoinRequest {
  token: string;
  name: string;
  mode: NodeMode;
  /** The node's certificate (PEM). */
  cert: string;
  /** Direct mode: `host:port` the Manager dials. */
  address?: string;
  maxBoxes?: number;
}

export class TrustStore {
  private nodes = new Map<string, NodeRecord>();
  private tokens: JoinTokenRecord[] = [];
  private loaded = false;
  /** Writes in order: each change is saved after the one before it. */
  private saving: Promise<void> = Promise.resolve();
  private readonly path: string;

  constructor(
    dataDir: string,
    private readonly now: () => number = Date.now,
  ) {
    this.path = join(dataDir, 'nodes', 'nodes.json');
  }

  async load(): Promise<void> {
    if (this.loaded) return;
    try {
      const parsed = fileSchema.parse(JSON.parse(await readFile(this.path, 'utf8')));
      this.nodes = new Map(parsed.nodes.map((n) => [n.name, n]));
      this.tokens = parsed.joinTokens;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new SbxError('internal', `cannot read ${this.path}: ${(err as Error).message}`);
    }
    this.loaded = true;
  }

  /** Whether the store is on disk (a node joined once). */
  exists(): boolean {
    return existsSync(this.path);
  }

  list(): NodeRecord[] {
    return [...this.nodes.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  get(name: string): NodeRecord | undefined {
    return this.nodes.get(name);
  }

  /** A new one-time join token (shown once; only its hash is kept), valid for `ttlMs`. */
  async createJoinToken(ttlMs = DEFAULT_JOIN_TOKEN_TTL_MS): Promise<{ token: string; expiresAt: string }> {
    await this.load();
    const token = TOKEN_PREFIX + randomBytes(32).toString('base64url');
    const expiresAt = new Date(this.now() + ttlMs).toISOString();
    this.pruneTokens();
    this.tokens.push({ hash: sha256(token), expiresAt });
    await this.save();
    return { token, expiresAt };
  }

  /**
   * Admits a node: a well-formed request (else invalid_argument, the token kept), an outstanding
   * token (spent here, even when the name is then refused, so no token is tried twice), a free name (a joined node's name is never taken over,
   * not even after revocation), a certificate and address no other node has, a well-formed certificate. Returns the node's credential, shown
   * this once.
   */
  async join(req: JoinRequest): Promise<{ record: NodeRecord; credential: string }> {
    await this.load();
    // The request's own shape first: a typo spends no token.
    if (!NODE_NAME.test(req.name)) throw invalidArgument('name', 'a node name is 1-40 of a-z, 0-9 and -, starting and ending with a letter or digit');
    if (req.mode === 'direct' && !validAddress(req.address))
      throw invalidArgument('address', 'a direct node says the host:port (port 1-65535) its Manager dials');
    let fingerprint: string;
    try {
      fingerprint = certificateFingerprint(req.cert);
    } catch {
      throw invalidArgument('cert', 'not a PEM certificate');
    }
    if (!isFingerprint(fingerprint)) throw invalidArgument('cert', 'not a PEM certificate');
    this.pruneTokens();
    const hash = sha256(String(req.token));
    const i = this.tokens.findIndex((t) => sameHash(t.hash, hash));
    if (i < 0) throw new SbxError('unauthorized', 'the join token is unknown, spent or expired');
    this.tokens.splice(i, 1);
    await this.save();
    if (this.nodes.has(req.name))
      throw new SbxError('conflict', `a node named '${req.name}' has joined already; pick another name`, { details: { node: req.name } });
    // One identity, one node: a second record with a node's certificate or address would let
    // whoever holds a token capture that node's connections or its boxes' addresses.
    const twin = [...this.nodes.values()].find((n) => n.fingerprint === fingerprint || (req.mode === 'direct' && n.address === req.address));
    if (twin) throw new SbxError('conflict', `node '${twin.name}' joined with this certificate or address already`, { details: { node: twin.name } });
    const credential = CREDENTIAL_PREFIX + randomBytes(32).toString('base64url');
    const record: NodeRecord = {
      name: req.name,
      mode: req.mode,
      ...(req.mode === 'direct' ? { address: req.address } : {}),
      cert: req.cert,
      fingerprint,
      credentialHash: sha256(credential),
      ...(req.maxBoxes ? { maxBoxes: req.maxBoxes } : {}),
      joinedAt: new Date(this.now()).toISOString(),
      draining: false,
    };
    this.nodes.set(record.name, record);
    await this.save();
    return { record, credential };
  }

  /** Whether `credential` is the named node's (constant-time), and the node is not revoked. */
  verify(name: string, credential: string): boolean {
    const r = this.nodes.get(name);
    return r !== undefined && !r.revokedAt && sameHash(r.credentialHash, sha256(credential));
  }

  async setDraining(name: string, draining: boolean): Promise<NodeRecord> {
    const r = this.require(name);
    r.draining = draining;
    await this.save();
    return r;
  }

  async revoke(name: string): Promise<NodeRecord> {
    const r = this.require(name);
    r.revokedAt ??= new Date(this.now()).toISOString();
    await this.save();
    return r;
  }

  private require(name: string): NodeRecord {
    const r = this.nodes.get(name);
    if (!r) throw new SbxError('not_found', `no node named '${name}'`, { details: { node: name } });
    return r;
  }

  private pruneTokens(): void {
    const now = this.now();
    this.tokens = this.tokens.filter((t) => Date.parse(t.expiresAt) > now);
  }

  private save(): Promise<void> {
    const data = JSON.stringify({ nodes: this.list(), joinTokens: this.tokens }, null, 2);
    // In order, and a failed write does not stop the next one (each writes the whole state).
    const write = this.saving.catch(() => undefined).then(() => writeFileAtomic(this.path, data, 0o600));
    this.saving = write;
    return write;
  }
}
