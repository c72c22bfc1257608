/**
 * Lifecycle-ladder rows (issue #27): pause, resume, archive and restore of a box, as ratios in one run.
 *
 * - Pause and Archive: the library's box.pause() / box.archive() against the engine calls they are
 *   made of, issued raw (pause; stop t=2 + commit + remove), on boxes alike (no agent on either side).
 * - Resume and Restore: WarmCreate's op (create → first exec result, bench/rows/warm.ts) on sides
 *   whose "spare" is a paused or an archived box made untimed before each op, so the op is the
 *   transparent resume (restore) an exec does, then its result; beside a warm claim and a cold
 *   create → first exec on the same Manager. Goals: resume → first exec p50 ≤ 30 ms, restore ≤ 1.2×
 *   a cold create; each row's note says whether it met its goal.
 * - BoxHostMemory: what one idle, paused and archived box holds, measured from the host: the
 *   container's cgroup as the engine reads it (stats: usage, and usage less inactive file cache as
 *   `docker stats` shows) and the RSS of its processes (host pids from the engine's top, /proc; its
 *   anonymous part apart, as file pages are shared with every other box);
 *   an archived box has no container, so nothing, plus its archive image on disk. Goal: an archived
 *   box holds no memory.
 *
 * Run alone: `npx tsx bench/rows/lifecycle.ts [--quick]`, or as part of `npm run bench`
 * (`--only Pause,Resume,Archive,Restore,BoxHostMemory`).
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { BASE_IMAGE, BENCH_CONTAINER_LABEL } from '../core/identity.js';
import type { RowResult } from '../core/result.js';
import { defineRow } from '../core/row.js';
import type { AnyRow, Mode } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import type { RunContext } from '../core/run-rows.js';
import { runStandalone } from '../core/standalone.js';
import { summarize } from '../core/stats.js';
import { EngineClient } from '../engine/client.js';
import { PoolSubject } from '../subjects/pool.js';
import type { PoolRef } from '../subjects/pool.js';
import { RawSubject } from '../subjects/raw.js';
import type { RawRef } from '../subjects/raw.js';
import type { ExecOutcome } from '../subjects/subject.js';
import { WARM_ROWS } from './warm.js';
import type { WarmSide } from './warm.js';

/** The small file an archived box keeps (in $HOME: /tmp is a tmpfs, which an archive does not keep). */
const WRITE_FILE = ['sh', '-c', 'head -c 4096 /dev/urandom > "$HOME/bench-note"'];
const RESUME_GOAL_MS = 30;
const RESTORE_GOAL_TIMES = 1.2;
const MEMORY_ROW = 'BoxHostMemory';
/** Boxes the memory row measures (the median is reported). */
const MEMORY_BOXES: Record<Mode, number> = { quick: 1, full: 3 };
const MiB = 2 ** 20;

function expectOk(r: ExecOutcome, what: string): void {
  if (r.exitCode !== 0) throw new Error(`${what}: exit ${r.exitCode}`);
}

/** A box whose pause and archive the Pause and Archive rows time; the raw side does the engine calls. */
interface LadderBox {
  readonly name: string;
  create(): Promise<unknown>;
  writeFile(box: unknown): Promise<void>;
  pause(box: unknown): Promise<void>;
  unpause(box: unknown): Promise<void>;
  archive(box: unknown): Promise<void>;
  /** Removes the box (running, paused or archived) and what its archive left. */
  remove(box: unknown): Promise<void>;
}

class SbxLadder implements LadderBox {
  readonly name = 'sbx';
  constructor(readonly pool: PoolSubject) {}
  create(): Promise<PoolRef> {
    return this.pool.create();
  }
  async writeFile(ref: PoolRef): Promise<void> {
    expectOk(await this.pool.exec(ref, WRITE_FILE), 'write a file');
  }
  pause(ref: PoolRef): Promise<void> {
    return ref.box.pause();
  }
  unpause(ref: PoolRef): Promise<void> {
    return ref.box.resume();
  }
  archive(ref: PoolRef): Promise<void> {
    return ref.box.archive();
  }
  remove(ref: PoolRef): Promise<void> {
    return this.pool.remove(ref);
  }
}

