/**
 * Signed access tokens for one port of one box (the authenticated proxy, VNC): a browser that
 * cannot send an API key gets a short-lived URL instead.
 * `sbxp2.<base64url box id>.<box nonce>.<port>.<expiresAt>.<key id>.<mac>`, the MAC an
 * HMAC-SHA256 of everything before it under a key derived from the Manager's box-token secret
 * with its own label (portTokenKey), so a box token and a port token can never stand for each
 * other.
 *
 * A token is bound to one box's life, not just its id: the nonce is the box's own random
 * `sbx.token-nonce`, so a later box under the same id (anyone's) refuses it (Manager.verifyPortToken).
 * It also names the API key that asked for it, so revoking that key ends every URL it signed
 * (the server checks; src/server/port-auth.ts). An empty key id is a token the Manager signed for
 * its own process (the library's box.proxy()/box.vnc(), no key involved).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { SbxError } from '../errors.js';

export const PORT_TOKEN_PREFIX = 'sbxp2.';
const LABEL = 'sbx port token v1';

export interface PortGrant {
  boxId: string;
  /** The box's token nonce (`sbx.token-nonce`): a later box under the same id has another. */
  nonce: string;
  port: number;
  /** Epoch ms. */
  expiresAt: number;
  /** The id of the API key the token was signed for; '' when the Manager signed it for its own process. */
  keyId: string;
}

/** The port-token key: HMAC(secret, label), never the raw secret. */
export function portTokenKey(secret: Buffer): Buffer {
  return createHmac('sha256', secret).update(LABEL).digest();
}

function mac(key: Buffer, body: string): Buffer {
  return createHmac('sha256', key).update(body).digest();
}

const NONCE = /^[A-Za-z0-9_-]{1,64}$/;
const KEY_ID = /^([0-9a-f]{16})?$/;

export function signPortToken(key: Buffer, grant: PortGrant): string {
  if (!NONCE.test(grant.nonce) || !KEY_ID.test(grant.keyId))
    throw new SbxError('internal', 'a port token needs the box nonce and a key id of 16 hex digits (or none)');
  const body = `${PORT_TOKEN_PREFIX}${Buffer.from(grant.boxId, 'utf8').toString('base64url')}.${grant.nonce}.${grant.port}.${grant.expiresAt}.${grant.keyId}`;
  return `${body}.${mac(key, body).toString('base64url')}`;
}

/**
 * What the token grants once its MAC, expiry, box id and port check out. Throws unauthorized
 * (malformed, forged, expired, or a token of an older sbx) or forbidden (a valid token for another
 * box or port). Whether its box is still the one it was signed for, and its key still live, is
 * for the caller (Manager.verifyPortToken, the server).
 */
export function verifyPortToken(key: Buffer, token: string, want: { boxId: string; port: number; now: number }): PortGrant {
  const parts = token.length <= 512 && token.startsWith(PORT_TOKEN_PREFIX) ? token.slice(PORT_TOKEN_PREFIX.length).split('.') : [];
  if (
    parts.length !== 6 ||
    !NONCE.test(parts[1]!) ||
    !/^\d{1,5}$/.test(parts[2]!) ||
    !/^\d{1,15}$/.test(parts[3]!) ||
    !KEY_ID.test(parts[4]!) ||
    !/^[A-Za-z0-9_-]{43}$/.test(parts[5]!)
  ) {
    throw new SbxError('unauthorized', 'port access token is malformed (or from an older sbx); ask for a new URL');
  }
  const body = `${PORT_TOKEN_PREFIX}${parts.slice(0, 5).join('.')}`;
  // Compared as text: base64url decoding ignores the last character's two spare bits, so bytes
  // would let four spellings of one MAC through (one token, four strings).
  const given = Buffer.from(parts[5]!, 'utf8');
  const expected = Buffer.from(mac(key, body).toString('base64url'), 'utf8');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw new SbxError('unauthorized', 'port access token is not valid');
  const grant: PortGrant = {
    boxId: Buffer.from(parts[0]!, 'base64url').toString('utf8'),
    nonce: parts[1]!,
    port: Number(parts[2]),
    expiresAt: Number(parts[3]),
    keyId: parts[4]!,
  };
  if (grant.expiresAt <= want.now) throw new SbxError('unauthorized', 'port access token has expired; ask for a new URL');
  if (grant.boxId !== want.boxId || grant.port !== want.port) {
    throw new SbxError('forbidden', 'this port access token is for another box or port');
  }
  return grant;
}
