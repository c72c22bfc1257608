/**
 * Agent rows: the same exec through the in-box agent and through the engine's exec, both via
 * the library (a Manager whose pool has `agent: true` against one with `agent: false`), as
 * ratios in one run (agent p50 / engine p50). Goals of issue #12: AgentExec p50 ≤ 3 ms,
 * AgentExec50Parallel at least 10× faster than the engine path, and AgentCreate /
 * AgentLifecycle not slower (the injection is two bind mounts and an image inspect beside the create).
 *
 * SpawnInBox (issue #30): the same `echo hi` through the agent (timed from the host, as
 * AgentExec) against its floor, a bare vfork+exec+read+wait of it inside the box with nothing of
 * the agent's around it (`sbx-agent spawn-bench`, timed in the box), interleaved one to one in one
 * box; the difference of the p50s is what the agent and the wire add to a spawn.
 *
 * Run alone: `npx tsx bench/rows/agent.ts [--quick]`, or as part of `npm run bench` (`--only Agent`).
 */
import { fileURLToPath } from 'node:url';
import { AGENT_BIN } from '../../src/runtime/agent-protocol.js';
import { notRun, pairResult } from '../core/result.js';
import type { RowResult } from '../core/result.js';
import type { AnyRow } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import type { Sample } from '../core/sampler.js';
import { runStandalone } from '../core/standalone.js';
import type { RunContext } from '../core/run-rows.js';
import { PoolSubject } from '../subjects/pool.js';
import type { PoolRef } from '../subjects/pool.js';
import type { Subject } from '../subjects/subject.js';
import { concurrencyRows, latencyRows } from './boxes.js';

/** Library rows with an agent twin: name -> twin name. */
const TWINS: Record<string, string> = {
  Exec: 'AgentExec',
  ExecHeavy: 'AgentExecHeavy',
  ExecOutput1M: 'AgentExecOutput1M',
  Create: 'AgentCreate',
  ContainerLifecycle: 'AgentLifecycle',
};

function twins(): { latency: AnyRow<Subject>[]; concurrency: AnyRow<Subject>[] } {
  const rename = (r: AnyRow<Subject>) => ({ ...r, name: TWINS[r.name] ?? `Agent${r.name}`, note: `${r.note ?? r.name} (agent vs engine exec)` });
  return {
    latency: latencyRows.filter((r) => TWINS[r.name]).map(rename),
    concurrency: concurrencyRows.filter((r) => /^Exec\d+Parallel$/.test(r.name)).map(rename),
  };
}

const SPAWN_IN_BOX = {
  name: 'SpawnInBox',
  group: 'latency',
  note: 'echo hi: library exec through the agent vs a bare vfork+exec+wait in the box (sbx-agent spawn-bench)',
  iterations: { quick: 30, full: 300 },
  warmup: 3,
} as const;
const SPAWN_CMD = ['echo', 'hi'];

/** The names of the agent rows, for --only. */
export function agentRowNames(): string[] {
  const rows = twins();
  return [...rows.latency, ...rows.concurrency].map((r) => r.name).concat(SPAWN_IN_BOX.name);
}

/** One bare spawn of SPAWN_CMD inside the box, as the box itself times it (ms). */
async function spawnInBox(box: PoolRef): Promise<number> {
  const r = await box.box.exec([AGENT_BIN, 'spawn-bench', '1', ...SPAWN_CMD]);
  const us = Number(r.stdout.trim());
  if (r.exitCode !== 0 || !Number.isFinite(us)) throw new Error(`spawn-bench exited ${r.exitCode}: ${r.stderr || r.stdout}`);
  return us / 1000;
}

/** SpawnInBox: agent exec and in-box spawn alternated in one box (the in-box run's own exec untimed). */
async function runSpawnInBox(agent: PoolSubject, ctx: RunContext): Promise<RowResult> {
  const started = performance.now();
  const samples: Record<string, Sample[]> = { agent: [], spawn: [] };
  const box = await agent.create();
  try {
    const execOnce = async (): Promise<Sample> => {
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      const r = await box.box.exec(SPAWN_CMD);
      const ms = performance.now() - t0;
      if (r.exitCode !== 0 || r.stdout !== 'hi\n') throw new Error(`exec exited ${r.exitCode} with ${JSON.stringify(r.stdout)}`);
      const cpu = process.cpuUsage(cpu0);
      return { ms, cpuMs: (cpu.user + cpu.system) / 1000 };
    };
    for (let w = 0; w < SPAWN_IN_BOX.warmup; w++) {
      await execOnce();
      await spawnInBox(box);
    }
    const deadline = performance.now() + (ctx.mode === 'quick' ? 6_000 : 40_000);
    for (let i = 0; i < SPAWN_IN_BOX.iterations[ctx.mode]; i++) {
      ctx.signal.throwIfAborted();
      if (i >= 3 && performance.now() > deadline) break;
      const a = i % 2 === 0 ? await execOnce() : undefined;
      samples.spawn!.push({ ms: await spawnInBox(box), cpuMs: 0 });
      samples.agent!.push(a ?? (await execOnce()));
    }
  } finally {
    await box.box.remove().catch(() => undefined);
  }
  return pairResult(SPAWN_IN_BOX, ['agent', 'spawn'], samples, performance.now() - started);
}

export async function runAgentRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  const picked = (r: AnyRow<Subject>) => !opts.only || opts.only.has(r.name);
  const agent = await PoolSubject.open('agent', { agent: true }, opts);
  const engine = await PoolSubject.open('engine', { agent: false }, opts);
  try {
    const rows = twins();
    const results = [
      ...(await runPairRows(rows.latency.filter(picked), agent as unknown as Subject, engine as unknown as Subject, ctx)),
      ...(await runPairRows(rows.concurrency.filter(picked), agent as unknown as Subject, engine as unknown as Subject, ctx)),
    ];
    if (!opts.only || opts.only.has(SPAWN_IN_BOX.name)) {
      ctx.log(`${SPAWN_IN_BOX.name}: running (agent vs spawn in the box)`);
      try {
        const r = await runSpawnInBox(agent, ctx);
        ctx.log(`${r.name}: ${r.sides[0]?.stats.n ?? 0} pairs in ${(r.wallMs / 1000).toFixed(1)}s, ratio ${r.ratio?.toFixed(2) ?? '-'}`);
        results.push(r);
      } catch (err) {
        if (ctx.signal.aborted) throw ctx.signal.reason;
        ctx.log(`${SPAWN_IN_BOX.name}: FAILED: ${(err as Error).stack ?? String(err)}`);
        results.push(notRun(SPAWN_IN_BOX, 'failed', (err as Error).message));
      }
    }
    return results;
  } finally {
    await agent.close();
    await engine.close();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await runStandalone('ag', ['agent', 'engine'], runAgentRows);
