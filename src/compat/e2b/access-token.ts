/**
 * The envd access token of an e2b sandbox (`envdAccessToken` in the control plane's answers,
 * `X-Access-Token` on every envd request): `Manager.boxSecret`, an HMAC of the box id and the
 * box's own nonce under a key derived for this purpose. It is bound to one box (a later box under
 * the same id gets another), needs no storage, survives a server restart, and lives as long as
 * the box does. An unknown box is not_found.
 */
import { timingSafeEqual } from 'node:crypto';
import { SbxError } from '../../errors.js';
import type { Manager } from '../../sandbox/manager.js';

export const ENVD_TOKEN_LABEL = 'e2b envd access token v1';

export async function envdAccessToken(manager: Manager, boxId: string): Promise<string> {
  return (await manager.boxSecret(ENVD_TOKEN_LABEL, boxId)).toString('base64url');
}

/** Throws unauthorized unless `token` is the envd access token of `boxId`. */
export async function verifyEnvdAccessToken(manager: Manager, boxId: string, token: string | undefined): Promise<void> {
  if (!token) throw new SbxError('unauthorized', 'X-Access-Token is required');
  const given = Buffer.from(token);
  const expected = Buffer.from(await envdAccessToken(manager, boxId));
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    throw new SbxError('unauthorized', 'X-Access-Token is not the access token of this sandbox');
  }
}