/** The raw side's archive image: no sbx label, so nothing of sbx would ever adopt it; removed with its box. */
const rawArchive = (ref: RawRef) => ({ repo: 'sbx-bench-archive', tag: ref.id });

class RawLadder implements LadderBox {
  readonly name = 'raw';
  constructor(readonly raw: RawSubject) {}
  create(): Promise<RawRef> {
    return this.raw.create();
  }
  async writeFile(ref: RawRef): Promise<void> {
    expectOk(await this.raw.exec(ref, WRITE_FILE), 'write a file');
  }
  async pause(ref: RawRef): Promise<void> {
    await this.raw.engine.call('POST', `/containers/${ref.container}/pause`);
  }
  async unpause(ref: RawRef): Promise<void> {
    await this.raw.engine.call('POST', `/containers/${ref.container}/unpause`);
  }
  /** What box.archive() asks of the engine: a graceful stop, a commit (paused, as sbx's), the container's removal. */
  async archive(ref: RawRef): Promise<void> {
    const { repo, tag } = rawArchive(ref);
    await this.raw.engine.call('POST', `/containers/${ref.container}/stop?t=2`);
    await this.raw.engine.call('POST', `/commit?container=${ref.container}&repo=${repo}&tag=${tag}&pause=1`, {
      Labels: { [BENCH_CONTAINER_LABEL]: 'archive' },
    });
    await this.raw.engine.call('DELETE', `/containers/${ref.container}?force=1&v=1`);
  }
  async remove(ref: RawRef): Promise<void> {
    const { repo, tag } = rawArchive(ref);
    await this.raw.engine.call('DELETE', `/containers/${ref.container}?force=1&v=1`, undefined, [200, 204, 404]);
    await this.raw.engine.call('DELETE', `/images/${repo}:${tag}?force=1`, undefined, [200, 404]);
  }
}

interface Made {
  box?: unknown;
}

const LADDER_ROWS: AnyRow<LadderBox>[] = [
  // One box per side, paused by the op and thawed (untimed) after it.
  defineRow<LadderBox, unknown>({
    name: 'Pause',
    group: 'latency',
    note: 'pause a running box (freezer); resumed untimed',
    iterations: { quick: 15, full: 100 },
    warmup: 2,
    setup: (s) => s.create(),
    async op(s, box) {
      await s.pause(box);
    },
    after: (s, box) => s.unpause(box),
    teardown: (s, box) => s.remove(box),
  }),
  defineRow<LadderBox, undefined, Made>({
    name: 'Archive',
    group: 'latency',
    note: 'archive a running box with a 4 KiB file written (raw: stop t=2 + commit + remove)',
    iterations: { quick: 5, full: 30 },
    warmup: 1,
    async before(s) {
      const box = await s.create();
      await s.writeFile(box);
      return { box };
    },
    async op(s, _shared, made) {
      await s.archive(made.box);
    },
    async after(s, _shared, made) {
      if (made.box !== undefined) await s.remove(made.box);
    },
  }),
];

/**
 * A side of WarmCreate whose spare is a box one step down the ladder: made, then paused or archived,
 * untimed in `untilSpare`; `create` hands it out, so the timed op is the resume the first exec does.
 */
class LadderSpares implements WarmSide {
  private spare: PoolRef | undefined;
  constructor(
    readonly name: string,
    private readonly pool: PoolSubject,
    private readonly step: (ref: PoolRef) => Promise<void>,
  ) {}
  async untilSpare(): Promise<void> {
    if (this.spare) return;
    const ref = await this.pool.create();
    try {
      await this.step(ref);
    } catch (err) {
      await this.pool.remove(ref).catch(() => undefined);
      throw err;
    }
    this.spare = ref;
  }
  async create(): Promise<PoolRef> {
    const ref = this.spare;
    if (!ref) throw new Error(`${this.name}: no box made ready before the op`);
    this.spare = undefined;
    return ref;
  }
  exec(ref: PoolRef, cmd: string[]): Promise<ExecOutcome> {
    return this.pool.exec(ref, cmd);
  }
  remove(ref: PoolRef): Promise<void> {
    return this.pool.remove(ref);
  }
  /** A spare no op took (a failed row) goes with its archive. */
  async close(): Promise<void> {
    if (this.spare) await this.pool.remove(this.spare);
    this.spare = undefined;
  }
}

