/**
 * What both ends of the node wire (proto/sbx/node/v1/node.proto) agree on besides the messages:
 * how an SbxError crosses (an SbxErrorDetail in the Connect error's details, so the client
 * rethrows the same code, message and details), and what a failure without one means (the
 * connection: runtime_unavailable naming the node).
 */
import { Code, ConnectError } from '@connectrpc/connect';
import { ERROR_CODES, SbxError } from '../../errors.js';
import type { ErrorCode } from '../../errors.js';
import { SbxErrorDetailSchema } from './gen/sbx/node/v1/node_pb.js';

/** Connect codes for SbxError codes, so logs and plain gRPC clients read something close. */
const CONNECT_CODES: Partial<Record<ErrorCode, Code>> = {
  invalid_argument: Code.InvalidArgument,
  not_found: Code.NotFound,
  conflict: Code.AlreadyExists,
  limit_exceeded: Code.ResourceExhausted,
  quota_exceeded: Code.ResourceExhausted,
  not_available: Code.FailedPrecondition,
  unauthorized: Code.Unauthenticated,
  forbidden: Code.PermissionDenied,
  runtime_unavailable: Code.Unavailable,
  timeout: Code.DeadlineExceeded,
  cancelled: Code.Canceled,
};

/** The node side: any error as a ConnectError carrying the SbxError (a non-SbxError is `internal`). */
export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  const e = err instanceof SbxError ? err : new SbxError('internal', `node: ${(err as Error)?.message ?? String(err)}`);
  return new ConnectError(e.message, CONNECT_CODES[e.code] ?? Code.Internal, undefined, [
    { desc: SbxErrorDetailSchema, value: { code: e.code, message: e.message, detailsJson: e.details ? JSON.stringify(e.details) : '' } },
  ]);
}

/**
 * The client side: the node's SbxError as it was thrown there; a failure that carries none is
 * the connection's (refused, reset, deadline passed): runtime_unavailable naming the node, or
 * `cancelled` when the caller's own signal ended the call.
 */
export function fromWireError(err: unknown, node: string, what: string, signal?: AbortSignal): SbxError {
  if (err instanceof SbxError) return err;
  const ce = ConnectError.from(err);
  const detail = ce.findDetails(SbxErrorDetailSchema)[0];
  if (detail && (ERROR_CODES as readonly string[]).includes(detail.code)) {
    let details: Record<string, unknown> | undefined;
    try {
      details = detail.detailsJson ? (JSON.parse(detail.detailsJson) as Record<string, unknown>) : undefined;
    } catch {
      details = undefined;
    }
    return new SbxError(detail.code as ErrorCode, detail.message, details ? { details } : {});
  }
  if (ce.code === Code.Canceled && signal?.aborted) return new SbxError('cancelled', `${what} on ${node} cancelled`, { cause: err });
  const why = ce.code === Code.DeadlineExceeded ? 'did not answer in time' : 'cannot be reached';
  return new SbxError('runtime_unavailable', `node ${node} ${why} (${what}): ${ce.rawMessage}`, { cause: err, details: { node } });
}
