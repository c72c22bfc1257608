/**
 * Workspace PVCs: on Kubernetes a workspace is a PersistentVolumeClaim named after its
 * directory (manifest.ts, `workspacePvcName`), which boxes binding that directory mount. The
 * workspace side creates and deletes it through these; ReadWriteOnce, so one node mounts it at a
 * time (the scheduler places a box on the node of a bound local volume by its node affinity).
 */
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { SbxError } from '../../errors.js';
import type { WorkspaceVolumeOptions } from '../types.js';
import type { KubeConnection } from './connection.js';
import { toSbxError } from './errors.js';
import { LABELS_ANNOTATION, kubeLabels, workspacePvcName } from './manifest.js';

export interface PvcOptions extends WorkspaceVolumeOptions {
  /** StorageClass; absent: the cluster's default. */
  storageClassName?: string;
  /** Requested size in bytes (default 1 GiB); whether it is enforced is the storage's business. */
  sizeBytes?: number;
}

const DEFAULT_SIZE = 1024 ** 3;
/** How long an exclusive create waits for a PVC of the same name that is being deleted. */
const TERMINATING_WAIT_MS = 60_000;

export function pvcManifest(hostPath: string, namespace: string, opts: PvcOptions = {}): V1PersistentVolumeClaim {
  const labels = opts.labels ?? {};
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: {
      name: workspacePvcName(hostPath),
      namespace,
      // Only pairs Kubernetes accepts as labels (the rest would fail the create); all of them in the annotation.
      labels: kubeLabels(labels),
      annotations: { 'sbx.dev/workspace-path': hostPath, ...(Object.keys(labels).length ? { [LABELS_ANNOTATION]: JSON.stringify(labels) } : {}) },
    },
    spec: {
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: String(opts.sizeBytes ?? DEFAULT_SIZE) } },
      ...(opts.storageClassName ? { storageClassName: opts.storageClassName } : {}),
    },
  };
}

/**
 * Creates the workspace's PVC unless it exists; returns its name. `exclusive`: an existing PVC
 * is a `conflict` (one being deleted is waited for first), so a new workspace never gets the data
 * of an old one that happened to have the same directory (another data directory of the same
 * path on this namespace, a PVC left behind).
 */
export async function ensurePvc(conn: KubeConnection, hostPath: string, opts: PvcOptions = {}): Promise<string> {
  const body = pvcManifest(hostPath, conn.namespace, opts);
  const name = body.metadata!.name!;
  const deadline = Date.now() + TERMINATING_WAIT_MS;
  for (let delay = 50; ; delay = Math.min(delay * 2, 1000)) {
    try {
      await conn.core.createNamespacedPersistentVolumeClaim({ namespace: conn.namespace, body });
      return name;
    } catch (err) {
      const e = toSbxError(err, conn.address.raw, `create PVC ${name}`);
      if (e.code !== 'conflict') throw e;
      if (!opts.exclusive) return name;
      const existing = await readPvc(conn, name);
      if (existing && !existing.metadata?.deletionTimestamp) {
        throw new SbxError(
          'conflict',
          `PVC ${name} already exists in namespace ${conn.namespace} (for ${existing.metadata?.annotations?.['sbx.dev/workspace-path'] ?? 'an unknown path'}); another sbx data directory of the same path may use this namespace, or it was left behind: delete it or use another workspace id`,
          { details: { pvc: name } },
        );
      }
      if (Date.now() > deadline)
        throw new SbxError('timeout', `PVC ${name} was still being deleted after ${TERMINATING_WAIT_MS} ms`, { details: { pvc: name } });
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

/** The PVC of that name, or undefined when there is none. */
export async function readPvc(conn: KubeConnection, name: string): Promise<V1PersistentVolumeClaim | undefined> {
  try {
    return await conn.core.readNamespacedPersistentVolumeClaim({ name, namespace: conn.namespace });
  } catch (err) {
    const e = toSbxError(err, conn.address.raw, `read PVC ${name}`);
    if (e.code === 'not_found') return undefined;
    throw e;
  }
}

/** Deletes the workspace's PVC (its data goes with it under a Delete reclaim policy); a missing one is not_found. */
export async function deletePvc(conn: KubeConnection, hostPath: string): Promise<void> {
  const name = workspacePvcName(hostPath);
  try {
    await conn.core.deleteNamespacedPersistentVolumeClaim({ name, namespace: conn.namespace });
  } catch (err) {
    const e = toSbxError(err, conn.address.raw, `delete PVC ${name}`);
    throw e.code === 'not_found' ? new SbxError('not_found', `no PVC ${name} for workspace ${hostPath}`, { cause: e, details: { pvc: name } }) : e;
  }
}
