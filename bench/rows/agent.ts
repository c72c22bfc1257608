/**
 * Agent rows: the same exec through the in-box agent and through the engine's exec, both via
 * the library (a Manager whose pool has `agent: true` against one with `agent: false`), as
 * ratios in one run (agent p50 / engine p50). Goals of issue #12: AgentExec p50 ≤ 3 ms,
 * AgentExec50Parallel at least 10× faster than the engine path, and AgentCreate /
 * AgentLifecycle not slower (the injection is two bind mounts and an image inspect beside the create).
 *
 * Run alone: `npx tsx bench/rows/agent.ts [--quick]`, or as part of `npm run bench` (`--only Agent`).
 */
import { fileURLToPath } from 'node:url';
import type { RowResult } from '../core/result.js';
import type { AnyRow } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import { runStandalone } from '../core/standalone.js';
import type { RunContext } from '../core/run-rows.js';
import { PoolSubject } from '../subjects/pool.js';
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

/** The names of the agent rows, for --only. */
export function agentRowNames(): string[] {
  const rows = twins();
  return [...rows.latency, ...rows.concurrency].map((r) => r.name);
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
    return [
      ...(await runPairRows(rows.latency.filter(picked), agent as unknown as Subject, engine as unknown as Subject, ctx)),
      ...(await runPairRows(rows.concurrency.filter(picked), agent as unknown as Subject, engine as unknown as Subject, ctx)),
    ];
  } finally {
    await agent.close();
    await engine.close();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await runStandalone('ag', ['agent', 'engine'], runAgentRows);
