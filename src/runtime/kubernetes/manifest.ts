/**
 * ContainerSpec → Pod manifest (pure). A box is one pod whose container `main` runs the box's
 * command; everything the Docker runtime keeps in container labels is kept here too, so
 * recovery reads a pod as it reads a container.
 */
import { EGRESS_ALL } from '../egress-spec.js';
import { createHash } from 'node:crypto';
import type { V1Container, V1Pod, V1SecurityContext, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import { SbxError, invalidArgument } from '../../errors.js';
import type { ContainerSpec, EgressSpec } from '../types.js';
import { AGENT_BIN, AGENT_CAPS, AGENT_PORT, AGENT_TOKEN_ENV } from '../agent-protocol.js';

/** The box's container in its pod; exec, logs and port-forward name it. */
export const MAIN_CONTAINER = 'main';
/**
 * The full label map of a box, as JSON. Kubernetes label values are at most 63 characters of
 * [A-Za-z0-9._-] (no `:` or `/`: no timestamps, no paths, no free text), sbx's are not: the
 * annotation is the database, the Kubernetes labels below are only its selectable copy.
 */
export const LABELS_ANNOTATION = 'sbx.dev/labels';
/** The name the caller gave (Docker names allow `_` and capitals, pod names do not). */
export const NAME_ANNOTATION = 'sbx.dev/name';
/** The spec's published ports, which a pod cannot publish; kept so inspect and dialPort know them. */
export const PORTS_ANNOTATION = 'sbx.dev/ports';
/** Set on a pod created with `dialAnyPort`: port-forward reaches every port, not only the listed ones. */
export const DIAL_ANY_PORT_ANNOTATION = 'sbx.dev/dial-any-port';
/** Marks a pod that runs the in-box agent as its entrypoint; the value is the port it listens on. */
export const AGENT_ANNOTATION = 'sbx.dev/agent';
/**
 * Set on a pod of a RuntimeClass (the spec's `ociRuntime`): its ports, the agent's among them, are
 * reached at the pod's IP, not through the API server's port-forward. A RuntimeClass may give the
 * pod a network stack of its own (gVisor's netstack, a Kata VM) where the port-forward, which
 * containerd dials in the pod's network namespace on the node, finds nothing listening (gVisor
 * issue 3811). So the agent listens on every address of the pod, and sbx needs a route to pod IPs
 * (it runs in the cluster, or on a node).
 */
export const DIAL_POD_IP_ANNOTATION = 'sbx.dev/dial-pod-ip';

/** Whether a box of this spec is reached at its pod's IP (DIAL_POD_IP_ANNOTATION). */
export function dialsPodIp(spec: Pick<ContainerSpec, 'ociRuntime'>): boolean {
  return !!spec.ociRuntime;
}

/** The volume holding the agent's binary (at AGENT_BIN in the box). */
const AGENT_VOLUME = 'sbx-agent';
/** Where that volume is mounted in the box (AGENT_BIN's directory). */
export const AGENT_DIR = '/.sbx';
/** The binary's path in the agent image (images/sbx-agent: FROM scratch, the binary alone). */
const AGENT_IMAGE_BIN = '/sbx-agent';
// The agent's port on the pod's loopback, where the API server's port-forward connects (it dials
// localhost inside the pod's network namespace), its secret's variable and its binary's path: the same as on Docker.
export { AGENT_BIN, AGENT_PORT, AGENT_TOKEN_ENV };

/**
 * How the binary gets into the pod (agent-delivery.ts): the agent image mounted as an image volume
 * (read-only, nothing runs first), or copied by an init container into an emptyDir (any cluster,
 * about a second more per create).
 */
export type AgentDelivery = 'image-volume' | 'init-container';

export interface AgentOptions {
  /** The image holding the static agent binary at /sbx-agent (images/sbx-agent). */
  image: string;
  /** The per-pod secret of the agent's TCP listener. */
  token: string;
  delivery: AgentDelivery;
}

/**
 * The pod's egress enforcer (docs/network.md, "Kubernetes"): a native sidecar (an init container
 * with `restartPolicy: Always`) running `sbx-egress pod` with NET_ADMIN in the pod's network
 * namespace, which the box's container never has. Its postStart hook (`sbx-egress ready --wait`)
 * returns once the rules are in place, and Kubernetes starts the later init containers and the
 * box's container only then: the box's command never runs unfiltered. (A startupProbe would do the
 * same on the kubelet's 1 s probe tick, a second more per create.)
 */
export const EGRESS_CONTAINER = 'sbx-egress';
/** The enforcer's binary in its image (images/sbx-egress: FROM scratch, the binary and nft; its ENTRYPOINT). */
export const EGRESS_BIN = '/usr/local/bin/sbx-egress';
/** The enforcer's start configuration, JSON `{ spec, dns }`, read once at its start. */
export const EGRESS_SPEC_ENV = 'SBX_EGRESS_SPEC';
/** The node's addresses (the downward API's status.hostIP), always denied unless a rule names them. */
export const EGRESS_HOST_ADDRESSES_ENV = 'SBX_EGRESS_HOST_ADDRESSES';
/** More address blocks always denied unless a rule names them: the cluster's pod and service networks (other boxes). */
export const EGRESS_ALWAYS_DENY_ENV = 'SBX_EGRESS_ALWAYS_DENY';
/** Where the enforcer keeps its unix socket (and state): an emptyDir only it mounts. */
export const EGRESS_RUN_DIR = '/run/sbx-egress';
const EGRESS_VOLUME = 'sbx-egress-run';
/**
 * What the enforcer may use, counted in the pod's requests (a native sidecar's resources add to
 * the pod's, not to the box's limits): a DNS proxy and an nft process at each change.
 */
const EGRESS_RESOURCES = { requests: { cpu: '10m', memory: '16Mi' }, limits: { cpu: '500m', memory: '64Mi' } };
/**
 * Capabilities a box with an enforcer may not add: NET_ADMIN would let its root flush or rewrite
 * the rules, NET_RAW would let it set the enforcer's own packet mark (SO_MARK) and so pass as it.
 */
const EGRESS_FORBIDDEN_CAPS = new Set(['ALL', 'NET_ADMIN', 'NET_RAW', 'SYS_ADMIN', 'BPF']);

export interface EgressOptions {
  /** The image of the enforcer (images/sbx-egress). */
  image: string;
  /** The upstream DNS servers (`address:port`) of the DNS proxy; empty: the pod's resolv.conf. */
  dns: string[];
  /** CIDRs always denied besides the built-in ones (the cluster's pod and service networks: other boxes). */
  alwaysDeny?: string[];
}

export interface ManifestOptions {
  /** The pod's name (a DNS label): the box's id on this runtime. */
  name: string;
  namespace: string;
  /** Run the in-box agent as the entrypoint (from an image volume, or copied in by an init container); absent: no agent. */
  agent?: AgentOptions;
  /** Seconds Kubernetes waits after SIGTERM before SIGKILL when the pod is deleted. */
  terminationGracePeriodSeconds?: number;
  /** Enforce `spec.egress` (absent in the spec: `all`) with the egress sidecar; absent: no sidecar (a spec with egress is refused). */
  egress?: EgressOptions;
}

const LABEL_KEY = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** Whether a label pair can be a Kubernetes label (and so a selector term) as it is. */
export function isKubeLabel(key: string, value: string): boolean {
  return LABEL_KEY.test(key) && key.length <= 317 && LABEL_VALUE.test(value);
}

/** The labels that Kubernetes accepts as they are: what selectors can find. */
export function kubeLabels(labels: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).filter(([k, v]) => isKubeLabel(k, v)));
}

