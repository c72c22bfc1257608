/**
 * Checks of caller input to WorkspaceManager, each failing with `invalid_argument` naming the field.
 */
import { randomBytes } from 'node:crypto';
import { invalidArgument } from '../errors.js';
import { WORKSPACE_ID_PATTERN as ID_PATTERN } from './schemas.js';

/**
 * A fresh `ws-<random>` id.
 *
 * @example
 * newWorkspaceId(); // 'ws-5f3a9c1e0b7d'
 */
export function newWorkspaceId(): string {
  return `ws-${randomBytes(6).toString('hex')}`;
}

/**
 * Checks an explicit workspace id (also used as a directory name).
 *
 * @example
 * checkWorkspaceId('ws-abc123'); // ok
 * checkWorkspaceId('../x');      // throws invalid_argument (field id)
 */
export function checkWorkspaceId(id: unknown, field = 'id'): string {
  if (typeof id !== 'string' || !ID_PATTERN.test(id)) throw invalidArgument(field, `must match ${ID_PATTERN.source}, got ${JSON.stringify(id)}`);
  return id;
}

/**
 * A quota in bytes; 0 means none (returned as undefined).
 *
 * @example
 * checkQuota(1 << 30); // 1073741824
 */
export function checkQuota(value: unknown, field = 'quotaBytes'): number | undefined {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw invalidArgument(field, 'must be a non-negative integer number of bytes');
  return value === 0 ? undefined : value;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * Strictly checked base64 (whitespace ignored) as bytes; anything else is `invalid_argument` on `data`.
 *
 * @example
 * decodeBase64('aGk='); // <Buffer 68 69>
 */
export function decodeBase64(base64: unknown): Buffer {
  const compact = typeof base64 === 'string' ? base64.replace(/\s+/g, '') : undefined;
  if (compact === undefined || compact.length % 4 !== 0 || !BASE64.test(compact)) throw invalidArgument('data', 'is not valid base64');
  return Buffer.from(compact, 'base64');
}
