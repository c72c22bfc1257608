/**
 * Workspace claims: on Kubernetes a workspace is a PersistentVolumeClaim named after its
 * directory (manifest.ts, `workspaceClaimName`), which boxes binding that directory mount. The
 * workspace side creates and deletes it through these; ReadWriteOnce, so one node mounts it at a
 * time (the scheduler places a box on the node of a bound local volume by its node affinity).
 */
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { SbxError } from '../../errors.js';
import type { KubeConnection } from './connection.js';
import { toSbxError } from './errors.js';
import { workspaceClaimName } from './manifest.js';

export interface ClaimOptions {
  /** StorageClass; absent: the cluster's default. */
  storageClassName?: string;
  /** Requested size in bytes (default 1 GiB); whether it is enforced is the storage's business. */
  sizeBytes?: number;
  labels?: Record<string, string>;
}

const DEFAULT_SIZE = 1024 ** 3;

export function claimManifest(hostPath: string, namespace: string, opts: ClaimOptions = {}): V1PersistentVolumeClaim {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name: workspaceClaimName(hostPath), namespace, labels: opts.labels ?? {}, annotations: { 'sbx.dev/workspace-path': hostPath } },
    spec: {
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: String(opts.sizeBytes ?? DEFAULT_SIZE) } },
      ...(opts.storageClassName ? { storageClassName: opts.storageClassName } : {}),
    },
  };
}

/** Creates the workspace's claim unless it exists; returns its name. */
export async function ensureClaim(conn: KubeConnection, hostPath: string, opts: ClaimOptions = {}): Promise<string> {
  const body = claimManifest(hostPath, conn.namespace, opts);
  const name = body.metadata!.name!;
  try {
    await conn.core.createNamespacedPersistentVolumeClaim({ namespace: conn.namespace, body });
  } catch (err) {
    const e = toSbxError(err, conn.address.raw, `create claim ${name}`);
    if (e.code !== 'conflict') throw e;
  }
  return name;
}

/** Deletes the workspace's claim (its data goes with it under a Delete reclaim policy); a missing one is not_found. */
export async function deleteClaim(conn: KubeConnection, hostPath: string): Promise<void> {
  const name = workspaceClaimName(hostPath);
  try {
    await conn.core.deleteNamespacedPersistentVolumeClaim({ name, namespace: conn.namespace });
  } catch (err) {
    const e = toSbxError(err, conn.address.raw, `delete claim ${name}`);
    throw e.code === 'not_found' ? new SbxError('not_found', `no claim ${name} for workspace ${hostPath}`, { cause: e, details: { claim: name } }) : e;
  }
}
