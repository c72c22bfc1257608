import type { V1Pod } from '@kubernetes/client-node';
import type { Subject } from '../subjects/subject.js';
import type { KubeCluster } from './cluster.js';

/** The parts of a stored pod that decide what the kubelet runs, with per-pod values left out. */
function shape(pod: V1Pod): Record<string, unknown> {
  const spec = pod.spec!;
  const main = spec.containers[0];
  return {
    containers: spec.containers.map((c) => c.name),
    initContainers: (spec.initContainers ?? []).map((c) => c.image),
    image: main?.image,
    imagePullPolicy: main?.imagePullPolicy,
    command: main?.command ?? null,
    args: main?.args ?? null,
    workingDir: main?.workingDir ?? null,
    envNames: (main?.env ?? []).map((e) => e.name).sort(),
    resources: main?.resources ?? null,
    securityContext: main?.securityContext ?? null,
    volumeMounts: (main?.volumeMounts ?? []).map((m) => m.mountPath),
    ports: main?.ports ?? null,
    podSecurityContext: spec.securityContext ?? null,
    restartPolicy: spec.restartPolicy,
    automountServiceAccountToken: spec.automountServiceAccountToken ?? null,
    enableServiceLinks: spec.enableServiceLinks ?? null,
    terminationGracePeriodSeconds: spec.terminationGracePeriodSeconds ?? null,
    runtimeClassName: spec.runtimeClassName ?? null,
    dnsPolicy: spec.dnsPolicy,
    volumes: (spec.volumes ?? []).map((v) => v.name),
    labelKeys: Object.keys(pod.metadata?.labels ?? {}).sort(),
  };
}

/**
 * Creates one pod on each side and compares what the API server stored (after its defaults), so a
 * change to sbx's manifest shows up as a warning instead of as a silently unfair ratio. sbx's
 * `sbx.dev/labels` annotation is not compared: keeping it is part of what sbx does.
 */
export async function checkPodParity(cluster: KubeCluster, a: Subject, b: Subject): Promise<string[]> {
  const read = async (s: Subject) => {
    const box = await s.create();
    try {
      return shape(await cluster.core.readNamespacedPod({ name: box.id, namespace: cluster.namespace }));
    } finally {
      await s.remove(box);
    }
  };
  const [left, right] = [await read(a), await read(b)];
  return Object.keys(left)
    .filter((k) => JSON.stringify(left[k]) !== JSON.stringify(right[k]))
    .map((k) => `pod ${k}: ${a.name}=${JSON.stringify(left[k])} ${b.name}=${JSON.stringify(right[k])}`);
}
