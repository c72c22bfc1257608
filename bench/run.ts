/**
 * `npm run bench`: sbx beside the raw Docker Engine API, as ratios, in one run.
 * See docs/benchmarks.md for how to read the output.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, selectNames, USAGE, UsageError } from './core/cli.js';
import type { BenchArgs } from './core/cli.js';
import { Interrupted, abortOnSignals } from './core/interrupt.js';
import { describeMachine } from './core/machine.js';
import type { Machine } from './core/machine.js';
import { compareResults, renderComparison } from './core/compare.js';
import { densityOf, renderDensitySvg } from './core/density-plot.js';
import { checkParity } from './core/parity.js';
import { NotReady, checkEngine, runSetupScripts } from './core/prerequisites.js';
import { flatRow, renderMachine, renderTable } from './core/report.js';
import { notRun } from './core/result.js';
import { ResultsFileError, readResultsFile, toResultsFile } from './core/results-file.js';
import type { ResultsFile } from './core/results-file.js';
import type { RowResult } from './core/result.js';
import { runPairRows } from './core/run-rows.js';
import type { RunContext } from './core/run-rows.js';
import { sweep } from './core/sweep.js';
import { EngineClient } from './engine/client.js';
import { RawFileSubject } from './files/raw.js';
import { openWorkspaceSubject } from './files/workspace.js';
import { probeMemory } from './memory/probe.js';
import { runExecMemory } from './memory/exec-row.js';
import { EXEC_MEMORY_ROW, IDLE_BOXES, MEMORY_BUILT_ROW, MEMORY_ROWS, memoryFailed, memoryRows } from './memory/rows.js';
import { runBuiltMemory } from './memory/built.js';
import { agentRowNames, runAgentRows } from './rows/agent.js';
import { runWarmRows, warmRowNames } from './rows/warm.js';
import { LIFECYCLE_ROW_NAMES, runLifecycleRows } from './rows/lifecycle.js';
import { GVISOR_CHECKPOINT_ROW_NAMES, runGvisorCheckpointRows } from './rows/gvisor-checkpoint.js';
import { TRANSPORT_ROW_NAMES, runTransportRows } from './rows/transport.js';
import { E2B_ROW_NAMES, runE2bRows } from './rows/e2b.js';
import { K8S_ROW_NAMES, runKubernetesRows } from './rows/kubernetes.js';
import { CLI_ROW_NAMES, runCliRows } from './rows/cli.js';
import { REMOTE_ROW_NAMES, runRemoteRows } from './rows/remote.js';
import { EGRESS_ROW_NAMES, runEgressRows } from './rows/egress.js';
import { CONSOLE_ROW_NAMES, runConsoleRows } from './rows/console.js';
import { concurrencyRows, latencyRows } from './rows/boxes.js';
import { DENSITY_ROW_NAMES, runDensityRows } from './rows/density.js';
import { GVISOR_ROW_NAMES, runGvisorRows } from './rows/gvisor.js';
import { WORKSPACE_ROW_NAME, fileRows } from './rows/files.js';
import { RawSubject } from './subjects/raw.js';
import { PoolSubject } from './subjects/pool.js';

const NAMES: [string, string] = ['sbx', 'raw'];
const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url));

const log = (line: string) => process.stderr.write(`bench: ${line}\n`);

interface Run {
  args: BenchArgs;
  runId: string;
  managerName: string;
  tmp: string;
  engine: EngineClient;
  ctx: RunContext;
  memoryChild: number | undefined;
}

async function main(): Promise<number> {
  let args: BenchArgs;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`${err.message ? `bench: ${err.message}\n` : ''}${USAGE}\n`);
    return err.message ? 2 : 0;
  }
  let baseline: ResultsFile | undefined;
  try {
    if (args.plot) return await plot(args.plot, args);
    // Read before any row runs: a bad file stops the run at once, not after minutes of rows.
    if (args.compare) baseline = await readResultsFile(args.compare);
    if (baseline && args.against) {
      const now = await readResultsFile(args.against);
      process.stdout.write(`${renderComparison(compareResults(baseline, now, args.only ?? now.only), baseline, now)}\n`);
      return 0;
    }
  } catch (err) {
    if (!(err instanceof ResultsFileError)) throw err;
    log(err.message);
    return 2;
  }
  const started = performance.now();
  const run: Run = {
    args,
    runId: String(process.pid),
    managerName: `bench-${process.pid}`,
    tmp: await mkdtemp(join(os.tmpdir(), 'sbx-bench-')),
    engine: new EngineClient(),
    ctx: { mode: args.mode, log, signal: new AbortController().signal },
    memoryChild: undefined,
  };
  run.ctx.signal = abortOnSignals(log, () => {
    if (run.memoryChild) process.kill(run.memoryChild, 'SIGKILL');
  });
  try {
    if (args.setup) runSetupScripts(log);
    await checkEngine(run.engine);
    const machine = await describeMachine(run.engine, run.tmp);
    const stale = await sweep(run.engine, run.runId, { stale: true });
    if (stale > 0) log(`removed ${stale} container(s) left by earlier bench runs`);
    const { rows, parity } = await runSelected(run);
    const totalMs = performance.now() - started;
    await report(run, machine, rows, parity, totalMs, baseline);
    return rows.some((r) => r.status === 'failed') ? 1 : 0;
  } catch (err) {
    if (err instanceof NotReady) {
      log(err.message);
      return 2;
    }
    if (err instanceof Interrupted) {
      log('interrupted: no results written');
      return 130;
    }
    if (err instanceof UsageError) {
      log(err.message);
      return 2;
    }
    throw err;
  } finally {
    await cleanUp(run);
  }
}

async function runSelected(run: Run): Promise<{ rows: RowResult[]; parity: string[] }> {
  const boxRows = [...latencyRows, ...concurrencyRows];
  const fileNames = [...fileRows.map((r) => r.name), WORKSPACE_ROW_NAME];
  const all = [
    ...latencyRows.map((r) => r.name),
    ...fileNames,
    ...concurrencyRows.map((r) => r.name),
    MEMORY_ROWS.empty,
    MEMORY_ROWS.full,
    MEMORY_BUILT_ROW,
    EXEC_MEMORY_ROW,
    ...agentRowNames(),
    ...warmRowNames(),
    ...LIFECYCLE_ROW_NAMES,
    ...GVISOR_CHECKPOINT_ROW_NAMES,
    ...TRANSPORT_ROW_NAMES,
    ...E2B_ROW_NAMES,
    ...K8S_ROW_NAMES,
    ...CLI_ROW_NAMES,
    ...REMOTE_ROW_NAMES,
    ...EGRESS_ROW_NAMES,
    ...CONSOLE_ROW_NAMES,
    ...DENSITY_ROW_NAMES,
    ...GVISOR_ROW_NAMES,
  ];
  const picked = selectNames(all, run.args.only);
  if (picked.size === 0) throw new UsageError(`--only ${run.args.only}: no row matches; rows are ${all.join(', ')}`);
  // The seed's name for the workspace rows stands for all of them.
  const wantFiles = picked.has(WORKSPACE_ROW_NAME) ? fileRows : fileRows.filter((r) => picked.has(r.name));
  const results: RowResult[] = [];
  let parity: string[] = [];
  // File rows first: run later, in a process whose heap the engine rows have grown, 16 MiB
  // reads swing by 2x from one run to the next.
  results.push(...(await runFiles(run, wantFiles)));

  const boxes = boxRows.filter((r) => picked.has(r.name));
  const latency = boxes.filter((r) => r.group === 'latency');
  const concurrency = boxes.filter((r) => r.group === 'concurrency');
  if (boxes.length > 0) {
    // The engine's exec, as the raw side uses: these rows measure the library against the Engine
    // API at parity; the Agent and Warm rows measure what the agent and warm pools add.
    const sbx = await PoolSubject.open('sbx', { agent: false }, { managerName: run.managerName, dataDir: join(run.tmp, 'sbx-data'), runId: run.runId });
    const raw = new RawSubject(new EngineClient(), { managerName: run.managerName, runId: run.runId });
    try {
      parity = await checkParity(run.engine, sbx, raw);
      for (const d of parity) log(`parity warning: ${d}`);
      results.push(...(await runPairRows(latency, sbx, raw, run.ctx)));
      results.push(...(await runPairRows(concurrency, sbx, raw, run.ctx)));
    } finally {
      await sbx.close();
      await raw.close();
    }
  }
  // Pods on the Kubernetes test cluster (skipped, saying why, when there is none), beside the Docker rows.
  if (K8S_ROW_NAMES.some((n) => picked.has(n))) results.push(...(await runKubernetesRows(run.ctx, { runId: run.runId, only: picked })));
  if (picked.has(MEMORY_ROWS.empty) || picked.has(MEMORY_ROWS.full)) {
    const memory = await runMemory(run);
    results.push(...memory.filter((r) => picked.has(r.name)));
  }
  if (picked.has(MEMORY_BUILT_ROW)) {
    const opts = { managerName: `${run.managerName}-memb`, dataDir: join(run.tmp, 'mem-built-data'), onChild: (pid?: number) => (run.memoryChild = pid) };
    results.push(...(await runBuiltMemory({ ...run.ctx, ...opts })));
  }
  if (agentRowNames().some((n) => picked.has(n))) {
    results.push(...(await runAgentRows(run.ctx, { managerName: `${run.managerName}-ag`, dataDir: join(run.tmp, 'agent'), runId: run.runId, only: picked })));
  }
  if (TRANSPORT_ROW_NAMES.some((n) => picked.has(n))) {
    results.push(
      ...(await runTransportRows(run.ctx, { managerName: `${run.managerName}-tr`, dataDir: join(run.tmp, 'transport'), runId: run.runId, only: picked })),
    );
  }
  if (E2B_ROW_NAMES.some((n) => picked.has(n))) {
    results.push(...(await runE2bRows(run.ctx, { managerName: `${run.managerName}-e2b`, dataDir: join(run.tmp, 'e2b'), runId: run.runId, only: picked })));
  }
  if (CLI_ROW_NAMES.some((n) => picked.has(n))) {
    results.push(...(await runCliRows(run.ctx, { managerName: `${run.managerName}-cli`, dataDir: join(run.tmp, 'cli'), runId: run.runId, only: picked })));
  }
  // A node in a network namespace with an engine of its own (needs root; skipped, saying why, without).
  if (REMOTE_ROW_NAMES.some((n) => picked.has(n))) {
    results.push(...(await runRemoteRows(run.ctx, { managerName: `${run.managerName}-rm`, dataDir: join(run.tmp, 'remote'), runId: run.runId, only: picked })));
  }
  if (warmRowNames().some((n) => picked.has(n))) {
    results.push(...(await runWarmRows(run.ctx, { managerName: `${run.managerName}-wm`, dataDir: join(run.tmp, 'warm'), runId: run.runId, only: picked })));
  }
  if (CONSOLE_ROW_NAMES.some((n) => picked.has(n))) {
    results.push(
      ...(await runConsoleRows(run.ctx, { managerName: `${run.managerName}-con`, dataDir: join(run.tmp, 'console'), runId: run.runId, only: picked })),
    );
  }
  if (EGRESS_ROW_NAMES.some((n) => picked.has(n))) {
    results.push(...(await runEgressRows(run.ctx, { managerName: `${run.managerName}-eg`, dataDir: join(run.tmp, 'egress'), runId: run.runId, only: picked })));
  }
  if (LIFECYCLE_ROW_NAMES.some((n) => picked.has(n))) {
    results.push(
      ...(await runLifecycleRows(run.ctx, { managerName: `${run.managerName}-lc`, dataDir: join(run.tmp, 'lifecycle'), runId: run.runId, only: picked })),
    );
  }
  // The same box work on gVisor (runsc) beside runc (skipped, saying why, without runsc registered).
  if (GVISOR_ROW_NAMES.some((n) => picked.has(n))) {
    results.push(...(await runGvisorRows(run.ctx, { managerName: `${run.managerName}-gv`, dataDir: join(run.tmp, 'gvisor'), runId: run.runId, only: picked })));
  }
  if (GVISOR_CHECKPOINT_ROW_NAMES.some((n) => picked.has(n))) {
    results.push(
      ...(await runGvisorCheckpointRows(run.ctx, {
        managerName: `${run.managerName}-gck`,
        dataDir: join(run.tmp, 'gvisor-checkpoint'),
        runId: run.runId,
        only: picked,
      })),
    );
  }
  if (DENSITY_ROW_NAMES.some((n) => picked.has(n))) {
    const opts = {
      managerName: `${run.managerName}-den`,
      dataDir: run.tmp,
      runId: run.runId,
      only: picked,
      onChild: (pid?: number) => (run.memoryChild = pid),
    };
    results.push(...(await runDensityRows(run.ctx, opts)));
  }
  if (picked.has(EXEC_MEMORY_ROW)) results.push(...(await runExecMemory({ ...run.ctx, runId: run.runId, onChild: (pid) => (run.memoryChild = pid) })));
  return { rows: results, parity };
}

async function runFiles(run: Run, rows: typeof fileRows): Promise<RowResult[]> {
  if (rows.length === 0) return [];
  const loaded = await openWorkspaceSubject(join(run.tmp, 'workspaces'));
  if ('unavailable' in loaded) {
    log(`workspace rows: not available yet (${loaded.unavailable})`);
    return [notRun({ name: WORKSPACE_ROW_NAME, group: 'workspace' }, 'unavailable', loaded.unavailable)];
  }
  // Same parent directory as the workspaces: same disk, same file system.
  const raw = await RawFileSubject.open(join(run.tmp, 'raw-files'));
  return runPairRows(rows, loaded.subject, raw, run.ctx);
}

async function runMemory(run: Run): Promise<RowResult[]> {
  run.ctx.signal.throwIfAborted();
  log(`memory: child process with a started Manager, then ${IDLE_BOXES} idle boxes`);
  const t0 = performance.now();
  try {
    const report = await probeMemory(
      { managerName: `${run.managerName}-mem`, dataDir: join(run.tmp, 'mem-data'), runId: run.runId, boxes: IDLE_BOXES },
      (pid) => (run.memoryChild = pid),
    );
    return memoryRows(report, performance.now() - t0);
  } catch (err) {
    if (run.ctx.signal.aborted) throw run.ctx.signal.reason;
    log(`memory: FAILED: ${(err as Error).message}`);
    return memoryFailed((err as Error).message);
  }
}

/** `--plot FILE [--out SVG]`: the density row of a results file, drawn; no engine needed. */
async function plot(file: string, args: BenchArgs): Promise<number> {
  const results = await readResultsFile(file);
  const { row, points, others } = densityOf(results, (names) => selectNames(names, args.only));
  if (others.length > 0) log(`plotting ${row}; the file has other density rows too (${others.join(', ')}): pick one with --only`);
  const svg = renderDensitySvg(points, `${row}: idle boxes on one machine`);
  if (!args.out) {
    process.stdout.write(svg);
    return 0;
  }
  await writeFile(args.out, svg).catch((err: NodeJS.ErrnoException) => {
    throw new ResultsFileError(`${args.out}: cannot write (${err.code ?? err.message})`);
  });
  log(`${row}: ${points.length} point(s) drawn to ${args.out}`);
  return 0;
}

