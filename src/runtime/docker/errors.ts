import { SbxError } from '../../errors.js';
import type { ErrorCode } from '../../errors.js';
import { NO_ANSWER } from '../answer-deadline.js';

interface EngineError {
  timeoutMs?: number;
  path?: string;
  statusCode?: number;
  code?: string;
  reason?: string;
  json?: { message?: string } | string | null;
  message?: string;
}

const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOENT', 'EACCES', 'ECONNRESET', 'EHOSTUNREACH', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND']);

/** Engine 500s that the caller caused, by the engine's words: a host port another container or process holds. */
const CALLER_FAULTS: Array<[RegExp, ErrorCode, Record<string, unknown>]> = [
  [/port is already allocated|address already in use/i, 'conflict', { field: 'ports' }],
];

/**
 * Turns whatever dockerode or node:http threw into an SbxError with a stable code; the raw
 * error stays as `cause`, its stack never reaches the caller's message.
 *
 * @param what names the object of the call, e.g. `container 3f2a...` or `image busybox`.
 */
export function toSbxError(err: unknown, address: string, what: string): SbxError {
  if (err instanceof SbxError) return err;
  const e = (err ?? {}) as EngineError;
  if (e.code === NO_ANSWER) {
    return new SbxError(
      'runtime_unavailable',
      `${what}: the Docker Engine at '${address}' did not answer within ${e.timeoutMs} ms (GET ${e.path}); it may be stuck: restart dockerd`,
      { cause: err, details: { address, answerTimeoutMs: e.timeoutMs } },
    );
  }
  if (e.code && UNREACHABLE.has(e.code) && e.statusCode === undefined) {
    return new SbxError('runtime_unavailable', `Docker Engine at '${address}' is unreachable (${e.code}); is dockerd running?`, {
      cause: err,
      details: { address },
    });
  }
  const engineMessage = engineText(e);
  const status = e.statusCode;
  const fault = status === 500 ? CALLER_FAULTS.find(([re]) => re.test(engineMessage)) : undefined;
  if (fault) return new SbxError(fault[1], `${what}: ${engineMessage}`, { cause: err, details: { address, status, ...fault[2] } });
  const code: ErrorCode =
    status === 404
      ? 'not_found'
      : status === 409
        ? 'conflict'
        : status === 400
          ? 'invalid_argument'
          : status === 401
            ? 'unauthorized'
            : status === 403
              ? 'forbidden'
              : 'internal';
  return new SbxError(code, `${what}: ${engineMessage}`, { cause: err, details: { address, ...(status ? { status } : {}) } });
}

/** The HTTP status the engine answered a failed call with, or undefined when it did not answer. */
export function engineStatus(err: unknown): number | undefined {
  return (err as EngineError | undefined)?.statusCode;
}

export function engineText(e: EngineError): string {
  if (typeof e.json === 'string' && e.json) return e.json.trim();
  if (typeof e.json === 'object' && e.json?.message) return e.json.message.trim();
  // docker-modem's message is "(HTTP code 500) server error - <engine text>".
  const text = e.message?.replace(/^\(HTTP code \d+\)[^-]*- /, '') || e.reason || 'engine error';
  return text.trim();
}
