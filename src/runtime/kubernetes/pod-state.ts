/**
 * A pod read as a container: its phase and main container's state mapped to the runtime's
 * status, exit code and OOM kill, its labels from the annotation (pod-manifest.ts), and why
 * it is not ready yet in the words Kubernetes used.
 */
import type { CoreV1Event, V1ContainerStatus, V1Pod } from '@kubernetes/client-node';
import type { ContainerInfo, ContainerStatus, ContainerSummary } from '../types.js';
import { LABELS_ANNOTATION, MAIN_CONTAINER, NAME_ANNOTATION } from './manifest.js';

/** Waiting reasons after which the pod will not start by itself: start fails at once with them. */
export const FATAL_WAITING = new Set(['ErrImageNeverPull', 'InvalidImageName', 'CreateContainerConfigError', 'CreateContainerError', 'RunContainerError']);

function mainStatus(pod: V1Pod): V1ContainerStatus | undefined {
  return pod.status?.containerStatuses?.find((c) => c.name === MAIN_CONTAINER);
}

/** The box's labels: the annotation holds them all (label values are too narrow for them). */
export function labelsOf(pod: V1Pod): Record<string, string> {
  const raw = pod.metadata?.annotations?.[LABELS_ANNOTATION];
  if (raw) {
    try {
      const parsed = JSON.parse(raw) as unknown;
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed as Record<string, string>;
    } catch {
      // Someone edited the annotation: the Kubernetes labels are the best left.
    }
  }
  return { ...(pod.metadata?.labels ?? {}) };
}

export function statusOf(pod: V1Pod): ContainerStatus {
  if (pod.metadata?.deletionTimestamp) return 'removing';
  const main = mainStatus(pod);
  const state = main?.state;
  if (state?.running) return 'running';
  if (state?.terminated) return 'exited';
  // Waiting after a run that ended (CrashLoopBackOff): a pod someone gave restartPolicy Always
  // (sbx's pods have Never) is being started again.
  if (state?.waiting && main?.lastState?.terminated) return 'restarting';
  switch (pod.status?.phase) {
    case 'Succeeded':
    case 'Failed':
      return 'exited';
    case 'Unknown':
      return 'dead';
    default:
      // Pending: scheduled or not, pulling, init containers running: not started yet.
      return 'created';
  }
}

export function isRunning(pod: V1Pod): boolean {
  return !!mainStatus(pod)?.state?.running && !pod.metadata?.deletionTimestamp;
}

/** Running and the kubelet says the main container is ready. */
export function isReady(pod: V1Pod): boolean {
  return pod.status?.phase === 'Running' && !!mainStatus(pod)?.ready && !pod.metadata?.deletionTimestamp;
}

function iso(t: Date | string | undefined): string | null {
  if (!t) return null;
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}

export function summaryOf(pod: V1Pod): ContainerSummary {
  const name = pod.metadata?.name ?? '';
  return {
    id: name,
    name: pod.metadata?.annotations?.[NAME_ANNOTATION] ?? name,
    image: pod.spec?.containers.find((c) => c.name === MAIN_CONTAINER)?.image ?? '',
    status: statusOf(pod),
    running: isRunning(pod),
    labels: labelsOf(pod),
    createdAt: iso(pod.metadata?.creationTimestamp) ?? new Date(0).toISOString(),
  };
}

export function infoOf(pod: V1Pod): ContainerInfo {
  const main = mainStatus(pod);
  const s = main?.state;
  // A container waiting to run again reports how its last run ended.
  const terminated = s?.terminated ?? (s?.waiting ? main?.lastState?.terminated : undefined);
  return {
    ...summaryOf(pod),
    exitCode: terminated ? exitCodeOf(terminated) : null,
    oomKilled: terminated?.reason === 'OOMKilled',
    // Nothing is published on a host: ports are reached by port-forward (dialPort).
    ports: [],
    startedAt: iso(s?.running?.startedAt ?? terminated?.startedAt),
    execPath: 'engine',
  };
}

/** Why a pod is not ready, from its own status: a waiting reason, a failed schedule, a terminated container. */
export function notReadyReason(pod: V1Pod): { reason: string; message: string } | undefined {
  for (const c of [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])]) {
    const w = c.state?.waiting;
    if (w?.reason && w.reason !== 'ContainerCreating' && w.reason !== 'PodInitializing') return { reason: w.reason, message: w.message ?? '' };
    const t = c.state?.terminated;
    if (t && (c.name === MAIN_CONTAINER || t.exitCode !== 0))
      return { reason: t.reason ?? 'Terminated', message: `container ${c.name} exited with ${t.exitCode}${t.message ? `: ${t.message}` : ''}` };
  }
  const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
  if (scheduled?.status === 'False') return { reason: scheduled.reason ?? 'Unschedulable', message: scheduled.message ?? '' };
  return undefined;
}

/** The latest event of a pod, for a message when nothing in its status says why. */
export function lastEvent(events: CoreV1Event[]): { reason: string; message: string } | undefined {
  const at = (e: CoreV1Event) => new Date(e.lastTimestamp ?? e.eventTime ?? e.metadata?.creationTimestamp ?? 0).getTime();
  const e = [...events].sort((a, b) => at(a) - at(b)).pop();
  return e ? { reason: e.reason ?? '', message: e.message ?? '' } : undefined;
}

/**
 * A container's exit code as on Docker. gVisor's OOM is the host kernel killing the pod's whole
 * sandbox (the Sentry holds the box's memory), and its shim reports 128 for a container whose
 * process never got an exit status: an OOM-killed box exits 137 (SIGKILL) on every runtime.
 */
function exitCodeOf(t: { exitCode: number; reason?: string }): number {
  return t.reason === 'OOMKilled' && t.exitCode === 128 ? 137 : t.exitCode;
}
