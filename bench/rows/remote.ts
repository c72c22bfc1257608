/**
 * Remote rows: boxes on a remote node (`sbx node` in a network namespace with an engine of its
 * own, bench/remote/node.ts) against the same op on the local engine, both through one Manager
 * with two pools, `remote` (`sbx://<node>`) and `local`, interleaved, as ratios (remote p50 /
 * local p50). Both pools put the in-box agent into their boxes (a node always does), so Remote
 * Exec is agent exec on both sides. Goals of issue #26: create and remove ≤ 1.10× local, agent
 * exec and Info at most 1 ms p50 over local, a 1 MiB workspace read ≤ 1.5× local; each row's note
 * says whether it met its goal. The seed column is the seed's Remote column.
 *
 * Needs root (a namespace, a dockerd in it); the rows are skipped, saying why, where that fails.
 * Run alone: `npx tsx bench/rows/remote.ts [--quick]`, or as part of `npm run bench` (`--only Remote`).
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Manager } from '../../src/sandbox/manager.js';
import { notRun } from '../core/result.js';
import type { RowResult } from '../core/result.js';
import type { AnyRow } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import type { RunContext } from '../core/run-rows.js';
import { runStandalone } from '../core/standalone.js';
import { sweep } from '../core/sweep.js';
import type { FileSubject } from '../files/subject.js';
import { startNetnsNode, stopBenchEngine } from '../remote/node.js';
import type { NetnsNode } from '../remote/node.js';
import { PoolSubject } from '../subjects/pool.js';
import type { Subject } from '../subjects/subject.js';
import { latencyTwin } from './boxes.js';
import { fileRows } from './files.js';

const SIDES = ['remote', 'local'] as const;

/** A goal of issue #26 on one row: what it asks, and whether the row met it. */
interface Goal {
  says: string;
  met(remoteP50: number, localP50: number): boolean;
}
const atMostTimes = (x: number): Goal => ({ says: `≤ ${x.toFixed(2)}× local`, met: (r, l) => r <= l * x });
const atMostPlusMs = (ms: number): Goal => ({ says: `≤ local + ${ms} ms`, met: (r, l) => r - l <= ms });

/** Library rows with a remote twin: the twin's name, the seed's Remote column (ms) and the goal. */
const TWINS: { row: string; name: string; seedMs?: number; goal?: Goal }[] = [
  { row: 'Create', name: 'Remote Create', seedMs: 80, goal: atMostTimes(1.1) },
  { row: 'Exec', name: 'Remote Exec', seedMs: 50, goal: atMostPlusMs(1) },
  { row: 'Remove', name: 'Remote Remove', seedMs: 120, goal: atMostTimes(1.1) },
  { row: 'Info', name: 'Remote Info', seedMs: 10, goal: atMostPlusMs(1) },
  { row: 'ContainerLifecycle', name: 'Remote Lifecycle', seedMs: 200 },
];
const READ_ROW = 'WorkspaceRead1M';
const READ_NAME = `Remote ${READ_ROW}`;
const READ_GOAL = atMostTimes(1.5);

function boxRows(): AnyRow<Subject>[] {
  return TWINS.map((t) => {
    const base = latencyTwin(t.row, { name: t.name });
    return { ...base, note: `${base.note ?? t.row} (agent on both)`, ...(t.seedMs !== undefined ? { seedMs: t.seedMs, seedColumn: 'remote' as const } : {}) };
  });
}

function readRow(): AnyRow<FileSubject> {
  const row = fileRows.find((r) => r.name === READ_ROW);
  if (!row) throw new Error(`no file row ${READ_ROW}`);
  return { ...row, name: READ_NAME, note: `${row.note ?? ''}; remote: a helper container on the node, \`sbx-agent fs\` per op` };
}

/** Every Remote row name, for --only. */
export const REMOTE_ROW_NAMES: readonly string[] = [...TWINS.map((t) => t.name), READ_NAME];