const warmCreate = WARM_ROWS.find((r) => r.name === 'WarmCreate');
if (!warmCreate) throw new Error('no WarmCreate row');

/** WarmCreate's op on other sides, under this row's name. */
function firstExecRow(name: string, note: string, iterations: Record<Mode, number>): AnyRow<WarmSide> {
  return { ...warmCreate!, name, note, iterations };
}

const RESUME_ROWS = {
  warm: firstExecRow('Resume', 'paused box: resume → first exec result (vs WarmCreate: warm claim → first exec)', { quick: 8, full: 40 }),
  cold: firstExecRow('ResumeVsCreate', 'paused box: resume → first exec result (vs Create: cold create → first exec)', { quick: 8, full: 40 }),
};
const RESTORE_ROW = firstExecRow('Restore', 'archived box: restore → first exec result (vs cold create → first exec)', { quick: 5, full: 30 });

/** Every Lifecycle row name, for --only. */
export const LIFECYCLE_ROW_NAMES: readonly string[] = [
  ...LADDER_ROWS.map((r) => r.name),
  RESUME_ROWS.warm.name,
  RESUME_ROWS.cold.name,
  RESTORE_ROW.name,
  MEMORY_ROW,
];

/** Appends the goal and whether the row met it to the note of a measured row. */
export function judge(r: RowResult, says: string, met: (a: number, b: number) => boolean): RowResult {
  if (r.sides.length === 2) r.note = `${r.note ?? ''}; goal ${says}: ${met(r.sides[0].stats.p50, r.sides[1].stats.p50) ? 'met' : 'MISSED'}`;
  return r;
}

export async function runLifecycleRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  const picked = (name: string) => !opts.only || opts.only.has(name);
  const results: RowResult[] = [];
  const ladder = LADDER_ROWS.filter((r) => picked(r.name));
  if (ladder.length > 0) {
    // No agent, as the raw side has none: the two sides' containers alike (the Create row's parity).
    const sbx = await PoolSubject.open('sbx', { agent: false }, opts);
    const raw = new RawSubject(new EngineClient(), { managerName: opts.managerName, runId: opts.runId });
    try {
      results.push(...(await runPairRows(ladder, new SbxLadder(sbx), new RawLadder(raw), ctx)));
    } finally {
      await sbx.close();
      await raw.close();
    }
  }
  const wantResume = picked(RESUME_ROWS.warm.name) || picked(RESUME_ROWS.cold.name);
  if (wantResume || picked(RESTORE_ROW.name) || picked(MEMORY_ROW)) {
    // Agent pools, as the Warm rows: the box a user gets by default.
    const warm = wantResume ? await PoolSubject.open('warm', { warm: [{ image: BASE_IMAGE, size: 2 }] }, opts) : undefined;
    const cold = await PoolSubject.open('cold', {}, opts);
    const paused = new LadderSpares('paused', cold, (ref) => ref.box.pause());
    const archived = new LadderSpares('archived', cold, async (ref) => {
      expectOk(await cold.exec(ref, WRITE_FILE), 'write a file');
      await ref.box.archive();
    });
    try {
      if (warm && picked(RESUME_ROWS.warm.name)) {
        const [r] = await runPairRows([RESUME_ROWS.warm], paused, warm, ctx);
        results.push(judge(r!, `p50 ≤ ${RESUME_GOAL_MS} ms`, (a) => a <= RESUME_GOAL_MS));
      }
      if (picked(RESUME_ROWS.cold.name)) {
        const [r] = await runPairRows([RESUME_ROWS.cold], paused, cold, ctx);
        results.push(judge(r!, `p50 ≤ ${RESUME_GOAL_MS} ms`, (a) => a <= RESUME_GOAL_MS));
      }
      if (picked(RESTORE_ROW.name)) {
        const [r] = await runPairRows([RESTORE_ROW], archived, cold, ctx);
        results.push(judge(r!, `≤ ${RESTORE_GOAL_TIMES}× cold create`, (a, b) => a <= b * RESTORE_GOAL_TIMES));
      }
      if (picked(MEMORY_ROW)) results.push(await measureHostMemory(cold, opts.runId, ctx));
    } finally {
      await paused.close().catch((err: unknown) => ctx.log(`could not remove a paused box: ${String(err)}`));
      await archived.close().catch((err: unknown) => ctx.log(`could not remove an archived box: ${String(err)}`));
      // Spares outlive their Manager on purpose (the next one adopts them); a benchmark's must go.
      await warm?.manager.removePool('local', { force: true }).catch((err: unknown) => ctx.log(`could not remove the warm spares: ${String(err)}`));
      await warm?.close();
      await cold.close();
    }
  }
  return results;
}

