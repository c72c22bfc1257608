/**
 * The in-box agent on Kubernetes (docs/kubernetes.md, "The in-box agent"): it listens on the
 * pod's loopback, reached through the API server's port-forward, and every connection presents
 * the pod's secret, which the runtime put in the pod spec and reads back from it (so a restarted
 * runtime needs nothing stored). A pod of a RuntimeClass is reached at its IP instead
 * (manifest.ts DIAL_POD_IP_ANNOTATION), with a proof of the secret bound to that address.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { tcpTarget } from '../agent-client.js';
import type { AgentTarget } from '../agent-client.js';
import type { KubeConnection } from './connection.js';
import { AGENT_ANNOTATION, AGENT_TOKEN_ENV, DIAL_POD_IP_ANNOTATION, MAIN_CONTAINER } from './manifest.js';
import { portForward } from './port-forward.js';
import { isPort } from '../ports.js';

export interface PodAgent {
  port: number;
  token: string;
  /** Reached at the pod's IP (DIAL_POD_IP_ANNOTATION), not through the port-forward. */
  dialPodIp?: boolean;
  /** The pod's IP, once the pod has one (only for `dialPodIp`). */
  podIp?: string;
}

/** The agent of a pod created with one, from its annotations, its container's env and its status. */
export function podAgentOf(pod: V1Pod): PodAgent | undefined {
  const port = Number(pod.metadata?.annotations?.[AGENT_ANNOTATION]);
  if (!isPort(port)) return undefined;
  const main = pod.spec?.containers.find((c) => c.name === MAIN_CONTAINER);
  const token = main?.env?.find((e) => e.name === AGENT_TOKEN_ENV)?.value;
  if (!token) return undefined;
  if (pod.metadata?.annotations?.[DIAL_POD_IP_ANNOTATION] !== 'true') return { port, token };
  const podIp = pod.status?.podIP;
  return { port, token, dialPodIp: true, ...(podIp ? { podIp } : {}) };
}

export function podAgentTarget(conn: KubeConnection, pod: string, agent: PodAgent): AgentTarget {
  if (agent.dialPodIp) {
    if (agent.podIp) return { ...tcpTarget(pod, agent.podIp, agent.port, agent.token), where: `${agent.podIp}:${agent.port} (pod ${pod})` };
    return {
      containerId: pod,
      where: `port ${agent.port} of pod ${pod}`,
      connect: () => Promise.reject(new Error(`pod ${pod} has no IP yet`)),
    };
  }
  return {
    containerId: pod,
    where: `port ${agent.port} of pod ${pod}`,
    token: agent.token,
    connect: () => portForward(conn, pod, agent.port),
  };
}
