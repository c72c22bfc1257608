/**
 * Density rows (issue 30): how many idle boxes this machine holds, and whether the cost of an
 * operation grows with their number. One child process (density/child.ts) grows one Manager's
 * idle `sbx-base` boxes with the agent to each N of the curve and measures there; the curve
 * stops climbing where MemAvailable would fall under FLOOR_MIB (the machine is shared).
 *
 * - `DensityCurve`: every step measured (N = 10 and the Density rows' N), as the results file's
 *   `density` field `--plot` draws (the first density row of a file, so the default plot).
 * - `Density<N>`: per box at N: host memory (MemAvailable), the box cgroups' memory, the shim's
 *   and the agent's RSS/PSS, the Manager's RSS and growth per box, the create rate on the way to
 *   N, list/info/exec p50, one cleanup pass's CPU, one remove, and how many boxes failed an exec
 *   (all are asked). The row's `density` is that one step.
 * - `Scale<Op>`: create, exec, info and the cleanup pass's CPU at the largest N reached against
 *   10 boxes, as a ratio (sbx column: at N; raw column: at 10). Goal ≤ 1.2×. Exec is the first
 *   exec of boxes holding no kept agent connection (the same state at both N); its note sets the
 *   kept-connection exec, a bare TCP connect to the agent and the Manager's event-loop delay
 *   beside it, info's the engine's own inspect: what grows under the op, if it grows.
 *
 * `--quick` stops at 250 boxes; SBX_BENCH_DENSITY_MAX caps N (below the machine's limit, for a
 * shared machine).
 */
import { join } from 'node:path';
import type { DensityFigures, DensityMessage, DensitySamples, DensityStep } from '../density/protocol.js';
import { probeDensity } from '../density/probe.js';
import { notRun } from '../core/result.js';
import type { RowResult, Side } from '../core/result.js';
import type { RunContext } from '../core/run-rows.js';
import { summarize } from '../core/stats.js';

const CURVE = [100, 250, 500, 1000, 2000] as const;
/** The Scale rows' small N. */
const SMALL = 10;
/** The Scale rows' large N, when no Density row asks for more. */
const LARGE = 1000;
const QUICK_MAX = 250;
const FLOOR_MIB = 3 * 1024;
const SCALE_GOAL = 1.2;
const SCALE_OPS = { ScaleCreate: 'create', ScaleExec: 'exec', ScaleInfo: 'info', ScaleCleanup: 'cleanupCpu' } as const satisfies Record<
  string,
  keyof DensitySamples
>;
type ScaleOp = (typeof SCALE_OPS)[keyof typeof SCALE_OPS];

const CURVE_ROW = 'DensityCurve';
const densityName = (n: number) => `Density${n}`;
export const DENSITY_ROW_NAMES = [CURVE_ROW, ...CURVE.map(densityName), ...Object.keys(SCALE_OPS)];

export interface DensityOptions {
  managerName: string;
  dataDir: string;
  runId: string;
  only: Set<string>;
  onChild: (pid: number | undefined) => void;
}

/** The largest N the picked rows need, capped by --quick and SBX_BENCH_DENSITY_MAX. */
function largestN(ctx: RunContext, only: Set<string>): { n: number; cap?: string } {
  let n = Math.max(0, ...CURVE.filter((c) => only.has(densityName(c))));
  if ([CURVE_ROW, ...Object.keys(SCALE_OPS)].some((s) => only.has(s))) n = Math.max(n, LARGE);
  const env = Number(process.env['SBX_BENCH_DENSITY_MAX'] ?? '');
  if (Number.isInteger(env) && env > 0 && env < n) return { n: env, cap: `SBX_BENCH_DENSITY_MAX=${env}` };
  if (ctx.mode === 'quick' && n > QUICK_MAX) return { n: QUICK_MAX, cap: `--quick stops at ${QUICK_MAX} boxes` };
  return { n };
}

