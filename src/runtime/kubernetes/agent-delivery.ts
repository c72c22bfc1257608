/**
 * How a pod gets the in-box agent's binary (docs/kubernetes.md, "The in-box agent"):
 *
 * - `image-volume`: the agent image (FROM scratch, the binary alone) mounted read-only at /.sbx as
 *   an image volume. Nothing runs before the box's container. Needs the ImageVolume feature
 *   (GA in Kubernetes 1.36, on by default since 1.35) and a runtime that mounts image volumes
 *   (containerd ≥ 2.1, CRI-O ≥ 1.31); an older runtime fails the container's creation.
 * - `init-container`: an init container copies the binary into an emptyDir. Works on any cluster,
 *   but the kubelet starts the box's container only once it has seen the init container end (its
 *   PLEG relist, once a second): about a second more per create.
 *
 * `auto` (the default) asks the cluster once, with a probe pod that runs the agent from an image
 * volume, and uses the image volume when that ran, else the init container (with a warning saying why).
 */
import { randomBytes } from 'node:crypto';
import type { V1Pod } from '@kubernetes/client-node';
import { invalidArgument, isSbxError } from '../../errors.js';
import { AGENT_DELIVERY_CHOICES } from '../types.js';
import type { AgentDeliveryChoice } from '../types.js';
import type { KubeConnection } from './connection.js';
import { AGENT_BIN, AGENT_DIR, LABELS_ANNOTATION, MAIN_CONTAINER } from './manifest.js';
import { toSbxError } from './errors.js';
import { isReady } from './pod-state.js';
import { untilReady } from './ready.js';

export type AgentDelivery = 'image-volume' | 'init-container';

/** The label of the probe pod (its record says the same), so it is never taken for a box. */
export const PROBE_LABEL = 'sbx.probe';
/** How long the probe waits for its pod to run and end (a cold node may still be pulling the agent image). */
export const PROBE_TIMEOUT_MS = 60_000;

export interface DeliveryVerdict {
  delivery: AgentDelivery;
  /** Why: what the probe saw, or that the pool's option chose it. */
  why: string;
}

/** The option as given (`agentDelivery`), checked. */
export function agentDeliveryChoice(value: unknown): AgentDeliveryChoice {
  if (value === undefined) return 'auto';
  if (typeof value === 'string' && (AGENT_DELIVERY_CHOICES as readonly string[]).includes(value)) return value as AgentDeliveryChoice;
  throw invalidArgument('agentDelivery', `must be one of ${AGENT_DELIVERY_CHOICES.join(', ')}, got ${JSON.stringify(value)}`);
}

/**
 * The probe pod (pure): the agent image as the container's image and as an image volume, running
 * the binary from the volume (`version`, which exits at once), hardened as a box's agent pod is.
 */
export function probeManifest(name: string, namespace: string, image: string): V1Pod {
  const labels = { [PROBE_LABEL]: 'agent-delivery' };
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace, labels, annotations: { [LABELS_ANNOTATION]: JSON.stringify(labels) } },
    spec: {
      containers: [
        {
          name: MAIN_CONTAINER,
          image,
          imagePullPolicy: 'IfNotPresent',
          command: [AGENT_BIN, 'version'],
          volumeMounts: [{ name: 'sbx-agent', mountPath: AGENT_DIR, readOnly: true }],
          resources: { requests: { cpu: '10m', memory: '16Mi' }, limits: { cpu: '100m', memory: '32Mi' } },
          securityContext: {
            allowPrivilegeEscalation: false,
            capabilities: { drop: ['ALL'] },
            seccompProfile: { type: 'RuntimeDefault' },
            readOnlyRootFilesystem: true,
            runAsUser: 65534,
            runAsGroup: 65534,
          },
          terminationMessagePolicy: 'FallbackToLogsOnError',
        },
      ],
      volumes: [{ name: 'sbx-agent', image: { reference: image, pullPolicy: 'IfNotPresent' } }],
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: 0,
    },
  };
}

/**
 * What the probe pod says once it started: running (runc executed the binary from the volume: a
 * binary it cannot execute is a StartError, never Running) or ended with 0 is the image volume.
 */
function verdictOf(pod: V1Pod): DeliveryVerdict {
  const ended = pod.status?.containerStatuses?.find((c) => c.name === MAIN_CONTAINER)?.state?.terminated;
  if (ended?.exitCode === 0 || (!ended && isReady(pod))) return { delivery: 'image-volume', why: 'the probe pod ran the agent from an image volume' };
  const what = ended ? `exited ${ended.exitCode}${ended.reason ? ` (${ended.reason})` : ''}${ended.message ? `: ${ended.message.trim()}` : ''}` : 'did not run';
  return { delivery: 'init-container', why: `the probe pod's agent from an image volume ${what}` };
}

/** Failures that say nothing of the cluster's image volumes (it was not reached): the probe is tried again later. */
const TRANSIENT = new Set(['runtime_unavailable', 'unauthorized', 'forbidden']);

/**
 * Runs the probe pod once and removes it. What the cluster refuses means `init-container`: a pod
 * the API server rejects (no `image` volume field: Kubernetes < 1.31, or the feature off), a
 * container the runtime cannot create, or a probe that does not end in time. An API server that
 * cannot be reached, or refuses the identity, throws (the box's create fails with that).
 */
export async function probeAgentDelivery(conn: KubeConnection, image: string, timeoutMs = PROBE_TIMEOUT_MS): Promise<DeliveryVerdict> {
  const name = `sbx-agent-probe-${randomBytes(4).toString('hex')}`;
  const namespace = conn.namespace;
  try {
    await conn.core.createNamespacedPod({ namespace, body: probeManifest(name, namespace, image) });
  } catch (err) {
    const e = toSbxError(err, conn.address.raw, 'create the agent delivery probe pod');
    if (TRANSIENT.has(e.code)) throw e;
    return { delivery: 'init-container', why: `the API server refused a pod with an image volume: ${e.message}` };
  }
  try {
    return verdictOf(await untilReady(conn, name, timeoutMs));
  } catch (err) {
    if (isSbxError(err) && TRANSIENT.has(err.code)) throw err;
    return { delivery: 'init-container', why: `the probe pod with an image volume could not run: ${(err as Error).message}` };
  } finally {
    await conn.core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 }).catch(() => undefined);
  }
}
