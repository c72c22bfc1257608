/**
 * Workspace helper pods: a short-lived pod per workspace for its file I/O from outside any box
 * (`workspaces.fs(id)` on a Kubernetes pool). It holds nothing but the agent image (FROM scratch,
 * the binary alone, read-only) and the workspace's PVC at /workspace; the agent runs as PID 1
 * with no command (it just waits) and serves exec on the pod's loopback like a box's agent, and
 * each file operation is one `sbx-agent fs …` run as the workspace's file owner. The sandbox
 * layer decides when one starts and goes (src/sandbox/workspace-volumes.ts).
 */
import { createHash, randomBytes } from 'node:crypto';
import type { V1Pod } from '@kubernetes/client-node';
import { SbxError } from '../../errors.js';
import type { WorkspaceHelperOptions } from '../types.js';
import { readPvc } from './pvcs.js';
import type { KubeConnection } from './connection.js';
import { toSbxError } from './errors.js';
import { AGENT_ANNOTATION, AGENT_PORT, AGENT_TOKEN_ENV, LABELS_ANNOTATION, MAIN_CONTAINER, kubeLabels, workspacePvcName } from './manifest.js';

/** The binary's path in the agent image (images/sbx-agent), which is the helper's only file. */
export const HELPER_TOOL = '/sbx-agent';
/** Where the helper mounts the workspace. */
export const HELPER_ROOT = '/workspace';

export interface HelperManifestOptions extends WorkspaceHelperOptions {
  name: string;
  namespace: string;
  /** The agent image. */
  image: string;
  /** The agent's per-pod secret (agent.ts). */
  token: string;
}

/** `sbx-wsh-<8 hex of the workspace path>-<6 random hex>`: a new name per start, so a helper being deleted never blocks the next. */
export function helperPodName(hostPath: string): string {
  return `sbx-wsh-${createHash('sha256').update(hostPath).digest('hex').slice(0, 8)}-${randomBytes(3).toString('hex')}`;
}

/**
 * The helper pod (pure). The agent runs as root with KILL, SETUID and SETGID only (what it needs to
 * start each operation as `uid:gid` and to kill it), so an operation cannot read the agent's token
 * from /proc/1/environ; the root filesystem is read-only, the service account token is not
 * mounted, `fsGroup` makes the volume writable for the owner's group.
 */
export function helperManifest(hostPath: string, o: HelperManifestOptions): V1Pod {
  const user = `${o.uid}:${o.gid}`;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: o.name,
      namespace: o.namespace,
      labels: kubeLabels(o.labels),
      annotations: { [LABELS_ANNOTATION]: JSON.stringify(o.labels), [AGENT_ANNOTATION]: String(AGENT_PORT), 'sbx.dev/workspace-path': hostPath },
    },
    spec: {
      containers: [
        {
          name: MAIN_CONTAINER,
          image: o.image,
          imagePullPolicy: 'IfNotPresent',
          // No command after the options: the agent only waits, and serves exec on loopback.
          command: [HELPER_TOOL, 'init', '--socket', '', '--listen', `127.0.0.1:${AGENT_PORT}`, '--user', user],
          env: [{ name: AGENT_TOKEN_ENV, value: o.token }],
          workingDir: HELPER_ROOT,
          volumeMounts: [{ name: 'workspace', mountPath: HELPER_ROOT }],
          resources: { requests: { cpu: '10m', memory: '32Mi' }, limits: { cpu: '1', memory: '512Mi' } },
          securityContext: {
            runAsUser: 0,
            runAsGroup: 0,
            allowPrivilegeEscalation: false,
            capabilities: { drop: ['ALL'], add: ['KILL', 'SETUID', 'SETGID'] },
            readOnlyRootFilesystem: true,
            seccompProfile: { type: 'RuntimeDefault' },
          },
          terminationMessagePolicy: 'FallbackToLogsOnError',
        },
      ],
      volumes: [{ name: 'workspace', persistentVolumeClaim: { claimName: workspacePvcName(hostPath) } }],
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: 1,
      securityContext: { fsGroup: o.gid, seccompProfile: { type: 'RuntimeDefault' } },
    },
  };
}

/**
 * Creates a workspace's helper pod (not yet ready: the runtime's `start` waits for it); its name.
 * `not_available` without an agent image, `not_found` when the workspace's PVC is gone (a pod
 * would wait for it forever).
 */
export async function createHelperPod(conn: KubeConnection, hostPath: string, opts: WorkspaceHelperOptions & { image: string | undefined }): Promise<string> {
  if (!opts.image) {
    throw new SbxError('not_available', `workspace file I/O on ${conn.address.raw} needs the pool's agentImage: a helper pod runs the agent binary`, {
      details: { reason: 'no_agent_image' },
    });
  }
  const pvcName = workspacePvcName(hostPath);
  const pvc = await readPvc(conn, pvcName);
  if (!pvc || pvc.metadata?.deletionTimestamp) {
    throw new SbxError('not_found', `the storage of workspace ${hostPath} (PVC ${pvcName}) is gone from namespace ${conn.namespace}`, {
      details: { pvc: pvcName },
    });
  }
  const name = helperPodName(hostPath);
  const body = helperManifest(hostPath, { ...opts, image: opts.image, name, namespace: conn.namespace, token: randomBytes(32).toString('hex') });
  try {
    await conn.core.createNamespacedPod({ namespace: conn.namespace, body });
  } catch (err) {
    throw toSbxError(err, conn.address.raw, `create workspace helper pod for ${pvcName}`);
  }
  return name;
}
