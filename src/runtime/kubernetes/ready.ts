/**
 * Waits until a pod is ready, by a watch on that one pod (no fixed-interval poll), bounded by a
 * timeout. A failure says why in Kubernetes' words: a fatal waiting reason at once
 * (ErrImageNeverPull, …), else at the timeout the latest waiting reason, failed schedule
 * (Unschedulable) or event (ImagePullBackOff, FailedMount, …).
 */
import type { CoreV1Event, V1Pod } from '@kubernetes/client-node';
import { SbxError } from '../../errors.js';
import type { KubeConnection } from './connection.js';
import { toSbxError } from './errors.js';
import { FATAL_WAITING, isReady, lastEvent, notReadyReason, statusOf } from './pod-state.js';
import { EGRESS_CONTAINER, MAIN_CONTAINER } from './manifest.js';

/** The image of the container waiting for the reason (the egress sidecar's or the agent's may be the missing one), else the box's. */
function imageOf(pod: V1Pod, reason?: string): string {
  const waiting = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])].find((c) => c.state?.waiting?.reason === reason);
  const name = waiting?.name ?? MAIN_CONTAINER;
  return [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].find((c) => c.name === name)?.image ?? '';
}

/**
 * The egress sidecar ended with an error before the box's container ran: its rules could not be
 * put in place (nft refused, the probe gave up), and the box never starts without them.
 */
function sidecarFailed(pod: V1Pod): { reason: string; message: string } | undefined {
  if (pod.status?.containerStatuses?.some((c) => c.name === MAIN_CONTAINER && (c.state?.running || c.state?.terminated))) return undefined;
  const s = pod.status?.initContainerStatuses?.find((c) => c.name === EGRESS_CONTAINER);
  const ended = s?.state?.terminated ?? s?.lastState?.terminated;
  if (!ended || ended.exitCode === 0) return undefined;
  // nft cannot open its netlink socket: the pod's runtime has no nftables (gVisor's netstack).
  if (/Netlink socket: Protocol not supported/.test(ended.message ?? '')) {
    const runtimeClass = pod.spec?.runtimeClassName;
    return {
      reason: 'EgressUnsupported',
      message:
        `the egress sidecar cannot put the box's rules in place: the pod's runtime${runtimeClass ? ` (RuntimeClass ${runtimeClass})` : ''} has no nftables ` +
        `(gVisor has none); boxes there run without the sidecar (the runtime option egressImage: ''), and their egress is then not filtered`,
    };
  }
  return {
    reason: 'EgressSidecarFailed',
    message: `the egress sidecar exited with ${ended.exitCode}${ended.reason ? ` (${ended.reason})` : ''}, so the box's rules are not in place${ended.message ? `: ${ended.message.trim()}` : ''}`,
  };
}

/** The error for a pod that will not become ready, typed by its reason. */
export function notReadyError(pod: V1Pod, why: { reason: string; message: string } | undefined, address: string, timedOutMs?: number): SbxError {
  const name = pod.metadata?.name ?? '';
  const reason = why?.reason ?? 'Unknown';
  const text = `${why?.reason ?? 'no reason given'}${why?.message ? `: ${why.message}` : ''}`;
  const details = { id: name, reason, ...(timedOutMs !== undefined ? { timeoutMs: timedOutMs } : {}) };
  if (/^(ErrImageNeverPull|ErrImagePull|ImagePullBackOff|InvalidImageName)$/.test(reason)) {
    const image = imageOf(pod, reason);
    return new SbxError('not_found', `image ${image} is not available to pod ${name} on ${address} (${text})`, { details: { ...details, image } });
  }
  if (reason === 'EgressUnsupported')
    return new SbxError('not_available', `pod ${name} cannot start on ${address}: ${why?.message ?? reason}`, {
      details: { ...details, reason: 'egress_unsupported' },
    });
  if (timedOutMs !== undefined) return new SbxError('timeout', `pod ${name} was not ready within ${timedOutMs} ms on ${address} (${text})`, { details });
  if (statusOf(pod) === 'exited') return new SbxError('conflict', `pod ${name} has ended and cannot start again (${text})`, { details });
  return new SbxError('internal', `pod ${name} cannot start on ${address} (${text})`, { details });
}

