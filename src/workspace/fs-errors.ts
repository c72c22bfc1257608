/**
 * One place that turns errno failures of workspace file I/O into SbxErrors with stable codes.
 */
import { SbxError, isSbxError } from '../errors.js';

/**
 * errno code (ENOENT, ...) of a failed Node system call; undefined for anything else, including
 * stream errors that also carry a string `code`.
 *
 * @example
 * if (errnoOf(err) === 'ENOENT') return undefined;
 */
export function errnoOf(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { code, syscall } = err as { code?: unknown; syscall?: unknown };
  return typeof code === 'string' && typeof syscall === 'string' ? code : undefined;
}

/**
 * Wraps a failed system call on a workspace path. SbxErrors pass through unchanged.
 *
 * @example
 * try { await op() } catch (e) { throw toWorkspaceError(e, 'a/b.txt', 'read') }
 */
export function toWorkspaceError(err: unknown, path: string, action: string): SbxError {
  if (isSbxError(err)) return err;
  const shown = path === '' ? 'the workspace root' : JSON.stringify(path);
  const details = { field: 'path', path };
  const opts = { cause: err, details };
  switch (errnoOf(err)) {
    case 'ENOENT':
      return new SbxError('not_found', `cannot ${action} ${shown}: no such file or directory`, opts);
    case 'EEXIST':
      return new SbxError('conflict', `cannot ${action} ${shown}: it already exists`, opts);
    case 'ENOTEMPTY':
      return new SbxError('conflict', `cannot ${action} ${shown}: directory not empty (use removeAll)`, opts);
    case 'EISDIR':
      return new SbxError('invalid_argument', `cannot ${action} ${shown}: it is a directory`, opts);
    case 'ENOTDIR':
      return new SbxError('invalid_argument', `cannot ${action} ${shown}: a component is not a directory`, opts);
    case 'ENXIO': // open(2) of a unix socket
      return new SbxError('invalid_argument', `cannot ${action} ${shown}: not a regular file`, opts);
    case 'ELOOP':
      return symlinkRefused(path, action);
    case 'EINVAL':
      return new SbxError('invalid_argument', `cannot ${action} ${shown}: invalid operation (moving a directory into itself?)`, opts);
    case 'ENAMETOOLONG':
      return new SbxError('invalid_argument', `cannot ${action} ${shown}: name too long`, opts);
    case 'EACCES':
    case 'EPERM':
      return new SbxError('forbidden', `cannot ${action} ${shown}: permission denied on the host`, opts);
    case 'EROFS':
      return new SbxError('forbidden', `cannot ${action} ${shown}: the workspace storage is read-only`, opts);
    case 'EDQUOT':
      return new SbxError('quota_exceeded', `cannot ${action} ${shown}: the node's disk quota is exhausted`, opts);
    case 'ENOSPC':
      return new SbxError('limit_exceeded', `cannot ${action} ${shown}: no space left on the node's disk`, opts);
    default:
      return new SbxError('internal', `cannot ${action} ${shown}: ${err instanceof Error ? err.message : String(err)}`, opts);
  }
}

/**
 * Wraps a failed system call on the workspace storage itself (the data directory, a node's
 * directory), which is the operator's to fix, not the caller's. SbxErrors pass through unchanged.
 *
 * @example
 * await mkdir(base).catch((e) => { throw storageError(e, base, 'create') });
 */
export function storageError(err: unknown, dir: string, action: string): SbxError {
  if (isSbxError(err)) return err;
  const why = err instanceof Error ? err.message : String(err);
  return new SbxError('internal', `workspace storage: cannot ${action} under ${dir}: ${why}; check that the data directory exists and is writable`, {
    cause: err,
    details: { path: dir, errno: errnoOf(err) },
  });
}

/**
 * The refusal for any path that would go through a symbolic link.
 *
 * @example
 * throw symlinkRefused('link/passwd', 'read');
 */
export function symlinkRefused(path: string, action: string): SbxError {
  return new SbxError(
    'invalid_argument',
    `cannot ${action} ${JSON.stringify(path)}: it goes through a symbolic link; workspace file I/O never follows symlinks`,
    { details: { field: 'path', path, reason: 'symlink' } },
  );
}
