/** The options of `box.attach()` (library), checked before any dial. */
import { z } from 'zod';
import type { AttachOptions } from '../attach/types.js';
import { durationMs, plainText } from '../runtime/bounds.js';
import { invalidArgument } from '../errors.js';
import { parseOrThrow } from '../util/validation.js';
import { checkPort } from '../runtime/ports.js';

/** An HTTP token (RFC 9110 field name). */
const headerName = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

export const AttachOptionsSchema = z
  .object({
    protocol: z.enum(['ws', 'sse'], { error: "must be 'ws' or 'sse'" }),
    path: plainText(8192)
      .refine((p) => !/\s/.test(p), 'must not contain whitespace')
      .optional(),
    headers: z
      .record(z.string().regex(headerName, 'must be an HTTP header name'), plainText(8192), { error: 'must be an object of header names to strings' })
      .optional(),
    readyTimeoutMs: durationMs.optional(),
    signal: z.instanceof(AbortSignal, { message: 'must be an AbortSignal' }).optional(),
  })
  .strict();

export function validateAttach(port: unknown, opts: unknown): AttachOptions {
  checkPort(port);
  if (opts === null || typeof opts !== 'object') throw invalidArgument('options', 'must be an object with a protocol');
  return parseOrThrow(AttachOptionsSchema, opts, 'options') as AttachOptions;
}

/** `/path?query` of an attach: a leading slash added when missing. */
export function attachPath(path: string | undefined): string {
  if (!path) return '/';
  return path.startsWith('/') ? path : `/${path}`;
}