export async function runDensityRows(ctx: RunContext, opts: DensityOptions): Promise<RowResult[]> {
  ctx.signal.throwIfAborted();
  const { n: largest, cap } = largestN(ctx, opts.only);
  const steps = [SMALL, ...CURVE.filter((c) => c <= largest)];
  if (cap && !steps.includes(largest)) steps.push(largest);
  ctx.log(`density: child process with one Manager, idle boxes at N = ${steps.join(', ')} (stops where MemAvailable would fall under ${FLOOR_MIB} MiB)`);
  const reached: DensityStep[] = [];
  let stopped: string | undefined;
  let removed: { boxes: number; wallMs: number } | undefined;
  const onMessage = (m: DensityMessage) => {
    if (m.type === 'step') {
      reached.push(m.step);
      ctx.log(`density: ${describe(m.step.figures)}`);
    } else if (m.type === 'stopped') {
      stopped = m.reason;
      ctx.log(`density: stopped: ${m.reason}`);
    } else removed = m;
  };
  try {
    const exit = await probeDensity(
      { managerName: opts.managerName, dataDir: join(opts.dataDir, 'density'), runId: opts.runId, steps, floorMiB: FLOOR_MIB },
      onMessage,
      opts.onChild,
    );
    if (exit.code !== 0 && !stopped) stopped = `the density child exited with ${exit.signal ?? exit.code}`;
  } catch (err) {
    stopped = (err as Error).message;
  }
  if (ctx.signal.aborted) throw ctx.signal.reason;
  const removal = removed ? `; all ${removed.boxes} removed in ${(removed.wallMs / 1000).toFixed(1)} s` : '';
  const notReached = stopped ?? cap ?? 'not measured';
  const rows: RowResult[] = [curveRow(reached, stopped ?? cap)];
  rows.push(
    ...CURVE.filter((c) => opts.only.has(densityName(c))).map((c) => {
      const step = reached.find((s) => s.figures.boxes === c);
      return step ? densityRow(c, step, reached.at(-1) === step ? removal : '') : notRun({ name: densityName(c), group: 'host' }, 'skipped', notReached);
    }),
  );
  const small = reached.find((s) => s.figures.boxes === SMALL);
  const large = reached.at(-1);
  for (const [name, op] of Object.entries(SCALE_OPS)) {
    if (!opts.only.has(name)) continue;
    if (!small || !large || large === small) rows.push(notRun({ name, group: 'host' }, 'skipped', `no curve past ${SMALL} boxes: ${notReached}`));
    else rows.push(scaleRow(name, op, small, large, cap ?? (large.figures.boxes < LARGE ? stopped : undefined)));
  }
  return rows;
}

function describe(f: DensityFigures): string {
  const n = (v: number, d = 1) => (Number.isFinite(v) ? v.toFixed(d) : '-');
  return [
    `${f.boxes} idle boxes: host ${n(f.hostMiBPerBox)} MiB/box (cgroups ${n(f.cgroupMiBPerBox)})`,
    `shim RSS ${n(f.shimRssMiB)} PSS ${n(f.shimPssMiB)} MiB`,
    `agent RSS ${n(f.agentRssMiB)} PSS ${n(f.agentPssMiB)} MiB`,
    `Manager ${n(f.managerMiB)} MiB (${n(f.managerKiBPerBox, 0)} KiB/box; heap ${n(f.managerHeapMiB)} MiB, ${n(f.managerHeapKiBPerBox, 1)} KiB/box)`,
    `engine ${n(f.engineMiB, 0)} MiB`,
    `${n(f.createsPerSec)} creates/s`,
    `list ${n(f.listP50Ms, 2)} info ${n(f.infoP50Ms, 2)} exec ${n(f.execP50Ms, 2)} (kept connection ${n(f.execKeptP50Ms, 2)}; bare TCP connect ${n(f.agentConnectP50Ms, 2)}) create ${n(f.createP50Ms, 0)} remove ${n(f.removeWallMs, 0)} ms p50`,
    `event loop delay p99 ${n(f.loopDelayP99Ms, 1)} ms`,
    `cleanup pass ${n(f.cleanupPassCpuMs, 0)} ms CPU (${n(f.cleanupPassWallMs, 0)} wall)`,
    `${f.execFailures} exec failures, ${f.createFailures} failed creates`,
  ].join(', ');
}

