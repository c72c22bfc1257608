/**
 * What a node lets a Manager create (docs/nodes.md, "What the node refuses"): boxes on the
 * node's isolated network or none, ports on the node's loopback only, no host path but the
 * node's own workspace volumes, no capability beyond Docker's default set. The Manager is
 * authenticated, but a node is one machine among others: whoever holds a Manager must not get
 * the node's host, its other containers or its engine socket through it.
 */
import { SbxError } from '../errors.js';
import type { ContainerSpec } from '../runtime/types.js';

/** The label the node puts on every container it creates: the containers it serves and nothing else. */
export const NODE_LABEL = 'sbx.node';

/** Docker's default capability set (moby's oci/caps/defaults.go): what a box may add back after dropping. */
export const DEFAULT_CAPS = new Set([
  'CHOWN',
  'DAC_OVERRIDE',
  'FSETID',
  'FOWNER',
  'MKNOD',
  'NET_RAW',
  'SETGID',
  'SETUID',
  'SETFCAP',
  'SETPCAP',
  'NET_BIND_SERVICE',
  'SYS_CHROOT',
  'KILL',
  'AUDIT_WRITE',
]);

function refused(field: string, message: string): SbxError {
  return new SbxError('forbidden', `${field}: ${message}`, { details: { field, reason: 'node_policy' } });
}

/**
 * The spec as the node creates it (already validated by the spec schema): policy checked, its
 * workspace binds translated to the node's directories (`volumeDir`: undefined for a path that
 * names no volume of this node), published ports forced onto 127.0.0.1, the node's label set.
 */
export async function nodeSpec(spec: ContainerSpec, nodeName: string, volumeDir: (hostPath: string) => Promise<string | undefined>): Promise<ContainerSpec> {
  if (spec.network !== undefined && spec.network !== 'none') {
    throw refused('network', `'${spec.network}' is not allowed on a node: boxes use the node's isolated network, or 'none'`);
  }
  for (const cap of spec.security?.capAdd ?? []) {
    const name = cap.replace(/^CAP_/, '');
    if (!DEFAULT_CAPS.has(name)) throw refused('security.capAdd', `${cap} is outside Docker's default capability set, which is all a node grants`);
  }
  const binds = [];
  for (const [i, b] of (spec.binds ?? []).entries()) {
    const dir = await volumeDir(b.hostPath);
    if (!dir) throw refused(`binds.${i}.hostPath`, `${b.hostPath} is not a workspace volume of this node; a node mounts nothing else`);
    binds.push({ ...b, hostPath: dir });
  }
  return {
    ...spec,
    ...(spec.binds ? { binds } : {}),
    // The node's loopback only: the Manager reaches ports through dialPort, never the node's other addresses.
    ...(spec.ports ? { ports: spec.ports.map((p) => ({ ...p, hostIp: '127.0.0.1' })) } : {}),
    labels: { ...(spec.labels ?? {}), [NODE_LABEL]: nodeName },
  };
}
