/**
 * Lexical half of the path policy: turns a caller's workspace path into a list of plain names,
 * or refuses it. The other half (symlinks, races) is the fd walk in `contained-path.ts`.
 */
import { invalidArgument } from '../errors.js';

const MAX_PATH_BYTES = 4096;
const MAX_NAME_BYTES = 255;

/**
 * Splits a path relative to the workspace root into components, normalising `.`, `//` and
 * `..` that stays inside. '' and '.' are the root (an empty list).
 *
 * Refused with `invalid_argument` (field `path` unless told): absolute paths, NUL bytes,
 * backslashes (never a separator here, and a classic trick against code that treats them as one),
 * `..` that would leave the root, over-long names.
 *
 * @example
 * parseWorkspacePath('src/./lib/../main.ts'); // ['src', 'main.ts']
 * parseWorkspacePath('../etc/passwd');        // throws invalid_argument
 */
export function parseWorkspacePath(input: unknown, field = 'path'): string[] {
  if (typeof input !== 'string') throw invalidArgument(field, 'must be a string');
  if (input.includes('\0')) throw invalidArgument(field, 'must not contain NUL bytes');
  if (input.includes('\\')) throw invalidArgument(field, `backslashes are not allowed in workspace paths (got ${JSON.stringify(input)}); use "/"`);
  if (input.startsWith('/')) throw invalidArgument(field, `must be relative to the workspace root, got absolute ${JSON.stringify(input)}`);
  if (Buffer.byteLength(input) > MAX_PATH_BYTES) throw invalidArgument(field, `longer than ${MAX_PATH_BYTES} bytes`);
  const components: string[] = [];
  for (const part of input.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') {
      if (components.length === 0) throw invalidArgument(field, `${JSON.stringify(input)} leaves the workspace root`);
      components.pop();
      continue;
    }
    if (Buffer.byteLength(part) > MAX_NAME_BYTES) throw invalidArgument(field, `a name in ${JSON.stringify(input)} is longer than ${MAX_NAME_BYTES} bytes`);
    components.push(part);
  }
  return components;
}

/**
 * Like `parseWorkspacePath` but the path must name something below the root, not the root itself.
 *
 * @example
 * const { parent, name } = parseEntryPath('a/b.txt'); // parent ['a'], name 'b.txt'
 */
export function parseEntryPath(input: unknown, field = 'path'): { parent: string[]; name: string; components: string[] } {
  const components = parseWorkspacePath(input, field);
  const name = components.at(-1);
  if (name === undefined) throw invalidArgument(field, 'refers to the workspace root; name something inside it');
  return { parent: components.slice(0, -1), name, components };
}

/**
 * Joins components back into the canonical display form ('' for the root).
 *
 * @example
 * formatWorkspacePath(['a', 'b']); // 'a/b'
 */
export function formatWorkspacePath(components: readonly string[]): string {
  return components.join('/');
}

/**
 * Whether a symlink target, read as relative to the directory `linkDir` (components below a base),
 * stays inside that base. Absolute targets never do.
 *
 * @example
 * symlinkStaysInside(['a'], '../b');    // true  (a/../b = b)
 * symlinkStaysInside(['a'], '../../b'); // false
 */
export function symlinkStaysInside(linkDir: readonly string[], target: string): boolean {
  if (target === '' || target.includes('\0') || target.startsWith('/')) return false;
  const at = [...linkDir];
  for (const part of target.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') {
      if (at.length === 0) return false;
      at.pop();
    } else {
      at.push(part);
    }
  }
  return true;
}
