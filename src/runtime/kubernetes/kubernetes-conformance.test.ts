// The Runtime conformance suite against a real Kubernetes cluster: SBX_TEST_KUBECONFIG names its
// kubeconfig (any cluster; namespace from the context, or SBX_TEST_KUBE_NAMESPACE), else the
// local test cluster's (scripts/kube.sh up). Without a cluster the suite is skipped with the
// reason; with SBX_TEST_KUBECONFIG set, an unreachable cluster fails instead of skipping.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { runtimeConformance } from '../../testing/conformance.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { KubernetesRuntime } from './runtime.js';

const LOCAL_KUBECONFIG = '/var/lib/sbx-kube/kubeconfig/sbx.kubeconfig';
const explicit = process.env['SBX_TEST_KUBECONFIG'];
const kubeconfig = explicit ?? (existsSync(LOCAL_KUBECONFIG) ? LOCAL_KUBECONFIG : undefined);
const namespace = process.env['SBX_TEST_KUBE_NAMESPACE'];
const address = (kc: string) => `k8s://?kubeconfig=${encodeURIComponent(kc)}${namespace ? `&namespace=${namespace}` : ''}`;

async function unavailable(): Promise<string | undefined> {
  if (!kubeconfig) return `no cluster: set SBX_TEST_KUBECONFIG, or run scripts/kube.sh up (${LOCAL_KUBECONFIG} is absent)`;
  if (explicit) return undefined;
  const rt = new KubernetesRuntime(address(kubeconfig));
  try {
    await rt.ping();
    return undefined;
  } catch (err) {
    return `the local test cluster does not answer (scripts/kube.sh up): ${(err as Error).message}`;
  }
}

/** The same kubeconfig with its server moved to a closed port. */
function unreachableKubeconfig(kc: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-kube-dead-'));
  const path = join(dir, 'kubeconfig');
  writeFileSync(path, readFileSync(kc, 'utf8').replace(/server:\s*\S+/g, 'server: https://127.0.0.1:1'), { mode: 0o600 });
  return path;
}

const why = await unavailable();
if (why) {
  test('Runtime conformance: kubernetes', { skip: why }, () => undefined);
} else {
  const kc = kubeconfig!;
  runtimeConformance('kubernetes', {
    open: () => new KubernetesRuntime(address(kc), { readyTimeoutMs: 60_000 }),
    openUnreachable: () => new KubernetesRuntime(address(unreachableKubeconfig(kc))),
    baseImage: testEnv.baseImage,
    runId: testRunId('kube-conformance'),
  });
}
