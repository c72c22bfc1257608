/**
 * The path policy of the box filesystem (`box.files()`), a leaf module (node:path and errors.js
 * only) so that the SDK refuses the same paths with the same errors before anything is sent.
 * Box paths are absolute; the box's kernel and the user's permissions do the rest, so `..` is
 * only resolved, not refused (there is no root to escape from).
 */
import { posix } from 'node:path';
import { invalidArgument } from '../errors.js';

const MAX_PATH_BYTES = 4096;

/**
 * An absolute box path, normalised (`//`, `.`, `..` and a trailing `/` resolved lexically);
 * invalid_argument naming `field` for anything else.
 *
 * @example
 * parseBoxPath('/home/user//app/../x.py'); // '/home/user/x.py'
 */
export function parseBoxPath(path: unknown, field = 'path'): string {
  if (typeof path !== 'string') throw invalidArgument(field, 'must be a string');
  if (path.includes('\0')) throw invalidArgument(field, 'must not contain NUL');
  if (!path.startsWith('/')) throw invalidArgument(field, `must be an absolute path in the box, got ${JSON.stringify(path)}`);
  if (Buffer.byteLength(path) > MAX_PATH_BYTES) throw invalidArgument(field, `must be at most ${MAX_PATH_BYTES} bytes`);
  const normal = posix.normalize(path);
  return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
}

/**
 * A box path that names an entry, not the root directory (writes, removes, renames).
 *
 * @example
 * parseBoxEntryPath('/'); // throws invalid_argument (field 'path')
 */
export function parseBoxEntryPath(path: unknown, field = 'path'): string {
  const p = parseBoxPath(path, field);
  if (p === '/') throw invalidArgument(field, 'must name an entry, not the root directory');
  return p;
}
