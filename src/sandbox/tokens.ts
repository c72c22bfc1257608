import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { SbxError } from '../errors.js';

export interface BoxTokenGrant {
  boxId: string;
  nonce: string;
  /** Expiry, epoch ms. */
  expiresAt: number;
}

const PREFIX = 'sbxb1';

/**
 * Issues and verifies box tokens: `sbxb1.<boxId>.<nonce>.<expiry>.<hmac>`. A token is bound to
 * one box id and to that box's nonce (a fresh random value per box, kept in its labels), so it
 * dies with the box: a new box under the same id does not accept an old box's token.
 *
 * @example
 * const tokens = new BoxTokenService(secret);
 * const t = tokens.issue('sb-1', nonce, 3_600_000);
 * tokens.verify(t).boxId // 'sb-1'
 */
export class BoxTokenService {
  constructor(
    private readonly secret: Buffer,
    private readonly now: () => number = Date.now,
  ) {
    if (secret.length < 16) throw new SbxError('invalid_argument', 'tokenSecret: must be at least 16 bytes', { details: { field: 'tokenSecret' } });
  }

  static newNonce(): string {
    return randomBytes(9).toString('base64url');
  }

  issue(boxId: string, nonce: string, ttlMs: number): string {
    const body = `${PREFIX}.${boxId}.${nonce}.${this.now() + ttlMs}`;
    return `${body}.${this.sign(body)}`;
  }

  /** Checks signature and expiry; whether the box still exists is the Manager's question. */
  verify(token: string): BoxTokenGrant {
    const parts = typeof token === 'string' ? token.split('.') : [];
    // Box ids may contain dots, so count from both ends.
    if (parts.length < 5 || parts[0] !== PREFIX) throw unauthorized('malformed box token');
    const sig = parts[parts.length - 1] ?? '';
    const expiry = Number(parts[parts.length - 2]);
    const nonce = parts[parts.length - 3] ?? '';
    const boxId = parts.slice(1, parts.length - 3).join('.');
    const body = token.slice(0, token.length - sig.length - 1);
    const want = Buffer.from(this.sign(body));
    const got = Buffer.from(sig);
    if (want.length !== got.length || !timingSafeEqual(want, got)) throw unauthorized('box token signature is invalid');
    if (!Number.isFinite(expiry) || expiry <= this.now()) throw unauthorized('box token has expired; refresh it before it expires');
    return { boxId, nonce, expiresAt: expiry };
  }

  private sign(body: string): string {
    return createHmac('sha256', this.secret).update(body).digest('base64url');
  }
}

function unauthorized(message: string): SbxError {
  return new SbxError('unauthorized', message);
}