/** Whether a name can be a pod's name as it is. */
export function isPodName(name: string): boolean {
  return DNS_LABEL.test(name);
}

/**
 * The PersistentVolumeClaim that holds a workspace, by the workspace directory a spec binds:
 * `sbx-ws-<directory name, DNS-safe>-<8 hex of the path>`. Workspaces are directories to the
 * layers above; on Kubernetes each is a PVC of this name, which the workspace side creates.
 */
export function workspacePvcName(hostPath: string): string {
  const base = (hostPath.split('/').filter(Boolean).pop() ?? 'root')
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40);
  const hash = createHash('sha256').update(hostPath).digest('hex').slice(0, 8);
  return `sbx-ws-${base ? `${base}-` : ''}${hash}`;
}

/** `1000` or `1000:1000` → ids; a user name cannot be resolved by Kubernetes (no passwd lookup). */
export function numericUser(user: string | undefined): { uid?: number; gid?: number } {
  if (user === undefined || user === '') return {};
  const m = /^(\d+)(?::(\d+))?$/.exec(user);
  if (!m) throw invalidArgument('user', `must be a numeric uid or uid:gid on Kubernetes (the pod's securityContext takes ids), got '${user}'`);
  return { uid: Number(m[1]), ...(m[2] !== undefined ? { gid: Number(m[2]) } : {}) };
}

