/**
 * Egress rules on Kubernetes, the runtime's side (docs/network.md, "Kubernetes"). Each box's pod
 * has its own enforcer, the `sbx-egress` native sidecar (manifest.ts): it holds the pod's nftables
 * table in the pod's network namespace, so nothing depends on the cluster's CNI enforcing
 * NetworkPolicy. The rules of a running box change through the sidecar's API on its unix socket,
 * which only the sidecar's container mounts: sbx reaches it by exec'ing `sbx-egress call` there
 * over the API server (pods/exec, which the runtime's Role has anyway), never from the box.
 */
import { isIP } from 'node:net';
import { SbxError, invalidArgument } from '../../errors.js';
import type { EgressSpec } from '../types.js';
import type { KubeConnection } from './connection.js';
import { kubeExecPlain } from './exec.js';
import { EGRESS_BIN, EGRESS_CONTAINER } from './manifest.js';

/** The variable that names the DNS servers the enforcers ask, when the runtime's options do not. */
export const EGRESS_DNS_ENV = 'SBX_EGRESS_DNS';
/** The variable that names the networks always denied (the cluster's pod and service networks), when the options do not. */
export const EGRESS_DENY_NETWORKS_ENV = 'SBX_EGRESS_DENY_NETWORKS';
/** The sidecar's API path for its one box. */
const SELF_PATH = '/v1/boxes/self';
/** A call to the sidecar: one exec through the API server and one nft transaction. */
const CALL_TIMEOUT_MS = 30_000;

/**
 * The upstream DNS servers as the enforcer takes them (`address:port`, IPv6 bracketed), from the
 * runtime's `egressDns`, else SBX_EGRESS_DNS (comma or space separated); empty: each pod's own
 * resolv.conf. A bare address gets port 53.
 */
export function egressDnsServers(option: string[] | undefined, env: NodeJS.ProcessEnv = process.env): string[] {
  const fromEnv = env[EGRESS_DNS_ENV];
  const field = option ? 'egressDns' : EGRESS_DNS_ENV;
  const list = option ?? (fromEnv ? fromEnv.split(/[\s,]+/).filter(Boolean) : []);
  return list.map((entry, i) => {
    const bad = () => invalidArgument(option ? `${field}[${i}]` : field, `'${entry}' is not an IP address, address:port or [IPv6]:port`);
    if (isIP(entry)) return isIP(entry) === 6 ? `[${entry}]:53` : `${entry}:53`;
    const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(entry);
    if (!m) throw bad();
    const host = m[1] ?? m[2]!;
    const port = Number(m[3]);
    if (isIP(host) !== (m[1] ? 6 : 4) || port < 1 || port > 65535) throw bad();
    return entry;
  });
}

/**
 * The address blocks every pod's enforcer denies besides the built-in ones, from the runtime's
 * `egressDenyNetworks`, else SBX_EGRESS_DENY_NETWORKS (comma or space separated): the cluster's
 * pod and service networks, so boxes cannot reach each other under `all` or a denylist (an
 * allowlist denies every private range anyway). A bare address becomes /32 or /128.
 */
export function egressDenyNetworks(option: string[] | undefined, env: NodeJS.ProcessEnv = process.env): string[] {
  const fromEnv = env[EGRESS_DENY_NETWORKS_ENV];
  const list = option ?? (fromEnv ? fromEnv.split(/[\s,]+/).filter(Boolean) : []);
  return list.map((entry, i) => {
    const [address = '', bits, extra] = entry.split('/');
    const family = isIP(address);
    const max = family === 6 ? 128 : 32;
    const n = bits === undefined ? max : /^\d{1,3}$/.test(bits) ? Number(bits) : -1;
    if (!family || extra !== undefined || n < 0 || n > max) {
      throw invalidArgument(option ? `egressDenyNetworks[${i}]` : EGRESS_DENY_NETWORKS_ENV, `'${entry}' is not an IP address or CIDR`);
    }
    return `${address}/${n}`;
  });
}

interface SidecarTarget {
  conn: KubeConnection;
  pod: string;
}

/** `sbx-egress call <method> <path>` in the sidecar: the response body, or the sidecar's error. */
async function call(t: SidecarTarget, method: 'GET' | 'PUT', body?: unknown): Promise<string> {
  const r = await kubeExecPlain({ ...t, container: EGRESS_CONTAINER }, [EGRESS_BIN, 'call', method, SELF_PATH], {
    ...(body !== undefined ? { stdin: JSON.stringify(body) } : {}),
    timeoutMs: CALL_TIMEOUT_MS,
  });
  if (r.exitCode === 0) return r.stdout;
  throw new SbxError(
    'internal',
    `the egress sidecar of pod ${t.pod} refused ${method} ${SELF_PATH} (exit ${r.exitCode}): ${r.stderr.trim() || r.stdout.trim()}`,
    {
      details: { id: t.pod, exitCode: r.exitCode },
    },
  );
}

/** Replaces the pod's rules; resolves once the sidecar committed them (one nft transaction). */
export async function putPodEgress(t: SidecarTarget, spec: EgressSpec, dns: string[]): Promise<void> {
  await call(t, 'PUT', { spec, dns });
}

/** The rules in force in the pod, as its sidecar reports them. */
export async function getPodEgress(t: SidecarTarget): Promise<EgressSpec> {
  const out = await call(t, 'GET');
  let parsed: { spec?: EgressSpec };
  try {
    parsed = JSON.parse(out) as { spec?: EgressSpec };
  } catch {
    throw new SbxError('internal', `the egress sidecar of pod ${t.pod} answered ${SELF_PATH} with something that is not JSON: ${out.slice(0, 200)}`, {
      details: { id: t.pod },
    });
  }
  const spec = parsed.spec;
  if (!spec) throw new SbxError('internal', `the egress sidecar of pod ${t.pod} answered ${SELF_PATH} without a spec`, { details: { id: t.pod } });
  // Go writes an empty list as null.
  return { mode: spec.mode, allow: spec.allow ?? [], deny: spec.deny ?? [], endpoints: spec.endpoints ?? [] };
}
