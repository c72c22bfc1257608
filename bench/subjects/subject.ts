/** A box as a subject hands it out; each subject keeps what it needs behind the id. */
export interface BoxRef {
  readonly id: string;
}

export interface ExecOutcome {
  exitCode: number;
  stdoutBytes: number;
}

/**
 * One way of driving boxes: the sbx library, the raw Engine API, later the HTTP API + SDK.
 * Rows are written against this, so comparing a new transport is one more implementation.
 * Methods (not function properties) so that a `Subject<SbxRef>` is usable where a
 * `Subject<BoxRef>` is expected.
 */
export interface Subject<R extends BoxRef = BoxRef> {
  readonly name: string;
  /** Create and start, as `manager.create()` does. */
  create(): Promise<R>;
  exec(box: R, cmd: string[]): Promise<ExecOutcome>;
  info(box: R): Promise<void>;
  stop(box: R): Promise<void>;
  start(box: R): Promise<void>;
  /** Force removal, running or not. */
  remove(box: R): Promise<void>;
  close(): Promise<void>;
}