/** `rw,nosuid,size=64m` → `64Mi`; undefined when no size is given. */
export function tmpfsSize(options: string): string | undefined {
  const size = options
    .split(',')
    .map((o) => o.trim())
    .find((o) => o.startsWith('size='))
    ?.slice(5);
  if (!size) return undefined;
  const m = /^(\d+)([kmg]?)$/i.exec(size);
  if (!m) throw invalidArgument('security.tmpfs', `size '${size}' is not a number of bytes with an optional k, m or g`);
  const unit = { '': '', k: 'Ki', m: 'Mi', g: 'Gi' }[m[2]!.toLowerCase() as '' | 'k' | 'm' | 'g'];
  return `${m[1]}${unit}`;
}

/** CPU cores as millicores (`1.5` → `1500m`); Kubernetes' finest unit. */
/** The share of a box's CPU limit it requests (the scheduler's reservation). */
const CPU_REQUEST_SHARE = 0.1;

export function cpuQuantity(cores: number): string {
  return `${Math.max(1, Math.round(cores * 1000))}m`;
}

/**
 * The pod for a validated spec.
 *
 * Choices that differ from Docker, each for a reason:
 * - capabilities: all dropped, then the spec's `capAdd` (Docker's defaults are not implied);
 * - memory is requested at its limit (memory cannot be taken back from a box), CPU at a tenth
 *   of it (Burstable): boxes idle between execs, and requests equal to limits would fit two
 *   one-core boxes on a two-core node;
 * - `pidsLimit` has no pod field (it is the kubelet's `podPidsLimit`) and is not applied;
 * - `network` other than the pod network cannot be chosen per pod and is rejected;
 * - ports cannot be published on a host: they become containerPorts, reached by port-forward.
 */
