/**
 * The cluster the Kubernetes rows run on and the sweep of their pods. The cluster is the one the
 * Kubernetes tests use (src/testing/kube-cluster.ts): SBX_TEST_KUBECONFIG, else the local
 * test cluster's kubeconfig (scripts/kube.sh up); the namespace SBX_TEST_KUBE_NAMESPACE, else the
 * kubeconfig context's. The bench never starts a cluster: without one the rows are skipped.
 */
import os from 'node:os';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import type { V1Pod } from '@kubernetes/client-node';
import { testKubeAddress, testKubeconfig, unavailable } from '../../src/testing/kube-cluster.js';
import { BENCH_CONTAINER_LABEL } from '../core/identity.js';
import { forEachLimited } from '../core/pool.js';
import { alive } from '../core/sweep.js';

/**
 * Beside BENCH_CONTAINER_LABEL (the run's pid) on every bench pod: a cluster may be shared by
 * several machines, whose pids say nothing here, so only this host's dead runs count as stale.
 */
export const BENCH_HOST_LABEL = `${BENCH_CONTAINER_LABEL}-host`;
const HOST = os
  .hostname()
  .replace(/[^A-Za-z0-9._-]/g, '-')
  .slice(0, 63)
  .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');

export interface KubeCluster {
  /** The address the sbx side opens (`k8s://?kubeconfig=…&namespace=…`). */
  address: string;
  namespace: string;
  /** The raw side's own client-node configuration, loaded from the same kubeconfig. */
  config: KubeConfig;
  core: CoreV1Api;
  /** The API server's version and URL, for the log. */
  describe: string;
}

/** The labels of every pod a bench run makes, on both sides. */
export function benchPodLabels(runId: string): Record<string, string> {
  return { [BENCH_CONTAINER_LABEL]: runId, [BENCH_HOST_LABEL]: HOST || 'unknown' };
}

/** How long the cluster may take to answer the checks: a hung API server must not hang the bench. */
const CHECK_MS = 15_000;

function within<T>(p: Promise<T>): Promise<T> {
  return Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${CHECK_MS} ms`)), CHECK_MS).unref())]);
}

/** The test cluster, or why there is none to run on (no kubeconfig, no answer, no rights on pods). */
export async function openCluster(): Promise<KubeCluster | { unavailable: string }> {
  const why = await within(unavailable()).catch((err: unknown) => `the test cluster: ${(err as Error).message}`);
  if (why) return { unavailable: why };
  try {
    const config = new KubeConfig();
    config.loadFromFile(testKubeconfig!);
    const namespace = process.env['SBX_TEST_KUBE_NAMESPACE'] || config.getContextObject(config.getCurrentContext())?.namespace || 'default';
    const core = config.makeApiClient(CoreV1Api);
    // unavailable() trusts an explicit SBX_TEST_KUBECONFIG (a test must fail on it); the bench asks,
    // and a listing also proves the rights on pods the rows need.
    await within(core.listNamespacedPod({ namespace, limit: 1 }));
    const server = config.getCurrentCluster()?.server ?? '?';
    return { address: testKubeAddress(testKubeconfig, namespace), namespace, config, core, describe: `${server}, namespace ${namespace}` };
  } catch (err) {
    return { unavailable: `no usable cluster in ${testKubeconfig}: ${(err as Error).message.split('\n')[0]}` };
  }
}

const GONE_WAIT_MS = 30_000;

/**
 * Deletes (grace 0) the bench pods of `runId` on this host, plus, with `stale`, those of this host's
 * bench runs whose process is gone, and waits until they are gone. Returns how many it deleted.
 */
export async function sweepPods(cluster: KubeCluster, runId: string, opts: { stale?: boolean } = {}): Promise<number> {
  const list = async () =>
    (await cluster.core.listNamespacedPod({ namespace: cluster.namespace, labelSelector: `${BENCH_CONTAINER_LABEL},${BENCH_HOST_LABEL}=${HOST}` })).items;
  const doomed = (pods: V1Pod[]) =>
    pods.filter((p) => {
      const owner = p.metadata?.labels?.[BENCH_CONTAINER_LABEL] ?? '';
      const pid = Number(owner);
      return owner === runId || (opts.stale === true && (!Number.isInteger(pid) || pid <= 0 || !alive(pid)));
    });
  const names = doomed(await list()).map((p) => p.metadata!.name!);
  await forEachLimited(names, 5, async (name) => {
    await cluster.core.deleteNamespacedPod({ name, namespace: cluster.namespace, gracePeriodSeconds: 0 }).catch((err: unknown) => {
      if ((err as { code?: number }).code !== 404) throw err;
    });
  });
  for (const deadline = Date.now() + GONE_WAIT_MS; names.length > 0; await new Promise((r) => setTimeout(r, 200))) {
    const left = (await list()).filter((p) => names.includes(p.metadata?.name ?? ''));
    if (left.length === 0) break;
    if (Date.now() > deadline) throw new Error(`pods still there ${GONE_WAIT_MS} ms after their delete: ${left.map((p) => p.metadata?.name).join(', ')}`);
  }
  return names.length;
}
