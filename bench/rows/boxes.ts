import { forEachLimited } from '../core/pool.js';
import { defineRow } from '../core/row.js';
import type { AnyRow } from '../core/row.js';
import type { BoxRef, ExecOutcome, Subject } from '../subjects/subject.js';

type S = Subject;

/** Untimed engine work (teardown removals) stays under what two cores take without queueing. */
const CLEANUP_PARALLELISM = 5;

/** The seed's ExecHeavy: real work inside the box, little output. */
export const HEAVY_CMD = ['sh', '-c', 'head -c 1048576 /dev/urandom | sha256sum'];
const MIB = 1024 * 1024;

function expectExec(r: ExecOutcome, stdoutBytes?: number): void {
  if (r.exitCode !== 0) throw new Error(`exec exited ${r.exitCode}`);
  if (stdoutBytes !== undefined && r.stdoutBytes !== stdoutBytes) throw new Error(`exec printed ${r.stdoutBytes} bytes, expected ${stdoutBytes}`);
}

/** A box made once per side and removed at the end of the row. */
const oneBox = {
  setup: (s: S): Promise<BoxRef> => s.create(),
  teardown: (s: S, box: BoxRef): Promise<void> => s.remove(box),
};

interface Made {
  boxes: BoxRef[];
}

const madeNothing = async (): Promise<Made> => ({ boxes: [] });
const removeMade = (s: S, _shared: undefined, made: Made): Promise<void> => forEachLimited(made.boxes, CLEANUP_PARALLELISM, (b) => s.remove(b));

/** The seed's bench_test.go rows, timed on both sides. */
export const latencyRows: AnyRow<S>[] = [
  defineRow<S>({
    name: 'ContainerLifecycle',
    group: 'latency',
    note: 'create+start+exec+remove',
    iterations: { quick: 6, full: 40 },
    warmup: 1,
    seedMs: 300,
    async op(s) {
      const box = await s.create();
      try {
        expectExec(await s.exec(box, ['echo', 'hi']), 3);
      } finally {
        await s.remove(box);
      }
    },
  }),
  defineRow<S, undefined, Made>({
    name: 'Create',
    group: 'latency',
    note: 'create+start',
    iterations: { quick: 6, full: 40 },
    warmup: 1,
    seedMs: 100,
    before: madeNothing,
    async op(s, _shared, made) {
      made.boxes.push(await s.create());
    },
    after: removeMade,
  }),
  defineRow<S, BoxRef>({
    name: 'Exec',
    group: 'latency',
    note: 'echo hi',
    iterations: { quick: 30, full: 300 },
    warmup: 3,
    seedMs: 30,
    ...oneBox,
    async op(s, box) {
      expectExec(await s.exec(box, ['echo', 'hi']), 3);
    },
  }),
  defineRow<S, BoxRef>({
    name: 'ExecHeavy',
    group: 'latency',
    note: 'sha256 of 1 MiB urandom',
    iterations: { quick: 10, full: 100 },
    ...oneBox,
    async op(s, box) {
      expectExec(await s.exec(box, HEAVY_CMD));
    },
  }),
  defineRow<S, BoxRef>({
    name: 'ExecOutput1M',
    group: 'latency',
    note: '1 MiB on stdout',
    iterations: { quick: 10, full: 100 },
    bytesPerOp: MIB,
    ...oneBox,
    async op(s, box) {
      expectExec(await s.exec(box, ['head', '-c', String(MIB), '/dev/zero']), MIB);
    },
  }),
  defineRow<S, undefined, Made>({
    name: 'Remove',
    group: 'latency',
    note: 'force, running box',
    iterations: { quick: 6, full: 30 },
    warmup: 1,
    seedMs: 180,
    before: async (s) => ({ boxes: [await s.create()] }),
    async op(s, _shared, made) {
      await s.remove(made.boxes.pop()!);
    },
    after: removeMade,
  }),
  defineRow<S, BoxRef>({
    name: 'Info',
    group: 'latency',
    note: 'inspect',
    iterations: { quick: 100, full: 1000 },
    warmup: 5,
    seedMs: 5,
    ...oneBox,
    async op(s, box) {
      await s.info(box);
    },
  }),
  defineRow<S, BoxRef>({
    name: 'StopStart',
    group: 'latency',
    note: 'stop t=2 + start',
    iterations: { quick: 5, full: 30 },
    warmup: 1,
    seedMs: 2200,
    ...oneBox,
    async op(s, box) {
      await s.stop(box);
      await s.start(box);
    },
  }),
];

const PARALLEL_CREATES = 20;
const PARALLEL_EXECS = 50;

/** Wall time of many calls at once: where connection pools and engine locks show. */
export const concurrencyRows: AnyRow<S>[] = [
  defineRow<S, undefined, Made>({
    name: `Create${PARALLEL_CREATES}Parallel`,
    group: 'concurrency',
    note: `${PARALLEL_CREATES} create+start at once, wall time`,
    iterations: { quick: 2, full: 6 },
    warmup: 0,
    before: madeNothing,
    async op(s, _shared, made) {
      const settled = await Promise.allSettled(Array.from({ length: PARALLEL_CREATES }, () => s.create()));
      for (const r of settled) if (r.status === 'fulfilled') made.boxes.push(r.value);
      const failed = settled.find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
    },
    after: removeMade,
  }),
  defineRow<S, BoxRef>({
    name: `Exec${PARALLEL_EXECS}Parallel`,
    group: 'concurrency',
    note: `${PARALLEL_EXECS} × echo hi on one box at once, wall time`,
    iterations: { quick: 2, full: 10 },
    warmup: 1,
    ...oneBox,
    async op(s, box) {
      const results = await Promise.all(Array.from({ length: PARALLEL_EXECS }, () => s.exec(box, ['echo', 'hi'])));
      for (const r of results) expectExec(r, 3);
    },
  }),
];

/**
 * A row of `latencyRows` as it is (op, iterations, untimed work) under another name, for a row
 * family that runs it on other sides; the seed's number goes unless `as` gives the one that fits.
 */
export function latencyTwin(name: string, as: Pick<AnyRow<S>, 'name' | 'note' | 'seedMs' | 'seedColumn'>): AnyRow<S> {
  const found = latencyRows.find((r) => r.name === name);
  if (!found) throw new Error(`no latency row ${name}`);
  const { seedMs: _seed, seedColumn: _column, ...row } = found;
  return { ...row, ...as };
}