/** A box's container as the host sees it. */
interface HostFigures {
  /** The cgroup's usage as the engine reads it (memory.usage_in_bytes / memory.current). */
  cgroupBytes: number;
  /** Less the inactive file cache: what `docker stats` shows. */
  statsBytes: number;
  /** Sum of the RSS of the container's processes (host pids), from /proc: file pages shared with other boxes (the agent's binary, the image's libc) counted in each. */
  rssBytes: number;
  /** Of it, anonymous memory (RssAnon): what is this box's alone. */
  anonBytes: number;
  processes: number;
}

interface EngineStats {
  memory_stats: { usage?: number; stats?: Record<string, number> };
}

/** The container of box `id` of this run, if it has one (an archived box has none). */
async function containerOf(engine: EngineClient, runId: string, id: string): Promise<string | undefined> {
  const filters = encodeURIComponent(JSON.stringify({ label: [`sbx.id=${id}`, `${BENCH_CONTAINER_LABEL}=${runId}`] }));
  const [c] = await engine.json<{ Id: string }[]>('GET', `/containers/json?all=1&filters=${filters}`);
  return c?.Id;
}

async function hostFigures(engine: EngineClient, container: string): Promise<HostFigures> {
  const s = await engine.json<EngineStats>('GET', `/containers/${container}/stats?stream=false`);
  const usage = s.memory_stats.usage ?? 0;
  const inactive = s.memory_stats.stats?.['total_inactive_file'] ?? s.memory_stats.stats?.['inactive_file'] ?? 0;
  const top = await engine.json<{ Titles: string[]; Processes: string[][] }>('GET', `/containers/${container}/top`);
  const col = top.Titles.findIndex((t) => t.toUpperCase() === 'PID');
  let rss = 0;
  let anon = 0;
  for (const p of top.Processes ?? []) {
    const status = await readFile(`/proc/${p[col]}/status`, 'utf8').catch(() => '');
    const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
    rss += kib('VmRSS');
    anon += kib('RssAnon');
  }
  return { cgroupBytes: usage, statsBytes: Math.max(0, usage - inactive), rssBytes: rss, anonBytes: anon, processes: top.Processes?.length ?? 0 };
}

/** Size of the archive image of box `id` (all its layers, the base image's among them), and the base's. */
async function archiveSizes(engine: EngineClient, id: string): Promise<{ imageBytes: number; ownBytes: number }> {
  const filters = encodeURIComponent(JSON.stringify({ label: [`sbx.archive=${id}`] }));
  const [img] = await engine.json<{ Size: number }[]>('GET', `/images/json?filters=${filters}`);
  if (!img) throw new Error(`no archive image of box ${id}`);
  const base = await engine.json<{ Size: number }>('GET', `/images/${encodeURIComponent(BASE_IMAGE)}/json`);
  return { imageBytes: img.Size, ownBytes: img.Size - base.Size };
}

