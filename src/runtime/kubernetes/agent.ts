/**
 * The in-box agent on Kubernetes (docs/kubernetes.md, "The in-box agent"): it listens on the
 * pod's loopback, reached through the API server's port-forward, and every connection presents
 * the pod's secret, which the runtime put in the pod spec and reads back from it (so a restarted
 * runtime needs nothing stored).
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { AgentTarget } from '../agent-client.js';
import type { KubeConnection } from './connection.js';
import { AGENT_ANNOTATION, AGENT_TOKEN_ENV, MAIN_CONTAINER } from './manifest.js';
import { portForward } from './port-forward.js';
import { isPort } from '../ports.js';

export interface PodAgent {
  port: number;
  token: string;
}

/** The agent of a pod created with one, from its annotation and its container's env. */
export function podAgentOf(pod: V1Pod): PodAgent | undefined {
  const port = Number(pod.metadata?.annotations?.[AGENT_ANNOTATION]);
  if (!isPort(port)) return undefined;
  const main = pod.spec?.containers.find((c) => c.name === MAIN_CONTAINER);
  const token = main?.env?.find((e) => e.name === AGENT_TOKEN_ENV)?.value;
  return token ? { port, token } : undefined;
}

export function podAgentTarget(conn: KubeConnection, pod: string, agent: PodAgent): AgentTarget {
  return {
    containerId: pod,
    where: `port ${agent.port} of pod ${pod}`,
    token: agent.token,
    connect: () => portForward(conn, pod, agent.port),
  };
}