export function podManifest(spec: ContainerSpec, opts: ManifestOptions): V1Pod {
  if (!isPodName(opts.name)) throw invalidArgument('name', `'${opts.name}' is not a valid pod name (a DNS label)`);
  if (spec.network !== undefined && spec.network !== 'bridge' && spec.network !== 'default') {
    throw invalidArgument('network', `'${spec.network}' cannot be chosen per pod on Kubernetes: boxes use the pod network (a NetworkPolicy restricts it)`);
  }
  if (opts.agent && spec.env?.[AGENT_TOKEN_ENV] !== undefined) throw invalidArgument('env', `${AGENT_TOKEN_ENV} is the in-box agent's own variable`);
  if (opts.agent && spec.ports?.some((p) => p.containerPort === AGENT_PORT)) {
    throw invalidArgument('ports', `port ${AGENT_PORT} is the in-box agent's on Kubernetes; choose another`);
  }
  if (spec.egress && !opts.egress)
    throw new SbxError('not_available', 'egress rules need the egress sidecar on Kubernetes, which this runtime does not add', {
      details: { field: 'egress', reason: 'egress_unsupported' },
    });
  const forbidden = opts.egress ? spec.security?.capAdd?.find((c) => EGRESS_FORBIDDEN_CAPS.has(c)) : undefined;
  if (forbidden) throw invalidArgument('security.capAdd', `${forbidden} would let the box undo its egress rules; a box under egress rules cannot have it`);
  // With the agent the user may be a name: the agent resolves it in the box's /etc/passwd.
  const user = opts.agent ? numericUserOrName(spec.user) : numericUser(spec.user);
  const labels = spec.labels ?? {};
  const volumes: V1Volume[] = [];
  const mounts: V1VolumeMount[] = [];

  for (const [i, b] of (spec.binds ?? []).entries()) {
    volumes.push({ name: `ws-${i}`, persistentVolumeClaim: { claimName: workspacePvcName(b.hostPath), readOnly: b.readOnly ?? false } });
    mounts.push({ name: `ws-${i}`, mountPath: b.containerPath, readOnly: b.readOnly ?? false });
  }
  for (const [i, [path, options]] of Object.entries(spec.security?.tmpfs ?? {}).entries()) {
    const sizeLimit = tmpfsSize(options);
    volumes.push({ name: `tmpfs-${i}`, emptyDir: { medium: 'Memory', ...(sizeLimit ? { sizeLimit } : {}) } });
    mounts.push({ name: `tmpfs-${i}`, mountPath: path });
  }
  if (spec.shmSize) {
    volumes.push({ name: 'dshm', emptyDir: { medium: 'Memory', sizeLimit: String(spec.shmSize) } });
    mounts.push({ name: 'dshm', mountPath: '/dev/shm' });
  }

  const security = opts.agent ? agentSecurity(spec) : containerSecurity(spec, user);
  const env = Object.entries(spec.env ?? {}).map(([name, value]) => ({ name, value }));
  if (opts.agent) env.push({ name: AGENT_TOKEN_ENV, value: opts.agent.token });
  const main: V1Container = {
    name: MAIN_CONTAINER,
    image: spec.image,
    // No registry is assumed: an image already on the node is used, a missing one is pulled.
    imagePullPolicy: 'IfNotPresent',
    ...command(spec, opts.agent),
    ...(env.length ? { env } : {}),
    ...(spec.workDir ? { workingDir: spec.workDir } : {}),
    ...(spec.ports?.length ? { ports: spec.ports.map((p) => ({ containerPort: p.containerPort, protocol: p.protocol === 'udp' ? 'UDP' : 'TCP' })) } : {}),
    ...resources(spec),
    securityContext: security,
    // The log's tail becomes the termination message of a failed command: start reports the agent's reason.
    ...(opts.agent ? { terminationMessagePolicy: 'FallbackToLogsOnError' } : {}),
    stdin: false,
    tty: false,
  };

  const initContainers: V1Container[] = [];
  // First: every later init container and the box's container start only once its rules are in place.
  if (opts.egress) {
    volumes.push({ name: EGRESS_VOLUME, emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } });
    initContainers.push(egressSidecar(spec.egress ?? EGRESS_ALL, opts.egress));
  }
  if (opts.agent) {
    // Read-only either way: the box cannot replace the binary its exec goes through.
    mounts.push({ name: AGENT_VOLUME, mountPath: AGENT_DIR, readOnly: true });
    if (opts.agent.delivery === 'image-volume') {
      // The image's root (the binary at /sbx-agent) at AGENT_DIR; the kubelet mounts it read-only.
      volumes.push({ name: AGENT_VOLUME, image: { reference: opts.agent.image, pullPolicy: 'IfNotPresent' } });
    } else {
      volumes.push({ name: AGENT_VOLUME, emptyDir: {} });
      initContainers.push(agentInstaller(opts.agent.image));
    }
  }
  if (mounts.length) main.volumeMounts = mounts;

  const annotations: Record<string, string> = { [LABELS_ANNOTATION]: JSON.stringify(labels) };
  if (spec.name !== undefined) annotations[NAME_ANNOTATION] = spec.name;
  if (spec.ports?.length) annotations[PORTS_ANNOTATION] = JSON.stringify(spec.ports);
  if (spec.dialAnyPort) annotations[DIAL_ANY_PORT_ANNOTATION] = 'true';
  if (opts.agent) annotations[AGENT_ANNOTATION] = String(AGENT_PORT);
  if (dialsPodIp(spec)) annotations[DIAL_POD_IP_ANNOTATION] = 'true';

  const runtimeClassName = spec.ociRuntime;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: opts.name, namespace: opts.namespace, labels: kubeLabels(labels), annotations },
    spec: {
      containers: [main],
      ...(initContainers.length ? { initContainers } : {}),
      ...(volumes.length ? { volumes } : {}),
      // A box is a process, not a service: it is never restarted (unless-stopped has no pod equivalent).
      restartPolicy: 'Never',
      // Boxes run untrusted code: no credentials of the cluster in them.
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      ...(opts.terminationGracePeriodSeconds !== undefined ? { terminationGracePeriodSeconds: opts.terminationGracePeriodSeconds } : {}),
      ...(runtimeClassName ? { runtimeClassName } : {}),
      // The kubelet makes volumes group-writable for fsGroup: the box's user can write its workspace.
      securityContext: {
        seccompProfile: { type: 'RuntimeDefault' },
        ...(spec.binds?.length && (user.gid ?? user.uid) !== undefined ? { fsGroup: user.gid ?? user.uid } : {}),
      },
    },
  };
}

