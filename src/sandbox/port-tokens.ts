/**
 * Signed access tokens for one port of one box (the authenticated proxy): a browser that cannot
 * send an API key gets a short-lived URL instead. `sbxp1.<base64url box id>.<port>.<expiresAt>.<mac>`,
 * the MAC an HMAC-SHA256 of everything before it under a key derived from the Manager's
 * box-token secret with its own label (portTokenKey), so a box token and a port token can never
 * stand for each other.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { SbxError } from '../errors.js';

export const PORT_TOKEN_PREFIX = 'sbxp1.';
const LABEL = 'sbx port token v1';

export interface PortTokenClaim {
  boxId: string;
  port: number;
  /** Epoch ms. */
  expiresAt: number;
}

/** The port-token key: HMAC(secret, label), never the raw secret. */
export function portTokenKey(secret: Buffer): Buffer {
  return createHmac('sha256', secret).update(LABEL).digest();
}

function mac(key: Buffer, body: string): Buffer {
  return createHmac('sha256', key).update(body).digest();
}

export function signPortToken(key: Buffer, claim: PortTokenClaim): string {
  const body = `${PORT_TOKEN_PREFIX}${Buffer.from(claim.boxId, 'utf8').toString('base64url')}.${claim.port}.${claim.expiresAt}`;
  return `${body}.${mac(key, body).toString('base64url')}`;
}

/** Throws unauthorized (malformed, forged, expired) or forbidden (a valid token for another box or port). */
export function verifyPortToken(key: Buffer, token: string, want: { boxId: string; port: number; now: number }): void {
  const parts = token.length <= 512 && token.startsWith(PORT_TOKEN_PREFIX) ? token.slice(PORT_TOKEN_PREFIX.length).split('.') : [];
  if (parts.length !== 4 || !/^\d{1,5}$/.test(parts[1]!) || !/^\d{1,15}$/.test(parts[2]!) || !/^[A-Za-z0-9_-]{43}$/.test(parts[3]!)) {
    throw new SbxError('unauthorized', 'port access token is malformed');
  }
  const body = `${PORT_TOKEN_PREFIX}${parts[0]}.${parts[1]}.${parts[2]}`;
  const given = Buffer.from(parts[3]!, 'base64url');
  const expected = mac(key, body);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw new SbxError('unauthorized', 'port access token is not valid');
  if (Number(parts[2]) <= want.now) throw new SbxError('unauthorized', 'port access token has expired; ask for a new URL');
  const boxId = Buffer.from(parts[0]!, 'base64url').toString('utf8');
  if (boxId !== want.boxId || Number(parts[1]) !== want.port) {
    throw new SbxError('forbidden', 'this port access token is for another box or port');
  }
}
