/**
 * API server answers and network failures → SbxError, so callers see the same codes as on
 * Docker. The API server's own message is kept: a 403 names the verb, the resource and the
 * identity (`User "system:serviceaccount:sbx-test:sbx" cannot create resource "pods/exec"…`),
 * which is the clear error a least-privilege setup needs.
 */
import { SbxError } from '../../errors.js';
import type { ErrorCode } from '../../errors.js';
import { noAnswerOf } from '../answer-deadline.js';

const BY_STATUS: Record<number, ErrorCode> = {
  400: 'invalid_argument',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  409: 'conflict',
  422: 'invalid_argument',
  429: 'runtime_unavailable',
  503: 'runtime_unavailable',
  504: 'timeout',
};

/** The message of a v1.Status body (text or parsed), else the text itself. */
export function statusMessage(body: unknown): string {
  if (body && typeof body === 'object' && typeof (body as { message?: unknown }).message === 'string') return (body as { message: string }).message;
  if (typeof body === 'string') {
    try {
      return statusMessage(JSON.parse(body) as unknown);
    } catch {
      return body.trim().slice(0, 500);
    }
  }
  return '';
}

/** An HTTP status and body from the API server as an SbxError about `what`. */
export function statusError(status: number, body: unknown, address: string, what: string, cause?: unknown): SbxError {
  const code = BY_STATUS[status] ?? 'internal';
  const message = statusMessage(body) || `HTTP ${status}`;
  return new SbxError(code, `${what} on ${address}: ${message}`, { cause, details: { status } });
}

/** Any failure of a call to the API server. */
export function toSbxError(err: unknown, address: string, what: string): SbxError {
  if (err instanceof SbxError) return err;
  const silent = noAnswerOf(err);
  if (silent) {
    return new SbxError(
      'runtime_unavailable',
      `${what}: the Kubernetes API server of ${address} did not answer (${silent.message}); it may be stuck or overloaded`,
      { cause: err, details: { address } },
    );
  }
  const e = err as { code?: unknown; body?: unknown; errno?: unknown; cause?: { code?: unknown }; message?: string };
  if (typeof e?.code === 'number') return statusError(e.code, e.body, address, what, err);
  const sys = typeof e?.code === 'string' ? e.code : typeof e?.cause?.code === 'string' ? e.cause.code : undefined;
  if (sys && /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT|EAI_AGAIN|EPIPE|ENOENT)$/.test(sys)) {
    return new SbxError('runtime_unavailable', `Kubernetes API server of ${address} is unreachable (${sys}) during ${what}`, {
      cause: err,
      details: { errno: sys },
    });
  }
  if (/certificate|self[- ]signed|unable to verify/i.test(e?.message ?? '')) {
    return new SbxError('runtime_unavailable', `TLS to the Kubernetes API server of ${address} failed during ${what}: ${e.message}`, { cause: err });
  }
  return new SbxError('internal', `${what} on ${address}: ${e?.message ?? String(err)}`, { cause: err });
}