/** The init container that copies the agent binary into the pod's emptyDir (the `init-container` delivery). */
function agentInstaller(image: string): V1Container {
  return {
    name: 'sbx-agent-install',
    image,
    imagePullPolicy: 'IfNotPresent',
    // The binary copies itself: the image is FROM scratch, there is no cp.
    command: [AGENT_IMAGE_BIN, 'install', AGENT_BIN],
    volumeMounts: [{ name: AGENT_VOLUME, mountPath: AGENT_DIR }],
    securityContext: {
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
      readOnlyRootFilesystem: true,
    },
  };
}

/**
 * The egress sidecar: `sbx-egress pod` with the box's rules and upstream DNS in its environment,
 * NET_ADMIN only (as root: nft needs the capability in effect), gated by `sbx-egress ready --wait` (postStart).
 */
export function egressSidecar(egress: EgressSpec, opts: EgressOptions): V1Container {
  return {
    name: EGRESS_CONTAINER,
    image: opts.image,
    imagePullPolicy: 'IfNotPresent',
    // A native sidecar: it runs beside the box's container, is restarted if it ends, and stops after it.
    restartPolicy: 'Always',
    command: [EGRESS_BIN, 'pod'],
    env: [
      { name: EGRESS_SPEC_ENV, value: JSON.stringify({ spec: egress, dns: opts.dns }) },
      { name: EGRESS_HOST_ADDRESSES_ENV, valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } } },
      ...(opts.alwaysDeny?.length ? [{ name: EGRESS_ALWAYS_DENY_ENV, value: opts.alwaysDeny.join(',') }] : []),
    ],
    // The hook waits (a minute at most, then fails: the kubelet restarts the sidecar, the box still waits).
    lifecycle: { postStart: { exec: { command: [EGRESS_BIN, 'ready', '--wait'] } } },
    resources: EGRESS_RESOURCES,
    volumeMounts: [{ name: EGRESS_VOLUME, mountPath: EGRESS_RUN_DIR }],
    // Why it cannot start (nft refused, a bad spec) becomes the termination message start reports.
    terminationMessagePolicy: 'FallbackToLogsOnError',
    securityContext: {
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'], add: ['NET_ADMIN'] },
      seccompProfile: { type: 'RuntimeDefault' },
      readOnlyRootFilesystem: true,
      runAsUser: 0,
      runAsGroup: 0,
      runAsNonRoot: false,
    },
  };
}