/** The main container ran (and ended by itself): terminated after a real start, not a start error. */
function ranAndEnded(pod: V1Pod): boolean {
  const t = pod.status?.containerStatuses?.find((c) => c.name === MAIN_CONTAINER)?.state?.terminated;
  return !!t && !/^(StartError|ContainerCannotRun)$/.test(t.reason ?? '');
}

/**
 * A pull error the kubelet's retries cannot cure: the registry says the image is not there or
 * not ours, or has no address. Other pull errors (a registry down for a moment) wait for the timeout.
 */
function pullCannotWork(why: { reason: string; message: string }): boolean {
  return (
    /^(ErrImagePull|ImagePullBackOff)$/.test(why.reason) && /not found|manifest unknown|pull access denied|no such host|insufficient_scope/i.test(why.message)
  );
}

async function eventsOf(conn: KubeConnection, name: string): Promise<CoreV1Event[]> {
  try {
    const list = await conn.core.listNamespacedEvent({ namespace: conn.namespace, fieldSelector: `involvedObject.name=${name},involvedObject.kind=Pod` });
    return list.items;
  } catch {
    return [];
  }
}

/** Resolves when the pod is ready; rejects with the reason when it cannot be or the time is up. */
export async function untilReady(conn: KubeConnection, name: string, timeoutMs: number): Promise<V1Pod> {
  const what = `pod ${name}`;
  let pod: V1Pod;
  try {
    pod = await conn.core.readNamespacedPod({ name, namespace: conn.namespace });
  } catch (err) {
    throw toSbxError(err, conn.address.raw, what);
  }
  const verdict = (p: V1Pod): 'ready' | SbxError | undefined => {
    // A command that ran and already ended has started (as on Docker): only never running is a failure.
    if (isReady(p) || ranAndEnded(p)) return 'ready';
    const sidecar = sidecarFailed(p);
    if (sidecar) return notReadyError(p, sidecar, conn.address.raw);
    const why = notReadyReason(p);
    if (statusOf(p) === 'exited' || statusOf(p) === 'removing' || (why && (FATAL_WAITING.has(why.reason) || pullCannotWork(why))))
      return notReadyError(p, why, conn.address.raw);
    return undefined;
  };
  const first = verdict(pod);
  if (first === 'ready') return pod;
  if (first) throw first;

  return new Promise<V1Pod>((resolve, reject) => {
    let settled = false;
    let abort: AbortController | undefined;
    const finish = (result: V1Pod | SbxError) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      abort?.abort();
      if (result instanceof SbxError) reject(result);
      else resolve(result);
    };
    const timer = setTimeout(() => {
      void (async () => {
        const events = await eventsOf(conn, name);
        finish(notReadyError(pod, notReadyReason(pod) ?? lastEvent(events), conn.address.raw, timeoutMs));
      })();
    }, timeoutMs);
    const watch = () =>
      conn.watcher
        .watch(
          `/api/v1/namespaces/${conn.namespace}/pods`,
          { fieldSelector: `metadata.name=${name}`, resourceVersion: pod.metadata?.resourceVersion, allowWatchBookmarks: false },
          (type: string, obj: V1Pod) => {
            if (type === 'DELETED') return finish(new SbxError('not_found', `pod ${name} was deleted while starting`, { details: { id: name } }));
            if (type !== 'ADDED' && type !== 'MODIFIED') return;
            pod = obj;
            const v = verdict(obj);
            if (v === 'ready') finish(obj);
            else if (v) finish(v);
          },
          (err: unknown) => {
            if (settled) return;
            // The API server ends watches now and then (its timeout), and a connection can
            // break: read the pod again (what the gap missed) and watch from there. Only a read
            // that fails too ends the wait.
            if (!err) return void watch();
            void conn.core.readNamespacedPod({ name, namespace: conn.namespace }).then(
              (fresh) => {
                pod = fresh;
                const v = verdict(fresh);
                if (v === 'ready') finish(fresh);
                else if (v) finish(v);
                else void watch();
              },
              (readErr: unknown) => finish(toSbxError(readErr, conn.address.raw, `watch ${what}`)),
            );
          },
        )
        .then(
          (c) => {
            abort = c;
            if (settled) c.abort();
          },
          (err: unknown) => finish(toSbxError(err, conn.address.raw, `watch ${what}`)),
        );
    void watch();
  });
}
