import type { z } from 'zod';
import { SbxError } from '../errors.js';

/**
 * Parses `value` with a zod schema and turns the first problem into an `invalid_argument`
 * SbxError naming the field, so every layer reports bad input the same way.
 *
 * @example
 * const spec = parseOrThrow(ContainerSpecSchema, input, 'spec');
 * // `prefix` places the fields of a nested object: parseOrThrow(pool, p, 'pool', 'pools.2')
 */
export function parseOrThrow<S extends z.ZodType>(schema: S, value: unknown, what: string, prefix?: string): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const path = issue && issue.path.length > 0 ? issue.path.map(String).join('.') : '';
  const field = prefix ? (path ? `${prefix}.${path}` : prefix) : path || what;
  const message = issue ? issue.message : 'invalid';
  return throwInvalid(field, message, result.error);
}

function throwInvalid(field: string, message: string, cause: unknown): never {
  throw new SbxError('invalid_argument', `${field}: ${message}`, { cause, details: { field } });
}
