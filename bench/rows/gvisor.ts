/**
 * gVisor rows (issue 31): the same box work on a pool whose boxes run on gVisor (`ociRuntime:
 * 'runsc'`, the runtime scripts/gvisor.sh registers with the engine) beside a pool on the engine's
 * default runc, both through the library with the agent (the box a user gets by default), as
 * ratios in one run (gVisor p50 / runc p50). Goals: create ≤ 1.5× runc, exec ≤ 1.5× runc; each
 * row's note says whether it met its goal.
 *
 * - `gVisor Create`, `gVisor Exec`, `gVisor ExecHeavy`: the rows Create, Exec and ExecHeavy
 *   (bench/rows/boxes.ts) as they are, on the two pools.
 * - `gVisor WorkspaceRead1M`: WorkspaceRead1M (bench/rows/files.ts) as it is, read from inside a
 *   box: `cat` of the 1 MiB workspace file in a box that mounts the workspace, its bytes streamed
 *   back; on gVisor the file comes through the gofer, on runc straight from the bind mount.
 * - `gVisor IdleMemory`: N idle boxes on each runtime (after one exec each): MemAvailable's drop
 *   per box, and the PSS of each box's host processes (the engine's shim and, on gVisor, runsc's
 *   sandbox, gofer and platform stubs; on runc the box's processes), by command.
 *
 * Run alone: `npx tsx bench/rows/gvisor.ts [--quick]`, or as part of `npm run bench` (`--only gVisor`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { forEachLimited } from '../core/pool.js';
import { notRun } from '../core/result.js';
import type { RowResult } from '../core/result.js';
import type { AnyRow, Mode } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import type { RunContext } from '../core/run-rows.js';
import { runStandalone } from '../core/standalone.js';
import { cgroupMemory, containerProcesses, meminfo, processLabel, processTable, rollup } from '../density/host.js';
import { EngineClient } from '../engine/client.js';
import type { FileSubject } from '../files/subject.js';
import { PoolSubject } from '../subjects/pool.js';
import type { PoolRef } from '../subjects/pool.js';
import type { Subject } from '../subjects/subject.js';
import { latencyTwin } from './boxes.js';
import { fileRows } from './files.js';
import { judge } from './lifecycle.js';

/** The engine's name for gVisor (scripts/gvisor.sh; src/testing/env.ts's gvisorRuntime). */
export const GVISOR_RUNTIME = process.env['SBX_BENCH_GVISOR_RUNTIME'] ?? 'runsc';
const GOAL_TIMES = 1.5;
const SIDES = ['gvisor', 'runc'] as const;
const OWNER = 'bench';
const MiB = 2 ** 20;

const vs = '(gVisor vs runc, agent)';
const BOX_ROWS: AnyRow<Subject>[] = [
  latencyTwin('Create', { name: 'gVisor Create', note: `create+start ${vs}` }),
  latencyTwin('Exec', { name: 'gVisor Exec', note: `echo hi ${vs}` }),
  latencyTwin('ExecHeavy', { name: 'gVisor ExecHeavy', note: `sha256 of 1 MiB urandom ${vs}` }),
];
/** Rows whose goal is ≤ 1.5× runc. */
const GOALS = new Set(['gVisor Create', 'gVisor Exec']);

const readRow = fileRows.find((r) => r.name === 'WorkspaceRead1M');
if (!readRow) throw new Error('no WorkspaceRead1M row');
const FILE_ROW: AnyRow<FileSubject> = { ...readRow, name: 'gVisor WorkspaceRead1M', note: `cat of a 1 MiB workspace file in the box, streamed back ${vs}` };

const MEMORY_ROW = 'gVisor IdleMemory';
/** Idle boxes per runtime in the memory row. */
const IDLE_BOXES: Record<Mode, number> = { quick: 5, full: 20 };
const CREATE_PARALLEL = 4;
const REMOVE_PARALLEL = 3;
/** The agent gives its memory back 1 s after its last exec (agent/memory.go): measured after that. */
const AGENT_SETTLE_MS = 1_500;

export const GVISOR_ROW_NAMES: readonly string[] = [...BOX_ROWS.map((r) => r.name), FILE_ROW.name, MEMORY_ROW];

/**
 * A box's workspace as the file rows see it: written from the host (the rows' untimed setup), read
 * from inside the box (`cat`, stdout streamed back as bytes).
 */
class InBoxFiles implements FileSubject {
  private constructor(
    readonly name: string,
    private readonly ref: PoolRef,
    private readonly mountPath: string,
  ) {}

  static async open(side: PoolSubject): Promise<InBoxFiles> {
    const ws = await side.manager.workspaces.create({ name: `bench-${side.name}`, owner: OWNER, node: 'local' });
    const ref = await side.create({ owner: OWNER, workspaceId: ws.id });
    return new InBoxFiles(side.name, ref, (await ref.box.info()).mountPath);
  }

  async writeFile(path: string, data: Buffer): Promise<void> {
    await (await this.ref.box.workspace()).writeFile(path, data);
  }