/** Every step in one row: the curve the plot draws. */
function curveRow(steps: DensityStep[], stoppedAt: string | undefined): RowResult {
  if (steps.length === 0) return notRun({ name: CURVE_ROW, group: 'host' }, 'failed', stoppedAt ?? 'no step measured');
  const last = steps.at(-1)!.figures;
  return {
    name: CURVE_ROW,
    group: 'host',
    note: `idle boxes at N = ${steps.map((s) => s.figures.boxes).join(', ')} (the Density rows; --plot draws it)${stoppedAt ? `; stopped at ${last.boxes}: ${stoppedAt}` : ''}`,
    status: 'ok',
    sides: [],
    ratio: null,
    wallMs: steps.reduce((t, s) => t + s.wallMs, 0),
    density: steps.map((s) => s.figures),
  };
}

function densityRow(n: number, step: DensityStep, removal: string): RowResult {
  return {
    name: densityName(n),
    group: 'host',
    note: describe(step.figures) + removal,
    status: 'ok',
    sides: [],
    ratio: null,
    wallMs: step.wallMs,
    density: [step.figures],
  };
}

/**
 * A pass goes over every box: its cost per box is what must not grow, so ScaleCleanup compares
 * the pass's CPU per box (the whole pass's is in the Density rows).
 */
function samplesOf(step: DensityStep, op: ScaleOp): number[] {
  return op === 'cleanupCpu' ? step.samples.cleanupCpu.map((ms) => ms / step.figures.boxes) : step.samples[op];
}

function scaleRow(name: string, op: ScaleOp, small: DensityStep, large: DensityStep, why: string | undefined): RowResult {
  const side = (step: DensityStep): Side => {
    const stats = summarize(samplesOf(step, op));
    return { subject: `n${step.figures.boxes}`, stats, cpuMsPerOp: op === 'cleanupCpu' ? stats.mean : Number.NaN };
  };
  const sides: [Side, Side] = [side(large), side(small)];
  const ratio = sides[1].stats.p50 > 0 ? sides[0].stats.p50 / sides[1].stats.p50 : null;
  const what =
    op === 'cleanupCpu'
      ? 'one cleanup pass, CPU ms of the Manager process per box'
      : op === 'exec'
        ? 'the first exec of a box holding no kept agent connection'
        : `one ${op}`;
  const verdict = ratio === null ? '' : ratio <= SCALE_GOAL ? `; meets ≤ ${SCALE_GOAL}x` : `; over the ${SCALE_GOAL}x goal`;
  // What sits under the op, at both N: where growth the op shows comes from.
  const beside = (label: string, field: 'engineInspectP50Ms' | 'execKeptP50Ms' | 'agentConnectP50Ms' | 'loopDelayP99Ms') => {
    const [at, base] = [large.figures[field], small.figures[field]];
    return Number.isFinite(at) && Number.isFinite(base) ? `; ${label} ${at.toFixed(2)} ms against ${base.toFixed(2)} (${(at / base).toFixed(2)}x)` : '';
  };
  const loop = beside("the Manager's event-loop delay p99", 'loopDelayP99Ms');
  const under =
    op === 'info'
      ? beside("the engine's own inspect", 'engineInspectP50Ms') + loop
      : op === 'exec'
        ? beside('an exec on a kept connection', 'execKeptP50Ms') +
          beside("a bare TCP connect to the box's agent port (the kernel's share)", 'agentConnectP50Ms') +
          loop
        : '';
  return {
    name,
    group: 'host',
    note: `${what} at ${large.figures.boxes} boxes (sbx column) against ${small.figures.boxes} (raw column)${verdict}${under}${why ? `; ${why}` : ''}`,
    status: 'ok',
    sides,
    ratio,
    wallMs: large.wallMs,
    samples: { [sides[0].subject]: step(large), [sides[1].subject]: step(small) },
  };

  function step(s: DensityStep): number[] {
    return samplesOf(s, op).map((x) => Math.round(x * 1000) / 1000);
  }
}
