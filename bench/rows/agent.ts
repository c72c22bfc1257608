/**
 * Agent rows: the same exec through the in-box agent and through the engine's exec, both via
 * the library (a Manager whose pool has `agent: true` against one with `agent: false`), as
 * ratios in one run (agent p50 / engine p50). Goals of issue #12: AgentExec p50 ≤ 3 ms,
 * AgentExec50Parallel at least 10× faster than the engine path, and AgentCreate /
 * AgentLifecycle not slower (the injection is two bind mounts and an image inspect beside the create).
 *
 * Run alone: `npx tsx bench/rows/agent.ts [--quick]`, or as part of `npm run bench` (`--only Agent`).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Manager } from '../../src/sandbox/manager.js';
import type { Box } from '../../src/sandbox/box.js';
import { BASE_IMAGE, BENCH_LABEL } from '../core/identity.js';
import type { RowResult } from '../core/result.js';
import type { AnyRow } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import type { RunContext } from '../core/run-rows.js';
import { sweep } from '../core/sweep.js';
import { EngineClient } from '../engine/client.js';
import type { BoxRef, ExecOutcome, Subject } from '../subjects/subject.js';
import { concurrencyRows, latencyRows } from './boxes.js';

interface Ref extends BoxRef {
  readonly box: Box;
}

/** Boxes through the library on a pool with the agent on or off. */
class PoolSubject implements Subject<Ref> {
  private constructor(
    readonly name: string,
    private readonly manager: Manager,
    private readonly labels: Record<string, string>,
  ) {}

  static async open(agent: boolean, opts: { managerName: string; dataDir: string; runId: string }): Promise<PoolSubject> {
    const manager = new Manager({
      name: `${opts.managerName}-${agent ? 'a' : 'e'}`,
      pools: [{ name: 'local', addr: 'local', agent }],
      dataDir: join(opts.dataDir, agent ? 'agent' : 'engine'),
      cleanupIntervalMs: 0,
    });
    await manager.start();
    return new PoolSubject(agent ? 'agent' : 'engine', manager, { [BENCH_LABEL]: opts.runId });
  }

  async create(): Promise<Ref> {
    const box = await this.manager.create({ image: BASE_IMAGE, labels: this.labels });
    return { id: box.id, box };
  }
  async exec(ref: Ref, cmd: string[]): Promise<ExecOutcome> {
    const r = await ref.box.exec(cmd);
    return { exitCode: r.exitCode, stdoutBytes: r.stdout.length };
  }
  async info(ref: Ref): Promise<void> {
    await ref.box.info();
  }
  stop(ref: Ref): Promise<void> {
    return ref.box.stop();
  }
  start(ref: Ref): Promise<void> {
    return ref.box.start();
  }
  remove(ref: Ref): Promise<void> {
    return ref.box.remove();
  }
  close(): Promise<void> {
    return this.manager.close();
  }
}

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
  const agent = await PoolSubject.open(true, opts);
  const engine = await PoolSubject.open(false, opts);
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

async function main(): Promise<void> {
  const mode = process.argv.includes('--quick') ? 'quick' : 'full';
  const runId = String(process.pid);
  const tmp = await mkdtemp(join(os.tmpdir(), 'sbx-bench-agent-'));
  const log = (line: string) => process.stderr.write(`bench: ${line}\n`);
  const engine = new EngineClient();
  try {
    const rows = await runAgentRows({ mode, log, signal: new AbortController().signal }, { managerName: `bench-ag-${process.pid}`, dataDir: tmp, runId });
    const out = ['row                     agent p50 ms  p95 ms   engine p50 ms  p95 ms   ratio (agent/engine p50)'];
    for (const r of rows) {
      if (r.sides.length !== 2) {
        out.push(`${r.name.padEnd(24)}${r.status}: ${r.reason ?? ''}`);
        continue;
      }
      const [a, e] = r.sides;
      out.push(
        `${r.name.padEnd(24)}${a.stats.p50.toFixed(2).padStart(12)}${a.stats.p95.toFixed(1).padStart(8)}   ${e.stats.p50.toFixed(2).padStart(13)}${e.stats.p95.toFixed(1).padStart(8)}   ${(r.ratio ?? 0).toFixed(3).padStart(7)}x   (n=${a.stats.n})`,
      );
    }
    process.stdout.write(`${out.join('\n')}\n`);
  } finally {
    await sweep(engine, runId).catch(() => 0);
    engine.close();
    await rm(tmp, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