const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;
const median = (xs: number[]) => summarize(xs).p50;

/**
 * One box idle (after its first exec), then paused, then archived, each measured from the host;
 * the median over MEMORY_BOXES boxes, one after the other.
 */
async function measureHostMemory(cold: PoolSubject, runId: string, ctx: RunContext): Promise<RowResult> {
  const started = performance.now();
  const row = { name: MEMORY_ROW, group: 'host' as const };
  const engine = new EngineClient();
  const idle: HostFigures[] = [];
  const frozen: HostFigures[] = [];
  const sizes: { imageBytes: number; ownBytes: number }[] = [];
  try {
    for (let i = 0; i < MEMORY_BOXES[ctx.mode]; i++) {
      ctx.signal.throwIfAborted();
      const ref = await cold.create();
      try {
        expectOk(await cold.exec(ref, WRITE_FILE), 'write a file');
        const container = await containerOf(engine, runId, ref.id);
        if (!container) throw new Error(`box ${ref.id} has no container`);
        idle.push(await hostFigures(engine, container));
        await ref.box.pause();
        frozen.push(await hostFigures(engine, container));
        await ref.box.archive();
        const left = await containerOf(engine, runId, ref.id);
        if (left) throw new Error(`archived box ${ref.id} still has container ${left}`);
        sizes.push(await archiveSizes(engine, ref.id));
      } finally {
        await cold.remove(ref);
      }
    }
  } catch (err) {
    if (ctx.signal.aborted) throw ctx.signal.reason;
    ctx.log(`${MEMORY_ROW}: FAILED: ${(err as Error).stack ?? String(err)}`);
    return { ...row, status: 'failed', reason: (err as Error).message, sides: [], ratio: null, wallMs: performance.now() - started };
  } finally {
    engine.close();
  }
  const pick = (xs: HostFigures[], k: keyof HostFigures) => median(xs.map((x) => x[k]));
  const figures = {
    idle_cgroup_bytes: pick(idle, 'cgroupBytes'),
    idle_stats_bytes: pick(idle, 'statsBytes'),
    idle_rss_bytes: pick(idle, 'rssBytes'),
    idle_anon_bytes: pick(idle, 'anonBytes'),
    paused_cgroup_bytes: pick(frozen, 'cgroupBytes'),
    paused_stats_bytes: pick(frozen, 'statsBytes'),
    paused_rss_bytes: pick(frozen, 'rssBytes'),
    paused_anon_bytes: pick(frozen, 'anonBytes'),
    archived_bytes: 0,
    archive_image_bytes: median(sizes.map((s) => s.imageBytes)),
    archive_own_bytes: median(sizes.map((s) => s.ownBytes)),
    boxes: idle.length,
  };
  const say = (what: string, c: number, st: number, rss: number, anon: number) =>
    `${what}: cgroup ${mib(c)} (docker stats ${mib(st)}), processes' RSS ${mib(rss)} (anon ${mib(anon)})`;
  const note = [
    say('idle', figures.idle_cgroup_bytes, figures.idle_stats_bytes, figures.idle_rss_bytes, figures.idle_anon_bytes),
    say('paused', figures.paused_cgroup_bytes, figures.paused_stats_bytes, figures.paused_rss_bytes, figures.paused_anon_bytes),
    `archived: no container, 0 (image ${mib(figures.archive_image_bytes)} on disk, ${(figures.archive_own_bytes / 1024).toFixed(0)} KiB of it its own)`,
    `median of ${figures.boxes} box(es), measured from the host; goal: an archived box holds no memory: met`,
  ].join('; ');
  ctx.log(`${MEMORY_ROW}: ${note}`);
  return { ...row, note, status: 'ok', sides: [], ratio: null, wallMs: performance.now() - started, figures };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await runStandalone('lc', ['ladder', 'peer'], runLifecycleRows);
