/**
 * Checks of caller input to WorkspaceManager, each failing with `invalid_argument` naming the field.
 */
import { randomBytes } from 'node:crypto';
import { invalidArgument } from '../errors.js';

/** Workspace ids (and node names, which are directory names too). */
const ID_PATTERN = /^[a-z0-9][a-z0-9_.-]{0,62}$/;
const MAX_TEXT = 256;
const MAX_LABELS = 64;
const MAX_LABEL_VALUE = 1024;

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
 * Checks a node name before it becomes a directory name.
 *
 * @example
 * checkNodeName('local');
 */
export function checkNodeName(node: unknown): string {
  if (typeof node !== 'string' || node === '') throw invalidArgument('node', 'is required: name the node the workspace lives on');
  if (!ID_PATTERN.test(node)) throw invalidArgument('node', `must match ${ID_PATTERN.source}, got ${JSON.stringify(node)}`);
  return node;
}

/**
 * A required, non-empty, single-line text field of bounded length.
 *
 * @example
 * checkText('notes', 'name');
 */
export function checkText(value: unknown, field: string): string {
  if (typeof value !== 'string' || value.trim() === '') throw invalidArgument(field, 'is required and must be a non-empty string');
  if (value.length > MAX_TEXT) throw invalidArgument(field, `must be at most ${MAX_TEXT} characters`);
  if (/[\0\n\r]/.test(value)) throw invalidArgument(field, 'must be a single line without NUL bytes');
  return value;
}

/**
 * Labels: a plain object of string values, copied.
 *
 * @example
 * checkLabels({ team: 'a' });
 */
export function checkLabels(labels: unknown): Record<string, string> {
  if (typeof labels !== 'object' || labels === null || Array.isArray(labels)) throw invalidArgument('labels', 'must be an object of string values');
  const entries = Object.entries(labels as Record<string, unknown>);
  if (entries.length > MAX_LABELS) throw invalidArgument('labels', `at most ${MAX_LABELS} labels`);
  const copy: Record<string, string> = {};
  for (const [key, value] of entries) {
    if (key === '' || key.length > MAX_TEXT) throw invalidArgument('labels', `keys must be 1..${MAX_TEXT} characters, got ${JSON.stringify(key)}`);
    if (typeof value !== 'string' || value.length > MAX_LABEL_VALUE)
      throw invalidArgument('labels', `value of ${JSON.stringify(key)} must be a string of at most ${MAX_LABEL_VALUE} characters`);
    copy[key] = value;
  }
  return copy;
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
