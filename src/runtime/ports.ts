/**
 * TCP port numbers, in one place: a service of a box listens on 1-65535; a port to bind may also
 * be 0 (any free one). A leaf (errors.ts only), so the SDK checks ports with it too; bounds.ts
 * builds the schemas' port types on it.
 */
import { invalidArgument } from '../errors.js';

export const MAX_PORT = 65535;

/** Whether `value` is a port number (`bind`: 0 too, "any free port"). */
export function isPort(value: unknown, opts: { bind?: boolean } = {}): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= (opts.bind ? 0 : 1) && value <= MAX_PORT;
}

/** `value` if it is a port number; invalid_argument naming `field` otherwise. */
export function checkPort(value: unknown, field = 'port', opts: { bind?: boolean } = {}): number {
  if (!isPort(value, opts)) throw invalidArgument(field, `must be an integer ${opts.bind ? 0 : 1}-${MAX_PORT}, got ${String(value)}`);
  return value;
}
