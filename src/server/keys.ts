/**
 * API keys: random 256-bit secrets shown once, stored only as SHA-256 hashes in
 * `<dataDir>/api-keys.json` (mode 0600, written atomically: temp file, fsync, rename, fsync dir).
 *
 * A key reads `sbxk_<id>_<secret>`: the id finds the record, the secret's hash is compared with
 * `timingSafeEqual`. A fast hash is enough because the secret is 256 random bits, not a password.
 *
 * The same key has an e2b spelling, `e2b_<id><secret as 64 hex>`, for code written for the e2b
 * SDK (which sends it as `X-API-KEY`): the same id and the same 32 secret bytes, so it verifies
 * against the same hash and one key store serves both APIs.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdir, open, readFile, rename } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { SbxError } from '../errors.js';

export type Role = 'admin' | 'user';

export interface ApiKeyRecord {
  id: string;
  name: string;
  role: Role;
  /** The owner name a user key acts as; admins act as themselves (`admin`) unless they say otherwise. */
  owner: string;
  createdAt: string;
  /** hex SHA-256 of the secret part. */
  hash: string;
}

/** What the API shows of a key: everything but its hash. */
export type ApiKeyInfo = Omit<ApiKeyRecord, 'hash'>;

export interface Principal {
  kind: 'key';
  keyId: string;
  name: string;
  role: Role;
  owner: string;
}

const KEY_RE = /^sbxk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;
const E2B_KEY_RE = /^e2b_([0-9a-f]{16})([0-9a-f]{64})$/;

/** A new key as the API shows it once: both spellings. */
export type CreatedKey = ApiKeyInfo & { key: string; e2bKey: string };

/** The id and the secret (as sbx spells it, the text whose hash is stored) of a key in either spelling. */
function parseKey(presented: string): { id: string; secret: string } | undefined {
  const sbx = KEY_RE.exec(presented);
  if (sbx) return { id: sbx[1]!, secret: sbx[2]! };
  const e2b = E2B_KEY_RE.exec(presented);
  if (e2b) return { id: e2b[1]!, secret: Buffer.from(e2b[2]!, 'hex').toString('base64url') };
  return undefined;
}
export const KEY_FILE = 'api-keys.json';

function principalOf(record: ApiKeyRecord): Principal {
  return { kind: 'key', keyId: record.id, name: record.name, role: record.role, owner: record.owner };
}

function sha256(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

export class KeyStore {
  private keys = new Map<string, ApiKeyRecord>();
  private writing: Promise<void> = Promise.resolve();
  readonly file: string;

  constructor(dataDir: string) {
    this.file = join(dataDir, KEY_FILE);
  }

  async load(): Promise<void> {
    let text: string;
    try {
      text = await readFile(this.file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    const parsed = JSON.parse(text) as { keys?: ApiKeyRecord[] };
    this.keys = new Map((parsed.keys ?? []).map((k) => [k.id, k]));
  }

  get size(): number {
    return this.keys.size;
  }

  list(): ApiKeyInfo[] {
    return [...this.keys.values()].map(({ hash: _hash, ...info }) => info);
  }

  /** Creates a key and persists its hash; the returned `key` is the only copy of the secret. */
  async create(input: { name: string; role: Role; owner?: string | undefined }): Promise<CreatedKey> {
    const id = randomBytes(8).toString('hex');
    const secretBytes = randomBytes(32);
    const secret = secretBytes.toString('base64url');
    const record: ApiKeyRecord = {
      id,
      name: input.name,
      role: input.role,
      owner: input.owner ?? (input.role === 'admin' ? 'admin' : input.name),
      createdAt: new Date().toISOString(),
      hash: sha256(secret).toString('hex'),
    };
    this.keys.set(id, record);
    try {
      await this.persist();
    } catch (err) {
      this.keys.delete(id);
      throw err;
    }
    const { hash: _hash, ...info } = record;
    return { ...info, key: `sbxk_${id}_${secret}`, e2bKey: `e2b_${id}${secretBytes.toString('hex')}` };
  }

  /** Revokes a key; effective for the next request. */
  async remove(id: string): Promise<void> {
    const record = this.keys.get(id);
    if (!record) throw new SbxError('not_found', `key '${id}' not found`, { details: { id } });
    this.keys.delete(id);
    try {
      await this.persist();
    } catch (err) {
      this.keys.set(id, record);
      throw err;
    }
  }

  /**
   * The principal of the live key with this id, or undefined once it is revoked: what a signed URL
   * or an envd access token minted for that key checks on every use.
   */
  principal(id: string): Principal | undefined {
    const record = this.keys.get(id);
    return record ? principalOf(record) : undefined;
  }

  /** The principal a presented key (either spelling) stands for, or undefined. Constant-time in the secret. */
  verify(presented: string): Principal | undefined {
    const m = parseKey(presented);
    // Hash even when the shape is wrong, so a miss costs the same as a hit.
    const got = sha256(m ? m.secret : presented);
    const record = m ? this.keys.get(m.id) : undefined;
    const want = record ? Buffer.from(record.hash, 'hex') : Buffer.alloc(32);
    const same = timingSafeEqual(got, want);
    if (!record || !same) return undefined;
    return principalOf(record);
  }

  private persist(): Promise<void> {
    const next = this.writing.then(() => this.writeFile());
    this.writing = next.catch(() => undefined);
    return next;
  }

  private async writeFile(): Promise<void> {
    const dir = dirname(this.file);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const tmp = `${this.file}.tmp-${randomBytes(6).toString('hex')}`;
    const fh = await open(tmp, 'wx', 0o600);
    try {
      await fh.writeFile(JSON.stringify({ version: 1, keys: [...this.keys.values()] }, null, 2) + '\n');
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, this.file);
    const d = await open(dir, 'r');
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  }
}
