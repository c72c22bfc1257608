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
import { createHmac, timingSafeEqual } from 'node:crypto';
import { SbxError, isSbxError } from '../../errors.js';
import type { Manager } from '../../sandbox/manager.js';
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

/** The token's box id by token, for requests that name no box (bounded; verified again on every use). */
const byToken = new Map<string, string>();
const BY_TOKEN_MAX = 1024;

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
  const given = Buffer.from(token);
  for (const box of await manager.list(key.role === 'admin' ? {} : { owner: key.owner })) {
    const expected = Buffer.from(await envdAccessToken(manager, box.id, m[1]!).catch(() => ''));
    if (expected.length === given.length && timingSafeEqual(expected, given)) {
      if (byToken.size >= BY_TOKEN_MAX) byToken.clear();
      byToken.set(token, box.id);
      return box.id;
    }
  }
  throw new SbxError('not_found', 'the sandbox of this X-Access-Token was not found');
}

/**
 * Throws unauthorized unless `token` is an envd access token of `boxId` for a key that is still
 * live and may still see the box.
 *
 * An unknown box is not_found only for a token that could have been issued for it, one naming a
 * live key (a removed box's token cannot be checked any more: its nonce is gone, and the e2b SDK
 * must read a removed sandbox as not running). Any other token for an unknown id is unauthorized
 * with the very answer a known box gives to a wrong token, so ids cannot be probed without a key
 * id; the caller counts not_found toward the address's failure limit too.
 */
export async function verifyEnvdAccessToken(manager: Manager, keys: KeyStore, boxId: string, token: string | undefined): Promise<void> {
  if (!token) throw new SbxError('unauthorized', 'X-Access-Token is required');
  const wrong = () => new SbxError('unauthorized', 'X-Access-Token is not the access token of this sandbox');
  const m = TOKEN.exec(token);
  const key = m ? keys.principal(m[1]!) : undefined;
  const given = Buffer.from(token);
  let expected: Buffer;
  try {
    expected = Buffer.from(await envdAccessToken(manager, boxId, m ? m[1]! : '0'.repeat(16)));
  } catch (err) {
    if (isSbxError(err) && err.code === 'not_found' && !key) throw wrong();
    throw err;
  }
  if (!m || given.length !== expected.length || !timingSafeEqual(given, expected)) throw wrong();
  if (!key || !mayAccess(key, (await manager.get(boxId)).owner)) {
    throw new SbxError('unauthorized', 'X-Access-Token was issued to an API key that has been revoked; connect to the sandbox again with a live key');
  }
}
