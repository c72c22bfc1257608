import { SbxError } from '../../errors.js';
import type { ErrorCode } from '../../errors.js';
import { parseImageRef } from '../image-ref.js';
import type { PullProgress } from '../types.js';

/**
 * Maps one engine pull line to a typed event, throwing on an error line: dockerode's
 * followProgress ignores `error`, so a failed pull would otherwise look like a success.
 */
export function toPullProgress(line: Record<string, unknown>, ref: string, address?: string): PullProgress {
  const error = line['error'] ?? (line['errorDetail'] as { message?: unknown } | undefined)?.message;
  if (error !== undefined) throw pullFailure(String(error), ref, address);
  const event: PullProgress = { status: String(line['status'] ?? '') };
  if (typeof line['id'] === 'string') event.id = line['id'];
  const detail = line['progressDetail'] as { current?: unknown; total?: unknown } | undefined;
  if (typeof detail?.current === 'number') event.current = detail.current;
  if (typeof detail?.total === 'number') event.total = detail.total;
  return event;
}

/**
 * Why the engine could not reach a registry, from its words (Go's net errors): the name does not
 * resolve (also what every registry gives on a machine without internet), nothing listens, no
 * answer in time, or a TLS mismatch. Each is the registry's or the network's state, not sbx's fault.
 */
const UNREACHABLE: Array<[RegExp, string]> = [
  [/no such host|server misbehaving|lookup \S+ on \S+: /i, 'its name does not resolve'],
  [/connection refused/i, 'it refused the connection'],
  [/i\/o timeout|Client\.Timeout exceeded|TLS handshake timeout|deadline exceeded/i, 'it did not answer in time'],
  [/network is unreachable|no route to host/i, 'no route to it'],
  [/HTTP response to HTTPS client|x509:|tls:/i, "its TLS does not match (an HTTP registry must be listed in the engine's insecure-registries)"],
];

/**
 * A failed pull as an SbxError with a stable code, from the engine's text: a missing image
 * not_found, refused credentials unauthorized, a rate limit limit_exceeded, a registry the engine
 * cannot reach not_available naming the registry host; only what is none of these is internal.
 */
export function pullFailure(text: string, ref: string, address?: string, cause?: unknown): SbxError {
  const message = text.trim();
  const details = { image: ref, ...(address ? { address } : {}) };
  const unreachable = UNREACHABLE.find(([re]) => re.test(message));
  if (unreachable) {
    const registry = registryHost(message, ref);
    const engine = address ? `the Docker Engine at '${address}'` : 'the Docker Engine';
    return new SbxError('not_available', `pull ${ref}: registry ${registry} cannot be reached from ${engine}: ${unreachable[1]} (${message})`, {
      cause,
      details: { ...details, registry, reason: 'registry_unreachable' },
    });
  }
  const code: ErrorCode = /not found|manifest unknown|does not exist|repository .* not found/i.test(message)
    ? 'not_found'
    : /unauthorized|authentication required|denied/i.test(message)
      ? 'unauthorized'
      : /toomanyrequests|too many requests|rate limit/i.test(message)
        ? 'limit_exceeded'
        : 'internal';
  return new SbxError(code, `pull ${ref}: ${message}`, { cause, details });
}

/** The registry host the engine dialled (`Get "https://HOST/v2/"`), else the reference's. */
function registryHost(message: string, ref: string): string {
  const dialled = /"https?:\/\/([^/"]+)\//.exec(message)?.[1];
  if (dialled) return dialled;
  try {
    return parseImageRef(ref, 'ref').registry ?? 'docker.io';
  } catch {
    return ref.split('/')[0] ?? ref;
  }
}
