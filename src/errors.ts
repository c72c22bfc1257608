/**
 * The one error type of sbx. Callers switch on `code`, never on `message`.
 *
 * @example
 * try { await manager.get('sb-1') } catch (e) {
 *   if (e instanceof SbxError && e.code === 'not_found') { ... }
 * }
 */
export const ERROR_CODES = [
  'invalid_argument',
  'not_found',
  'conflict',
  'limit_exceeded',
  'pool_not_found',
  'pool_in_use',
  'not_available',
  'unauthorized',
  'forbidden',
  'runtime_unavailable',
  'timeout',
  'cancelled',
  'quota_exceeded',
  'internal',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export interface SbxErrorOptions {
  cause?: unknown;
  /** Plain data that helps a caller act on the error (the bad field, the limit, ...). */
  details?: Record<string, unknown>;
}

/** Marks every SbxError, whichever copy of this file made it (sbx-manager's, or the SDK bundle's). */
const BRAND: unique symbol = Symbol.for('sbx.SbxError') as never;

export class SbxError extends Error {
  override readonly name = 'SbxError';
  readonly code: ErrorCode;
  readonly details: Record<string, unknown> | undefined;
  readonly [BRAND] = true;

  constructor(code: ErrorCode, message: string, options: SbxErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.details = options.details;
  }

  /**
   * `err instanceof SbxError` holds for an SbxError of either package: the SDK (sbx-sdk) bundles its
   * own copy of this class, and code that uses the library and the SDK together catches both alike.
   */
  static override [Symbol.hasInstance](value: unknown): value is SbxError {
    return typeof value === 'object' && value !== null && (value as { [BRAND]?: unknown })[BRAND] === true;
  }

  /** JSON form used on the wire; the SDK turns it back into an SbxError. */
  toJSON(): { code: ErrorCode; message: string; details?: Record<string, unknown> } {
    return this.details ? { code: this.code, message: this.message, details: this.details } : { code: this.code, message: this.message };
  }
}

export function isSbxError(err: unknown, code?: ErrorCode): err is SbxError {
  return err instanceof SbxError && (code === undefined || err.code === code);
}

/** A file API's not_found for the path it was given (not a missing box or workspace). */
export function isMissingPath(err: unknown): boolean {
  return err instanceof SbxError && err.code === 'not_found' && err.details?.['field'] === 'path';
}

/**
 * What every file API's `exists` answers from its `stat`: true once it settles, false when it
 * fails with not_found naming the path (anything else, a missing box or no permission, throws).
 */
export async function existsBy(stat: Promise<unknown>): Promise<boolean> {
  try {
    await stat;
    return true;
  } catch (err) {
    if (isMissingPath(err)) return false;
    throw err;
  }
}

/** Shorthand for the most common failure: a bad option, naming the field. */
export function invalidArgument(field: string, message: string): SbxError {
  return new SbxError('invalid_argument', `${field}: ${message}`, { details: { field } });
}

/**
 * How the library asks for an option that would let a refused call through: `pass { force: true }`.
 * An error built with withOptionHint ends its message with these words.
 */
export function libraryOptionHint(option: string): string {
  return `pass { ${option}: true }`;
}

/**
 * An error a call's option would have let through (`force`): `message` followed by how to pass
 * the option, worded for the library. `details.option` names the option and `details.hint` holds
 * the words, so each surface rewords them for its callers with rewordOptionHint (the HTTP API says
 * `?force=true`, the CLI `-f/--force`).
 *
 * @example
 * throw withOptionHint('pool_in_use', `pool 'gpu' has 2 box(es); remove them first, or remove them with the pool:`, 'force', { pool: 'gpu' });
 * // pool 'gpu' has 2 box(es); remove them first, or remove them with the pool: pass { force: true }
 */
export function withOptionHint(code: ErrorCode, message: string, option: string, details: Record<string, unknown> = {}): SbxError {
  const hint = libraryOptionHint(option);
  return new SbxError(code, `${message} ${hint}`, { details: { ...details, option, hint } });
}

/** `err` with its option hint (withOptionHint) in the words of another surface; any other error as it is. */
export function rewordOptionHint(err: SbxError, hint: (option: string) => string): SbxError {
  const option = err.details?.['option'];
  const old = err.details?.['hint'];
  if (typeof option !== 'string' || typeof old !== 'string' || !err.message.includes(old)) return err;
  const words = hint(option);
  if (words === old) return err;
  return new SbxError(err.code, err.message.replace(old, words), { cause: err.cause, details: { ...err.details, hint: words } });
}
