import { SbxError } from '../../errors.js';
import type { PullProgress } from '../types.js';

/**
 * Maps one engine pull line to a typed event, throwing on an error line: dockerode's
 * followProgress ignores `error`, so a failed pull would otherwise look like a success.
 */
export function toPullProgress(line: Record<string, unknown>, ref: string): PullProgress {
  const error = line['error'] ?? (line['errorDetail'] as { message?: unknown } | undefined)?.message;
  if (error !== undefined) {
    const message = String(error);
    const code = /not found|manifest unknown|does not exist|repository .* not found/i.test(message)
      ? 'not_found'
      : /unauthorized|authentication required|denied/i.test(message)
        ? 'unauthorized'
        : 'internal';
    throw new SbxError(code, `pull ${ref}: ${message}`, { details: { image: ref } });
  }
  const event: PullProgress = { status: String(line['status'] ?? '') };
  if (typeof line['id'] === 'string') event.id = line['id'];
  const detail = line['progressDetail'] as { current?: unknown; total?: unknown } | undefined;
  if (typeof detail?.current === 'number') event.current = detail.current;
  if (typeof detail?.total === 'number') event.total = detail.total;
  return event;
}
