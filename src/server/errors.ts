/**
 * The one place where sbx error codes become HTTP statuses, and where everything a request can
 * throw (SbxError, fastify's own validation and parsing errors, anything else) becomes the wire
 * body `{"error":{"code","message","details"?}}`.
 */
import type { FastifyError } from 'fastify';
import { SbxError, rewordOptionHint } from '../errors.js';
import type { ErrorCode } from '../errors.js';

export const STATUS_BY_CODE: Record<ErrorCode, number> = {
  invalid_argument: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  pool_not_found: 404,
  conflict: 409,
  pool_in_use: 409,
  quota_exceeded: 413,
  limit_exceeded: 429,
  cancelled: 499,
  internal: 500,
  not_available: 503,
  runtime_unavailable: 503,
  timeout: 504,
};

export interface ErrorBody {
  error: { code: ErrorCode; message: string; details?: Record<string, unknown> };
}

export interface MappedError {
  status: number;
  body: ErrorBody;
  /** The SbxError the body came from. */
  error: SbxError;
}

/** Fastify's own error codes for bad requests, with the status they deserve. */
const FASTIFY_CLIENT_ERRORS: Record<string, number> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 413,
  FST_ERR_CTP_INVALID_JSON_BODY: 400,
  FST_ERR_CTP_EMPTY_JSON_BODY: 400,
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 415,
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 400,
  FST_ERR_CTP_EMPTY_TYPE: 415,
  FST_ERR_CTP_INVALID_TYPE: 415,
  FST_ERR_VALIDATION: 400,
  FST_ERR_BAD_URL: 400,
  FST_ERR_ASYNC_CONSTRAINT: 400,
};

/**
 * The Retry-After header's value (whole seconds, rounded up) for an error that says when to try
 * again (limit_exceeded with `details.retryAfterMs`, as the auth-failure limiter throws), else
 * undefined. Every route family that answers such an error sends it (the API, e2b, envd).
 */
export function retryAfterSeconds(err: unknown): string | undefined {
  if (!(err instanceof SbxError) || err.code !== 'limit_exceeded') return undefined;
  const ms = err.details?.['retryAfterMs'];
  return typeof ms === 'number' ? String(Math.ceil(ms / 1000)) : undefined;
}

/** An option that would let a refused call through, as an HTTP caller gives it: the routes' flags are query parameters. */
function httpOptionHint(option: string): string {
  return `add ?${option}=true`;
}

/** Turns anything thrown while serving a request into a status and an error body. */
export function mapError(err: unknown): MappedError {
  if (err instanceof SbxError) {
    const e = rewordOptionHint(err, httpOptionHint);
    return { status: STATUS_BY_CODE[e.code] ?? 500, body: { error: e.toJSON() }, error: e };
  }
  const fe = err as Partial<FastifyError> & { validation?: Array<{ instancePath?: string; message?: string; params?: Record<string, unknown> }> };
  if (fe && typeof fe === 'object' && typeof fe.code === 'string' && fe.code in FASTIFY_CLIENT_ERRORS) {
    const status = FASTIFY_CLIENT_ERRORS[fe.code]!;
    const sbx = fromFastify(fe, status);
    return { status, body: { error: sbx.toJSON() }, error: sbx };
  }
  // Errors from body parsing that fastify passes on with a 4xx status (e.g. aborted uploads).
  if (fe && typeof fe === 'object' && typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    const sbx = new SbxError('invalid_argument', fe.message ?? 'bad request', { cause: err });
    return { status: fe.statusCode, body: { error: sbx.toJSON() }, error: sbx };
  }
  const sbx = new SbxError('internal', 'internal error; the server log has the details', { cause: err });
  return { status: 500, body: { error: sbx.toJSON() }, error: sbx };
}

/** Where a request field was, as OpenAPI's `in` says it: fastify's validation contexts by name. */
const PLACE: Record<string, string> = { body: 'body', querystring: 'query', params: 'path', headers: 'header' };
const UNKNOWN: Record<string, string> = { body: 'unknown field', query: 'unknown query parameter', path: 'unknown path parameter', header: 'unknown header' };

interface ValidationIssue {
  instancePath?: string;
  keyword?: string;
  message?: string;
  params?: Record<string, unknown>;
}

function fromFastify(fe: Partial<FastifyError> & { validation?: ValidationIssue[] }, status: number): SbxError {
  if (fe.code === 'FST_ERR_VALIDATION') {
    // The field as the caller wrote it (`image`, not `body.image`); `details.in` says where it was.
    const first = fe.validation?.[0];
    const place = PLACE[fe.validationContext ?? 'body'] ?? 'body';
    const path = (first?.instancePath ?? '').replace(/^\//, '').replace(/\//g, '.');
    const unknown = first?.keyword === 'unrecognized_keys' && Array.isArray(first.params?.['keys']) ? String(first.params['keys'][0]) : undefined;
    const field = unknown !== undefined ? (path ? `${path}.${unknown}` : unknown) : path || place;
    const message = unknown !== undefined ? UNKNOWN[place]! : (first?.message ?? fe.message ?? 'invalid');
    return new SbxError('invalid_argument', `${field}: ${message}`, { cause: fe, details: { field, in: place } });
  }
  if (fe.code === 'FST_ERR_CTP_BODY_TOO_LARGE')
    return new SbxError('invalid_argument', 'body is larger than the server accepts', { cause: fe, details: { field: 'body', limit: 'bodyLimitBytes' } });
  if (status === 415)
    return new SbxError('invalid_argument', `${fe.message ?? 'unsupported media type'}; send application/json`, {
      cause: fe,
      details: { field: 'content-type' },
    });
  return new SbxError('invalid_argument', fe.message ?? 'bad request', { cause: fe, details: { field: 'body' } });
}