/** Appends the goal and the p50 difference to each measured row's note. */
function judge(results: RowResult[]): RowResult[] {
  const goals = new Map<string, Goal>([...TWINS.flatMap((t) => (t.goal ? [[t.name, t.goal] as const] : [])), [READ_NAME, READ_GOAL]]);
  for (const r of results) {
    if (r.sides.length !== 2) continue;
    const [remote, local] = [r.sides[0].stats.p50, r.sides[1].stats.p50];
    const delta = `remote − local p50 ${remote - local >= 0 ? '+' : ''}${(remote - local).toFixed(2)} ms`;
    const goal = goals.get(r.name);
    r.note = [r.note, delta, goal ? `goal ${goal.says}: ${goal.met(remote, local) ? 'met' : 'MISSED'}` : ''].filter(Boolean).join('; ');
  }
  return results;
}

/** Workspace file I/O on a pool's node through the Manager (`manager.workspaces.fs(id)`), as an application does. */
async function workspaceSide(manager: Manager, node: string): Promise<FileSubject & { remove(): Promise<void> }> {
  const ws = await manager.workspaces.create({ name: `bench-${node}`, owner: 'bench', node });
  const files = await manager.workspaces.fs(ws.id);
  return {
    name: node,
    writeFile: (path, data) => files.writeFile(path, data),
    readFile: (path) => files.readFile(path),
    remove: () => manager.workspaces.delete(ws.id, { force: true }),
  };
}

export async function runRemoteRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  const picked = <S>(r: AnyRow<S & { name: string }>) => !opts.only || opts.only.has(r.name);
  const rows = boxRows().filter(picked);
  const reads = [readRow()].filter(picked);
  if (rows.length === 0 && reads.length === 0) return [];
  const nodeName = `bench-node-${opts.runId}`;
  const manager = new Manager({
    name: opts.managerName,
    // A benchmark holds more boxes than one owner may by default. The remote pool comes once its node is online.
    pools: [{ name: 'local', addr: 'local', agent: true, maxPerUser: 0 }],
    dataDir: join(opts.dataDir, 'manager'),
    cleanupIntervalMs: 0,
  });
  let node: NetnsNode | undefined;
  const results: RowResult[] = [];
  try {
    await manager.start();
    try {
      node = await startNetnsNode(manager, nodeName, ctx.log);
    } catch (err) {
      if (ctx.signal.aborted) throw ctx.signal.reason;
      const reason = `no remote node: ${(err as Error).message}`;
      ctx.log(`Remote rows skipped: ${reason}`);
      return [...rows, ...reads].map((r) => notRun(r, 'skipped', reason));
    }
    await manager.addPool({ name: 'remote', addr: `sbx://${nodeName}`, maxPerUser: 0 });
    const stale = await sweep(node.engineClient, opts.runId, { stale: true });
    if (stale > 0) ctx.log(`remote: removed ${stale} container(s) left on the node by earlier bench runs`);
    const [remote, local] = SIDES.map((pool) => PoolSubject.onPool(pool, manager, pool, { runId: opts.runId })) as [PoolSubject, PoolSubject];
    results.push(...(await runPairRows(rows, remote as unknown as Subject, local as unknown as Subject, ctx)));
    if (reads.length > 0) {
      const [remoteFiles, localFiles] = [await workspaceSide(manager, 'remote'), await workspaceSide(manager, 'local')];
      try {
        results.push(...(await runPairRows(reads, remoteFiles, localFiles, ctx)));
      } finally {
        for (const side of [remoteFiles, localFiles])
          await side.remove().catch((err: unknown) => ctx.log(`remote: could not delete the ${side.name} workspace: ${String(err)}`));
      }
    }
    return judge(results);
  } finally {
    await manager.close().catch((err: unknown) => ctx.log(`remote: could not close the Manager: ${String(err)}`));
    if (node) {
      await node.stop().catch((err: unknown) => ctx.log(`remote: could not stop sbx node: ${String(err)}`));
      const left = await sweep(node.engineClient, opts.runId).catch(() => 0);
      if (left > 0) ctx.log(`remote: swept ${left} container(s) of this run from the node's engine`);
      node.engineClient.close();
    }
    await stopBenchEngine(ctx.log).catch((err: unknown) => ctx.log(`remote: could not stop the namespace engine: ${String(err)}`));
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await runStandalone('rm', SIDES, runRemoteRows);