  async readFile(path: string): Promise<Buffer> {
    const s = await this.ref.box.stream(['cat', `${this.mountPath}/${path}`]);
    const chunks: Buffer[] = [];
    s.stdout.on('data', (c: Buffer) => chunks.push(c));
    s.stderr.resume();
    const code = await s.wait();
    if (code !== 0) throw new Error(`cat ${path} exited ${code}`);
    return Buffer.concat(chunks);
  }

  close(): Promise<void> {
    // The workspace goes with the Manager's data dir (the run's temp dir).
    return this.ref.box.remove();
  }
}

/** What N idle boxes of one runtime cost the host, per box. */
export interface IdleFigures {
  boxes: number;
  /** MemAvailable before the boxes minus with them, over N: everything they cost the host. */
  hostMiB: number;
  /** PSS and RSS of each box's host processes (containerProcesses), mean per box. */
  pssMiB: number;
  rssMiB: number;
  processes: number;
  /** The box cgroup's memory (its init's cgroup: runc's box processes; gVisor's sandbox, guest memory included), mean per box. */
  cgroupMiB: number;
  /** PSS per box by process kind (processLabel: containerd-shim-runc-v2, runsc-sandbox, runsc-gofer, stub; sbx-agent...). */
  pssMiBByCommand: Record<string, number>;
}

/** Per-box figures from each box's processes' smaps (PSS shares a page among those mapping it). */
export function idleFigures(
  boxes: number,
  drop: { availableBytes: number; cgroupBytes: number },
  perBox: ReadonlyMap<string, readonly { label: string; pss: number; rss: number }[]>,
): IdleFigures {
  let pss = 0;
  let rss = 0;
  let processes = 0;
  const byCommand: Record<string, number> = {};
  for (const procs of perBox.values()) {
    for (const p of procs) {
      pss += p.pss;
      rss += p.rss;
      processes++;
      byCommand[p.label] = (byCommand[p.label] ?? 0) + p.pss / MiB / boxes;
    }
  }
  return {
    boxes,
    hostMiB: drop.availableBytes / MiB / boxes,
    cgroupMiB: drop.cgroupBytes / MiB / boxes,
    pssMiB: pss / MiB / boxes,
    rssMiB: rss / MiB / boxes,
    processes: processes / boxes,
    pssMiBByCommand: byCommand,
  };
}

/** N idle boxes on `side`, each after one exec, measured from the host; then removed. */
async function measureIdle(side: PoolSubject, n: number, engine: EngineClient, ctx: RunContext): Promise<IdleFigures> {
  // The lazy paths (token secret, box network, the runtime's first start) paid before the baseline.
  const first = await side.create();
  await side.remove(first);
  await sleep(AGENT_SETTLE_MS);
  const before = meminfo('MemAvailable');
  const made: PoolRef[] = [];
  try {
    await forEachLimited(Array.from({ length: n }), CREATE_PARALLEL, async () => {
      ctx.signal.throwIfAborted();
      made.push(await side.create());
    });
    await forEachLimited(made, CREATE_PARALLEL, async (ref) => {
      const r = await side.exec(ref, ['true']);
      if (r.exitCode !== 0) throw new Error(`exec in ${ref.id} exited ${r.exitCode}`);
    });
    await sleep(AGENT_SETTLE_MS);
    const after = meminfo('MemAvailable');
    const procs = containerProcesses(
      processTable(),
      made.map((r) => r.box.containerId),
    );
    const measured = new Map<string, { label: string; pss: number; rss: number }[]>();
    for (const [id, list] of procs) {
      if (list.length === 0) throw new Error(`no host process names container ${id}`);
      measured.set(
        id,
        list.flatMap((p) => {
          const m = rollup(p.pid);
          return m ? [{ label: processLabel(p), ...m }] : [];
        }),
      );
    }
    let cgroupBytes = 0;
    for (const ref of made) {
      const pid = (await engine.json<{ State?: { Pid?: number } }>('GET', `/containers/${ref.box.containerId}/json`)).State?.Pid;
      cgroupBytes += (pid ? cgroupMemory(pid) : undefined) ?? 0;
    }
    return idleFigures(n, { availableBytes: before - after, cgroupBytes }, measured);
  } finally {
    await forEachLimited(made, REMOVE_PARALLEL, (r) => side.remove(r));
  }
}

const f1 = (x: number) => x.toFixed(1);
const commands = (f: IdleFigures) =>
  Object.entries(f.pssMiBByCommand)
    .sort((a, b) => b[1] - a[1])
    .map(([c, m]) => `${c} ${f1(m)}`)
    .join(', ');

