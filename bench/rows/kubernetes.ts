/**
 * Kubernetes rows: boxes as pods through sbx's KubernetesRuntime beside plain
 * @kubernetes/client-node calls doing the same (create pod + watch until ready, exec, delete with
 * grace 0 until gone), on the same pod, interleaved, as absolute p50/p95/p99 and the ratio sbx/raw.
 * The cluster is the Kubernetes tests' (bench/kubernetes/cluster.ts); without one the rows are
 * skipped with the reason. Every pod of either side carries the bench labels and is swept at the
 * start (this host's dead runs) and at the end.
 *
 * A variant of the sbx side is one more entry in VARIANTS (runtime options): the API server's exec
 * (`K8s …`, the same pod as raw) and the in-box agent (`K8s agent …`).
 *
 * Run alone: `npx tsx bench/rows/kubernetes.ts [--quick] [--only NAME]`, or as part of
 * `npm run bench` (`--only K8s`).
 */
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { isSbxError } from '../../src/errors.js';
import type { KubernetesRuntimeOptions } from '../../src/runtime/kubernetes/runtime.js';
import { testAgentImage } from '../../src/testing/kube-cluster.js';
import { selectNames } from '../core/cli.js';
import { Interrupted, abortOnSignals } from '../core/interrupt.js';
import { renderTable } from '../core/report.js';
import { notRun } from '../core/result.js';
import type { RowResult } from '../core/result.js';
import { defineRow } from '../core/row.js';
import type { AnyRow } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import type { RunContext } from '../core/run-rows.js';
import { benchPodLabels, openCluster, sweepPods } from '../kubernetes/cluster.js';
import type { KubeCluster } from '../kubernetes/cluster.js';
import { checkPodParity } from '../kubernetes/parity.js';
import { KubeRuntimeSubject, RawKubeSubject } from '../subjects/kubernetes.js';
import type { BoxRef, ExecOutcome, Subject } from '../subjects/subject.js';
import { latencyTwin } from './boxes.js';

type S = Subject;

/** The sbx sides measured against raw client-node; each is its rows under its own prefix. */
interface Variant {
  prefix: string;
  /** What the runtime is opened with beyond the address. */
  options: KubernetesRuntimeOptions;
  /** Compare the stored pods with the raw side's before the rows (a variant that changes the pod on purpose skips it). */
  parity: boolean;
  /** Added to each row's note. */
  note?: string;
}

const VARIANTS: readonly Variant[] = [
  // Exec through the API server, as the raw side: the pods are the same (checked), the rows measure the runtime.
  { prefix: 'K8s', options: { agent: false }, parity: true },
  // The in-box agent (PID 1 from the agent image: an image volume where the cluster mounts one, else an
  // init container's copy; exec over a port-forward to it) against the same raw pod.
  { prefix: 'K8s agent', options: { agentImage: testAgentImage }, parity: false, note: `sbx with the in-box agent (${testAgentImage}, agentDelivery auto)` },
  // The fallback delivery, on any cluster: an init container copies the binary in before the box starts.
  {
    prefix: 'K8s agent init',
    options: { agentImage: testAgentImage, agentDelivery: 'init-container' },
    parity: false,
    note: `sbx with the in-box agent (${testAgentImage}) copied in by an init container`,
  },
];

/** The one row a run without a cluster reports. */
const SKIPPED_ROW = { name: 'K8s', group: 'latency' as const };

function expectTrue(r: ExecOutcome): void {
  if (r.exitCode !== 0) throw new Error(`exec true exited ${r.exitCode}`);
}

/** Docker's Create and Remove rows as they are (op, iterations, the untimed removals), renamed; the seed's numbers are Docker's. */
function dockerTwin(name: 'Create' | 'Remove', prefix: string, note: string): AnyRow<S> {
  return latencyTwin(name, { name: `${prefix} ${name}`, note });
}

function kubeRows({ prefix, note }: Variant): AnyRow<S>[] {
  const rows: AnyRow<S>[] = [
    dockerTwin('Create', prefix, 'create pod + until Running and ready'),
    defineRow<S, BoxRef>({
      name: `${prefix} Exec`,
      group: 'latency',
      note: 'true, buffered',
      iterations: { quick: 20, full: 200 },
      warmup: 3,
      setup: (s) => s.create(),
      teardown: (s, box) => s.remove(box),
      async op(s, box) {
        expectTrue(await s.exec(box, ['true']));
      },
    }),
    dockerTwin('Remove', prefix, 'delete grace 0, until gone (running pod)'),
    defineRow<S>({
      name: `${prefix} Lifecycle`,
      group: 'latency',
      note: 'create+ready, exec true, remove',
      iterations: { quick: 6, full: 30 },
      warmup: 1,
      async op(s) {
        const box = await s.create();
        try {
          expectTrue(await s.exec(box, ['true']));
        } finally {
          await s.remove(box);
        }
      },
    }),
  ];
  return note ? rows.map((r) => ({ ...r, note: `${r.note ?? ''}; ${note}` })) : rows;
}

