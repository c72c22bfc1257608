import { SbxError } from '../../errors.js';

/** A Kubernetes pool's address, parsed. */
export interface KubeAddress {
  raw: string;
  /** Kubeconfig file; absent: in-cluster config when sbx runs in a pod, else $KUBECONFIG or ~/.kube/config. */
  kubeconfig?: string;
  /** Context of the kubeconfig; absent: its current context. */
  context?: string;
  /** Namespace of the boxes; absent: the context's, else `default`. */
  namespace?: string;
}

const KEYS = new Set(['kubeconfig', 'context', 'namespace']);
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/**
 * Parses `k8s://` (or `kubernetes://`) with the options as query parameters:
 * `k8s://?kubeconfig=/etc/sbx/kubeconfig&context=prod&namespace=sbx`. Nothing may stand between
 * `//` and `?`: the cluster is the kubeconfig's, never named in the address.
 *
 * @example
 * parseKubeAddress('k8s://?namespace=sbx-test') // { raw, namespace: 'sbx-test' }
 */
export function parseKubeAddress(addr: string): KubeAddress {
  const raw = addr.trim();
  const m = /^(?:k8s|kubernetes):\/\/([^?#]*)(?:\?([^#]*))?$/.exec(raw);
  if (!m) throw invalid(raw, 'expected k8s://?kubeconfig=<path>&context=<name>&namespace=<name>');
  if (m[1] !== '' && m[1] !== '/') throw invalid(raw, `'${m[1]}' before '?': the cluster comes from the kubeconfig; use ?context=`);
  const out: KubeAddress = { raw };
  for (const [key, value] of new URLSearchParams(m[2] ?? '')) {
    if (!KEYS.has(key)) throw invalid(raw, `unknown option '${key}' (kubeconfig, context, namespace)`);
    if (value === '') throw invalid(raw, `option '${key}' is empty`);
    if (key in out) throw invalid(raw, `option '${key}' is given twice`);
    if (key === 'kubeconfig' && !value.startsWith('/')) throw invalid(raw, 'kubeconfig must be an absolute path');
    if (key === 'namespace' && !DNS_LABEL.test(value)) throw invalid(raw, `namespace '${value}' is not a DNS label`);
    out[key as 'kubeconfig' | 'context' | 'namespace'] = value;
  }
  return out;
}

/** Whether an address names a Kubernetes cluster (and so this runtime). */
export function isKubeAddress(addr: string): boolean {
  return /^(k8s|kubernetes):\/\//.test(addr.trim());
}

function invalid(raw: string, why: string): SbxError {
  return new SbxError('invalid_argument', `addr: invalid Kubernetes address '${raw}': ${why}`, { details: { field: 'addr' } });
}