/** The container's entrypoint and args: the agent in front of the box's command when it has one. */
function command(spec: ContainerSpec, agent: AgentOptions | undefined): Pick<V1Container, 'command' | 'args'> {
  if (!agent) {
    // Kubernetes' command/args are Docker's entrypoint/cmd: each left out keeps the image's.
    return { ...(spec.entrypoint ? { command: spec.entrypoint } : {}), ...(spec.cmd ? { args: spec.cmd } : {}) };
  }
  // The agent's child is the box command; without an entrypoint or cmd in the spec the image's
  // cannot be read here (no image inspect on Kubernetes), so the spec must give the command.
  const child = [...(spec.entrypoint ?? []), ...(spec.cmd ?? [])];
  if (child.length === 0)
    throw invalidArgument('cmd', 'a box with the in-box agent on Kubernetes needs its command in the spec (the image config is not read)');
  // No unix socket (nothing outside the pod could reach it): the TCP listener on loopback only,
  // where the port-forward connects, or on every address of a pod reached at its IP.
  // --home unless the spec sets HOME: containerd sets the root's, each process gets its user's.
  return {
    command: [
      AGENT_BIN,
      'init',
      '--socket',
      '',
      '--listen',
      `${dialsPodIp(spec) ? '0.0.0.0' : '127.0.0.1'}:${AGENT_PORT}`,
      ...(spec.user ? ['--user', spec.user] : []),
      ...(spec.env?.['HOME'] === undefined ? ['--home'] : []),
      '--',
      ...child,
    ],
  };
}

function resources(spec: ContainerSpec): Pick<V1Container, 'resources'> {
  const limits: Record<string, string> = {};
  if (spec.memory) limits['memory'] = String(spec.memory);
  if (spec.cpus) limits['cpu'] = cpuQuantity(spec.cpus);
  if (!Object.keys(limits).length) return {};
  const requests: Record<string, string> = { ...limits };
  if (spec.cpus) requests['cpu'] = cpuQuantity(spec.cpus * CPU_REQUEST_SHARE);
  return { resources: { limits, requests } };
}

/**
 * With the agent: the container runs as root when the spec names a user (the agent switches to it
 * for the command and each exec, as on Docker), else as the image's user; KILL, SETUID and SETGID
 * are kept for the agent (a process of a non-root user loses them at its setuid).
 */
function agentSecurity(spec: ContainerSpec): V1SecurityContext {
  const add = [...new Set([...(spec.security?.capAdd ?? []), ...AGENT_CAPS])];
  return {
    ...containerSecurity({ ...spec, security: { ...spec.security, capAdd: add } }, {}),
    ...(spec.user ? { runAsUser: 0, runAsGroup: 0 } : {}),
  };
}

/** A numeric user as ids; a name as no ids (only the agent can resolve it). */
function numericUserOrName(user: string | undefined): { uid?: number; gid?: number } {
  return user && /^\d+(:\d+)?$/.test(user) ? numericUser(user) : {};
}

function containerSecurity(spec: ContainerSpec, user: { uid?: number; gid?: number }): V1SecurityContext {
  const sec = spec.security ?? {};
  // Everything dropped, then only what the spec adds: Docker's default set is not implied.
  const add = sec.capAdd ?? [];
  return {
    allowPrivilegeEscalation: false,
    capabilities: { drop: ['ALL'], ...(add.length ? { add } : {}) },
    seccompProfile: { type: 'RuntimeDefault' },
    readOnlyRootFilesystem: sec.readOnlyRootfs ?? false,
    ...(user.uid !== undefined ? { runAsUser: user.uid } : {}),
    ...(user.gid !== undefined ? { runAsGroup: user.gid } : {}),
  };
}
