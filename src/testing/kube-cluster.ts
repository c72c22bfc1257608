/**
 * The cluster the Kubernetes tests run against: SBX_TEST_KUBECONFIG (any cluster; namespace from
 * its context, or SBX_TEST_KUBE_NAMESPACE), else the local test cluster's kubeconfig
 * (scripts/kube.sh up). `unavailable()` gives the reason to skip: no kubeconfig, or the local
 * cluster not answering. An explicit SBX_TEST_KUBECONFIG is never skipped: a cluster CI was
 * told to use and cannot reach is a failure. SBX_TEST_KUBE_AGENT_IMAGE names the agent's image
 * there (default sbx-agent:latest, images/sbx-agent), SBX_TEST_KUBE_EGRESS_IMAGE the egress
 * sidecar's (default sbx-egress:latest, images/sbx-egress).
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubernetesRuntime } from '../runtime/kubernetes/runtime.js';
import type { KubernetesRuntimeOptions } from '../runtime/kubernetes/runtime.js';

const LOCAL_KUBECONFIG = '/var/lib/sbx-kube/kubeconfig/sbx.kubeconfig';
const explicit = process.env['SBX_TEST_KUBECONFIG'];
export const testKubeconfig = explicit || (existsSync(LOCAL_KUBECONFIG) ? LOCAL_KUBECONFIG : undefined);
const namespace = process.env['SBX_TEST_KUBE_NAMESPACE'];
/** The agent's image on the test cluster (scripts/kube.sh imports sbx-agent:latest). */
export const testAgentImage = process.env['SBX_TEST_KUBE_AGENT_IMAGE'] || 'sbx-agent:latest';
/** The egress sidecar's image on the test cluster (scripts/kube.sh imports sbx-egress:latest). */
export const testEgressImage = process.env['SBX_TEST_KUBE_EGRESS_IMAGE'] || 'sbx-egress:latest';

export function testKubeAddress(kubeconfig = testKubeconfig ?? '', ns = namespace): string {
  return `k8s://?kubeconfig=${encodeURIComponent(kubeconfig)}${ns ? `&namespace=${ns}` : ''}`;
}

export function openTestKube(opts: KubernetesRuntimeOptions = {}): KubernetesRuntime {
  return new KubernetesRuntime(testKubeAddress(), { readyTimeoutMs: 60_000, egressImage: testEgressImage, ...opts });
}

/** Why the Kubernetes tests cannot run here, or undefined when they can. */
export async function unavailable(): Promise<string | undefined> {
  if (!testKubeconfig) return `no cluster: set SBX_TEST_KUBECONFIG, or run scripts/kube.sh up (${LOCAL_KUBECONFIG} is absent)`;
  if (explicit) return undefined;
  try {
    await openTestKube().ping();
    return undefined;
  } catch (err) {
    return `the local test cluster does not answer (scripts/kube.sh up): ${(err as Error).message}`;
  }
}

/** The test kubeconfig with its server moved to a closed port. */
export function unreachableKubeconfig(): string {
  const path = join(mkdtempSync(join(tmpdir(), 'sbx-kube-dead-')), 'kubeconfig');
  writeFileSync(path, readFileSync(testKubeconfig!, 'utf8').replace(/server:\s*\S+/g, 'server: https://127.0.0.1:1'), { mode: 0o600 });
  return path;
}