async function report(run: Run, machine: Machine, rows: RowResult[], parity: string[], totalMs: number, baseline: ResultsFile | undefined): Promise<void> {
  const when = new Date();
  const summary = {
    rows: rows.map((r) => flatRow(r, NAMES)),
    machine,
    run: {
      mode: run.args.mode,
      only: run.args.only ?? null,
      startedAt: when.toISOString(),
      wallSeconds: Math.round(totalMs / 100) / 10,
      parityWarnings: parity,
    },
  };
  const out = [
    renderTable(rows, NAMES),
    '',
    renderMachine(machine),
    `run: ${run.args.mode}${run.args.only ? ` --only ${run.args.only}` : ''}, ${summary.run.wallSeconds}s wall${parity.length ? `, ${parity.length} parity warning(s) (see stderr)` : ''}`,
  ];
  process.stdout.write(`${out.join('\n')}\n`);
  const file = join(RESULTS_DIR, `${when.toISOString().replace(/[:.]/g, '-')}.json`);
  // The file keeps every sample, for distributions the table's two percentiles hide.
  const detailed = { ...summary, samples: Object.fromEntries(rows.filter((r) => r.samples).map((r) => [r.name, r.samples])) };
  try {
    await mkdir(RESULTS_DIR, { recursive: true });
    await writeFile(file, `${JSON.stringify(detailed, null, 2)}\n`);
    log(`results written to ${file}`);
  } catch (err) {
    // Results are a by-product: a read-only checkout still gets its table.
    log(`could not write ${file}: ${(err as Error).message}`);
  }
  if (baseline) {
    const now = toResultsFile(summary, file);
    process.stdout.write(`\n${renderComparison(compareResults(baseline, now, run.args.only), baseline, now)}\n`);
  }
  if (run.args.json) process.stdout.write(`${JSON.stringify(summary)}\n`);
}

async function cleanUp(run: Run): Promise<void> {
  try {
    let removed = await sweep(run.engine, run.runId);
    // A create the engine was still finishing when we listed shows up a moment later.
    if (run.ctx.signal.aborted) {
      await new Promise((r) => setTimeout(r, 1000));
      removed += await sweep(run.engine, run.runId);
    }
    if (removed > 0) log(`swept ${removed} container(s) of this run that its rows had not removed`);
  } catch (err) {
    log(`could not sweep this run's containers (${(err as Error).message}); the next run removes them`);
  }
  run.engine.close();
  await rm(run.tmp, { recursive: true, force: true }).catch(() => undefined);
}

process.on('unhandledRejection', (err) => {
  log(`unhandled rejection: ${(err as Error)?.stack ?? String(err)}`);
  process.exitCode = 1;
});

process.exitCode = await main();
