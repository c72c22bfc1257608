// Run inside a pod by in-cluster.test.ts: sbx's Kubernetes runtime with `k8s://` and nothing else,
// so it must find the cluster from the pod's own service account (in-cluster config). Prints one
// JSON line: the API server's version, and whether listing the namespace shows this very pod.
import { hostname } from 'node:os';
import { KubernetesRuntime } from '../runtime/kubernetes/runtime.js';

const rt = new KubernetesRuntime('k8s://');
try {
  const version = await rt.version();
  const pods = await rt.list();
  console.log(JSON.stringify({ ok: true, version: version.version, seesItself: pods.some((p) => p.id === hostname()) }));
} catch (err) {
  console.log(JSON.stringify({ ok: false, error: String(err) }));
  process.exitCode = 1;
}