async function runIdleMemory(gvisor: PoolSubject, runc: PoolSubject, ctx: RunContext): Promise<RowResult> {
  const started = performance.now();
  const n = IDLE_BOXES[ctx.mode];
  ctx.log(`${MEMORY_ROW}: ${n} idle boxes on runc, then on gVisor`);
  const engine = new EngineClient();
  let r: IdleFigures;
  let g: IdleFigures;
  try {
    r = await measureIdle(runc, n, engine, ctx);
    g = await measureIdle(gvisor, n, engine, ctx);
  } finally {
    engine.close();
  }
  const figures: Record<string, number> = { boxes: n };
  for (const [side, f] of [
    ['runc', r],
    ['gvisor', g],
  ] as const) {
    figures[`${side}_host_mib_per_box`] = f.hostMiB;
    figures[`${side}_pss_mib_per_box`] = f.pssMiB;
    figures[`${side}_rss_mib_per_box`] = f.rssMiB;
    figures[`${side}_cgroup_mib_per_box`] = f.cgroupMiB;
    figures[`${side}_processes_per_box`] = f.processes;
  }
  const say = (what: string, f: IdleFigures) =>
    `${what}: processes' PSS ${f1(f.pssMiB)} MiB/box (${f1(f.processes)} processes: ${commands(f)}; RSS ${f1(f.rssMiB)}), cgroup ${f1(f.cgroupMiB)} MiB, MemAvailable drop ${f1(f.hostMiB)} MiB (the whole machine's: others move it)`;
  const note = `${say('runc', r)}; ${say('gVisor', g)}; ${n} idle boxes each, after one exec; gVisor/runc: PSS ${f1(g.pssMiB / r.pssMiB)}×, cgroup ${f1(g.cgroupMiB / r.cgroupMiB)}×`;
  ctx.log(`${MEMORY_ROW}: ${note}`);
  return { name: MEMORY_ROW, group: 'host', note, status: 'ok', sides: [], ratio: null, wallMs: performance.now() - started, figures };
}

/** The file row on a box of each side that mounts a workspace of its own. */
async function runInBoxFiles(rows: AnyRow<FileSubject>[], gvisor: PoolSubject, runc: PoolSubject, ctx: RunContext): Promise<RowResult[]> {
  const opened: InBoxFiles[] = [];
  try {
    for (const side of [gvisor, runc]) opened.push(await InBoxFiles.open(side));
    return await runPairRows(rows, opened[0]!, opened[1]!, ctx);
  } catch (err) {
    if (ctx.signal.aborted) throw ctx.signal.reason;
    ctx.log(`${FILE_ROW.name}: FAILED: ${(err as Error).stack ?? String(err)}`);
    return [notRun(FILE_ROW, 'failed', (err as Error).message)];
  } finally {
    await forEachLimited(opened, 2, (f) => f.close()).catch((err: unknown) => ctx.log(`could not remove a workspace box: ${String(err)}`));
  }
}

/** Whether the engine has a runtime of that name (scripts/gvisor.sh registers it). */
async function engineHasRuntime(name: string): Promise<boolean> {
  const engine = new EngineClient();
  try {
    const info = await engine.json<{ Runtimes?: Record<string, unknown> }>('GET', '/info');
    return Object.hasOwn(info.Runtimes ?? {}, name);
  } finally {
    engine.close();
  }
}

export async function runGvisorRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  const picked = (name: string) => !opts.only || opts.only.has(name);
  const boxRows = BOX_ROWS.filter((r) => picked(r.name));
  const fileRow = picked(FILE_ROW.name) ? [FILE_ROW] : [];
  const memory = picked(MEMORY_ROW);
  const all = [...boxRows, ...fileRow, ...(memory ? [{ name: MEMORY_ROW, group: 'host' as const }] : [])];
  if (all.length === 0) return [];
  if (!(await engineHasRuntime(GVISOR_RUNTIME))) {
    const why = `the engine has no runtime '${GVISOR_RUNTIME}' (run scripts/gvisor.sh)`;
    ctx.log(`gVisor rows: ${why}`);
    return all.map((r) => notRun(r, 'unavailable', why));
  }
  const gvisor = await PoolSubject.open(SIDES[0], { ociRuntime: GVISOR_RUNTIME }, opts);
  const runc = await PoolSubject.open(SIDES[1], {}, opts);
  const results: RowResult[] = [];
  try {
    for (const r of await runPairRows(boxRows, gvisor, runc, ctx)) {
      results.push(GOALS.has(r.name) ? judge(r, `≤ ${GOAL_TIMES}× runc`, (a, b) => a <= b * GOAL_TIMES) : r);
    }
    if (fileRow.length > 0) results.push(...(await runInBoxFiles(fileRow, gvisor, runc, ctx)));
    if (memory) {
      try {
        results.push(await runIdleMemory(gvisor, runc, ctx));
      } catch (err) {
        if (ctx.signal.aborted) throw ctx.signal.reason;
        ctx.log(`${MEMORY_ROW}: FAILED: ${(err as Error).stack ?? String(err)}`);
        results.push(notRun({ name: MEMORY_ROW, group: 'host' }, 'failed', (err as Error).message));
      }
    }
    return results;
  } finally {
    await gvisor.close();
    await runc.close();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await runStandalone('gv', SIDES, runGvisorRows);
