export type Mode = 'quick' | 'full';

/** Anything a row can run against: a box subject, a file subject, later an HTTP one. */
export interface Named {
  readonly name: string;
}

/**
 * A benchmark row as data. Only `op` is timed; `setup`/`teardown` run once per subject,
 * `before`/`after` around every op (making the box a Remove removes, removing what a
 * Create made). A row is run against two subjects, interleaved, so adding a transport is
 * a new subject, not new rows.
 */
export interface Row<S extends Named, Shared = undefined, Item = undefined> {
  readonly name: string;
  readonly group: RowGroup;
  /** Measured ops per side. */
  readonly iterations: Readonly<Record<Mode, number>>;
  /** Ops per side thrown away first (connection set-up, JIT, engine caches). Default 2. */
  readonly warmup?: number;
  /** The seed's number for this row, from another machine: its "Local" column unless `seedColumn` says otherwise. */
  readonly seedMs?: number;
  /** The column of the seed's table `seedMs` comes from (default `local`; the Remote rows: `remote`). */
  readonly seedColumn?: SeedColumn;
  /** Bytes one op moves, for MB/s. */
  readonly bytesPerOp?: number;
  /** Run a full GC before every op (untimed), for rows whose ops allocate tens of MiB. */
  readonly collectGarbage?: boolean;
  /** Said next to the numbers, e.g. what the op is when the name does not say it. */
  readonly note?: string;
  setup?(s: S): Promise<Shared>;
  before?(s: S, shared: Shared): Promise<Item>;
  op(s: S, shared: Shared, item: Item): Promise<void>;
  after?(s: S, shared: Shared, item: Item): Promise<void>;
  teardown?(s: S, shared: Shared): Promise<void>;
}

export type SeedColumn = 'local' | 'remote';

/** `host`: figures measured from the host (memory of a box's container), no sides; shown with the timed rows, in their notes column. */
export type RowGroup = 'latency' | 'concurrency' | 'workspace' | 'memory' | 'host';

/** A row with its generics erased, so rows of different shapes sit in one list. */
export type AnyRow<S extends Named> = Row<S, unknown, unknown>;

export function defineRow<S extends Named, Shared = undefined, Item = undefined>(row: Row<S, Shared, Item>): AnyRow<S> {
  return row as unknown as AnyRow<S>;
}