/** Every Kubernetes row name, for --only. */
export const K8S_ROW_NAMES: readonly string[] = VARIANTS.flatMap((v) => kubeRows(v).map((r) => r.name));

const load = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

/** Deletes this run's pods; after an interrupt once more a moment later (a create finishing as we listed). */
async function sweepRun(cluster: KubeCluster, ctx: RunContext, runId: string): Promise<void> {
  try {
    let removed = await sweepPods(cluster, runId);
    if (ctx.signal.aborted) {
      await new Promise((r) => setTimeout(r, 1000));
      removed += await sweepPods(cluster, runId);
    }
    if (removed > 0) ctx.log(`k8s: swept ${removed} pod(s) of this run that its rows had not removed`);
  } catch (err) {
    ctx.log(`k8s: could not sweep this run's pods (${(err as Error).message}); the next run removes them`);
  }
}

/** The Kubernetes rows `only` names (all by default), each variant against raw client-node. */
export async function runKubernetesRows(ctx: RunContext, opts: { runId: string; only?: ReadonlySet<string> }): Promise<RowResult[]> {
  const wanted = VARIANTS.map((v) => ({ v, rows: kubeRows(v).filter((r) => !opts.only || opts.only.has(r.name)) })).filter((w) => w.rows.length > 0);
  if (wanted.length === 0) return [];
  const cluster = await openCluster();
  if ('unavailable' in cluster) {
    ctx.log(`K8s rows skipped: ${cluster.unavailable}`);
    return [notRun(SKIPPED_ROW, 'skipped', cluster.unavailable)];
  }
  ctx.log(`k8s: ${cluster.describe}; load average ${load()}`);
  const stale = await sweepPods(cluster, opts.runId, { stale: true });
  if (stale > 0) ctx.log(`k8s: removed ${stale} pod(s) left by earlier bench runs`);
  const labels = benchPodLabels(opts.runId);
  const raw = new RawKubeSubject(cluster.config, cluster.core, cluster.namespace, labels);
  const results: RowResult[] = [];
  try {
    for (const { v, rows } of wanted) {
      const sbx = new KubeRuntimeSubject('sbx', cluster.address, labels, v.options);
      try {
        let parity: string[];
        try {
          // Also the first box of the variant: one that cannot be made says why once, not per row.
          parity = v.parity ? await checkPodParity(cluster, sbx, raw) : await sbx.remove(await sbx.create()).then(() => []);
        } catch (err) {
          if (ctx.signal.aborted) throw ctx.signal.reason;
          const reason = (err as Error).message;
          ctx.log(`${v.prefix} rows: ${reason}`);
          // A missing image (the agent's) makes a variant unavailable; anything else is a failure.
          results.push(...rows.map((r) => notRun(r, isSbxError(err, 'not_found') ? 'unavailable' : 'failed', reason)));
          continue;
        }
        for (const d of parity) ctx.log(`parity warning (${v.prefix}): ${d}`);
        const measured = await runPairRows(rows, sbx, raw, ctx);
        if (parity.length > 0) for (const r of measured) r.note = `${r.note ?? ''}; ${parity.length} parity warning(s), see stderr`;
        results.push(...measured);
      } finally {
        await sbx.close();
      }
    }
    ctx.log(`k8s: done; load average ${load()}`);
    return results;
  } finally {
    await raw.close();
    await sweepRun(cluster, ctx, opts.runId);
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const i = argv.indexOf('--only');
  const only = i >= 0 && argv[i + 1] ? selectNames(K8S_ROW_NAMES, argv[i + 1]) : undefined;
  const log = (line: string) => process.stderr.write(`bench: ${line}\n`);
  const ctx: RunContext = { mode: argv.includes('--quick') ? 'quick' : 'full', log, signal: abortOnSignals(log, () => undefined) };
  let results: RowResult[];
  try {
    results = await runKubernetesRows(ctx, { runId: String(process.pid), ...(only ? { only } : {}) });
  } catch (err) {
    if (!(err instanceof Interrupted)) throw err;
    log('interrupted: no results');
    process.exitCode = 130;
    return;
  }
  process.stdout.write(`${renderTable(results, ['sbx', 'raw'])}\n`);
  if (results.some((r) => r.status === 'failed')) process.exitCode = 1;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
