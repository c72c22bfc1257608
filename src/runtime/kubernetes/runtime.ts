import { randomBytes } from 'node:crypto';
import { EGRESS_ALL } from '../egress-spec.js';
import { createConnection } from 'node:net';
import type { Duplex, Readable } from 'node:stream';
import type { V1Pod } from '@kubernetes/client-node';
import { SbxError, isSbxError } from '../../errors.js';
import { logSinceNanos, validateEgressSpec, validateExec, validateExecStream, validateLogs, validateSpec } from '../spec.js';
import { answerTimeoutOf } from '../answer-deadline.js';
import { logChunks } from '../log-chunks.js';
import type { LogPiece } from '../log-chunks.js';
import type {
  ContainerEvent,
  ContainerInfo,
  ContainerListOptions,
  ContainerSpec,
  ContainerStats,
  ContainerSummary,
  EgressSpec,
  EgressTarget,
  ExecOptions,
  AgentDeliveryChoice,
  ExecResult,
  ExecStream,
  ExecStreamOptions,
  HostEndpoint,
  LogChunk,
  LogOptions,
  PortSpec,
  ProcessInfo,
  Runtime,
  RuntimeCapabilities,
  RuntimeOptions,
  RuntimeResources,
  RuntimeVersion,
  WorkspaceHelper,
  WorkspaceHelperOptions,
} from '../types.js';
import { AgentUnreachable, agentExec, agentExecStream, configureAgent, probeAgent } from '../agent-client.js';
import { parseKubeAddress } from './address.js';
import { agentDeliveryChoice, probeAgentDelivery } from './agent-delivery.js';
import type { DeliveryVerdict } from './agent-delivery.js';
import { podAgentOf, podAgentTarget } from './agent.js';
import type { PodAgent } from './agent.js';
import { deletePvc, ensurePvc } from './pvcs.js';
import type { PvcOptions } from './pvcs.js';
import type { KubeAddress } from './address.js';
import { KubeConnection } from './connection.js';
import { toSbxError } from './errors.js';
import { kubeExec, kubeExecStream } from './exec.js';
import { KubeImages } from './images.js';
import { egressDenyNetworks, egressDnsServers, getPodEgress, putPodEgress } from './egress.js';
import {
  AGENT_BIN,
  AGENT_PORT,
  DIAL_ANY_PORT_ANNOTATION,
  DIAL_POD_IP_ANNOTATION,
  EGRESS_CONTAINER,
  MAIN_CONTAINER,
  PORTS_ANNOTATION,
  isKubeLabel,
  isPodName,
  dialsPodIp,
  podManifest,
} from './manifest.js';
import { infoOf, isRunning, labelsOf, statusOf, summaryOf } from './pod-state.js';
import { portForward } from './port-forward.js';
import { untilReady } from './ready.js';
import { StartGate } from './start-gate.js';
import { HELPER_ROOT, HELPER_TOOL, createHelperPod } from './workspace-helper.js';
import { checkPort } from '../ports.js';
import { deferredRuntime } from '../deferred-runtime.js';

/**
 * The options a Kubernetes runtime reads: `agent` with `agentImage` (the in-box agent) and
 * `agentDelivery` (how its binary gets into a pod, agent-delivery.ts; default `auto`: a probe
 * pod at the first agent box), `readyTimeoutMs`, `storageClass` (workspace PVCs), `maxConnections`
 * (execs starting at once), `egressImage`, `egressDns` and `egressDenyNetworks` (egress rules, egress.ts).
 * A box's RuntimeClass is its spec's `ociRuntime` (the pool's `ociRuntime`).
 */
export type KubernetesRuntimeOptions = RuntimeOptions;

/** The egress sidecar's image unless `egressImage` names another. */
export const DEFAULT_EGRESS_IMAGE = 'sbx-egress:latest';

const DEFAULT_READY_TIMEOUT_MS = 120_000;
/** Execs starting at once (start-gate.ts), unless `maxConnections` says otherwise. */
const DEFAULT_STARTING_EXECS = 8;
/** How long `remove` waits for the pod to be gone. */
const REMOVE_WAIT_MS = 60_000;
/** How long the end of a followed log waits for the pod's status to say its container ended. */
const LOG_SETTLE_MS = 5_000;
/** After the pod is ready, how long the agent may take to answer (it listens within milliseconds of its start). */
const AGENT_LISTEN_WAIT_MS = 10_000;
/** An exec retries an agent that does not answer for this long (a port-forward refused while the pod settles). */
const AGENT_RETRY_MS = 2_000;

/**
 * The Runtime for a Kubernetes namespace: a box is one pod (docs/kubernetes.md, "Runtime").
 *
 * @example
 * const rt = new KubernetesRuntime('k8s://?kubeconfig=/etc/sbx/kubeconfig&namespace=sbx');
 * const id = await rt.create({ image: 'sbx-base:latest', cmd: ['sleep', 'infinity'] });
 * await rt.start(id); // the pod is ready
 * const { stdout } = await rt.exec(id, ['echo', 'hi']);
 */
export class KubernetesRuntime implements Runtime {
  readonly address: string;
  readonly images: KubeImages;
  readonly capabilities: RuntimeCapabilities;
  /** New boxes get the in-box agent: asked for (`agent`, default true) and an `agentImage` given. */
  readonly agentEnabled: boolean;
  private readonly parsed: KubeAddress;
  private connection: KubeConnection | undefined;
  private connecting: Promise<void> | undefined;
  private readonly options: KubernetesRuntimeOptions;
  private readonly answerTimeoutMs: number;
  /**
   * Pods this runtime created and has not started: a pod runs by itself once created, but to the
   * caller such a box is still `created`, which `remove` takes without force (as on Docker).
   */
  private readonly unstarted = new Set<string>();
  private readonly gate: StartGate;
  /** Each pod's container user (immutable), for the exec user check. */
  private readonly users = new Map<string, string | undefined>();
  /** Each pod's agent (null: none), learned at create or from one read of the pod. */
  private readonly agents = new Map<string, PodAgent | null>();
  /** Whether each pod has the egress sidecar, learned at create or from one read of the pod. */
  private readonly sidecars = new Map<string, boolean>();
  /** The sidecar's image for new pods; undefined: none (`egressImage: ''`). */
  private readonly egressImage: string | undefined;
  /** The upstream DNS servers handed to every sidecar (egress.ts). */
  private readonly egressDns: string[];
  private readonly egressDenyNetworks: string[];
  /** sbx's endpoints on the node (`allowHostEndpoints`), open to pods whose spec has no egress rules. */
  private hostEndpoints: EgressTarget[] = [];
  private readonly deliveryChoice: AgentDeliveryChoice;
  /** How new pods get the agent's binary: decided once (the option, else the probe pod). */
  private delivery: Promise<DeliveryVerdict> | undefined;

  constructor(addr: string | KubeAddress, options: KubernetesRuntimeOptions = {}) {
    this.parsed = typeof addr === 'string' ? parseKubeAddress(addr) : addr;
    this.address = this.parsed.raw;
    this.options = options;
    this.answerTimeoutMs = answerTimeoutOf(options);
    this.agentEnabled = (options.agent ?? true) && !!options.agentImage;
    this.deliveryChoice = agentDeliveryChoice(options.agentDelivery);
    this.egressImage = (options.egressImage ?? DEFAULT_EGRESS_IMAGE) || undefined;
    this.egressDns = egressDnsServers(options.egressDns);
    this.egressDenyNetworks = egressDenyNetworks(options.egressDenyNetworks);
    // Only the agent can switch users in a pod (Kubernetes' exec has no user).
    this.capabilities = {
      hostMounts: false,
      stopStart: false,
      publishedPorts: false,
      pidsLimit: false,
      execUser: this.agentEnabled,
      logStreams: false,
      pause: false,
      commit: false,
      cpuStats: false,
      egress: this.egressImage !== undefined,
    };
    this.gate = new StartGate(options.maxConnections ?? DEFAULT_STARTING_EXECS);
    this.images = new KubeImages(() => this.conn);
    // What callers get waits for the connection before each call.
    return deferredRuntime(
      this,
      () => this.connect(),
      () => this.connection !== undefined,
    );
  }

  /** The connection `connect()` made: every call waits for it (the constructor's deferredRuntime). */
  private get conn(): KubeConnection {
    if (!this.connection) throw new SbxError('internal', `the Kubernetes connection of ${this.address} is used before it is made`);
    return this.connection;
  }

  /**
   * Loads the client library and the kubeconfig at first use, so opening never fails on a
   * kubeconfig that is not there yet and costs nothing until used. One attempt at a time; a
   * failed one is tried again by the next call.
   */
  private connect(): Promise<void> {
    this.connecting ??= KubeConnection.open(this.parsed, { answerTimeoutMs: this.answerTimeoutMs }).then(
      (c) => {
        this.connection = c;
      },
      (err: unknown) => {
        this.connecting = undefined;
        throw err;
      },
    );
    return this.connecting;
  }

  private fail(err: unknown, what: string): never {
    throw toSbxError(err, this.address, what);
  }

  private async readPod(id: string): Promise<V1Pod> {
    try {
      return await this.conn.core.readNamespacedPod({ name: id, namespace: this.conn.namespace });
    } catch (err) {
      this.fail(err, `pod ${id}`);
    }
  }

  async ping(): Promise<void> {
    await this.version();
  }

  async version(): Promise<RuntimeVersion> {
    try {
      const v = await this.conn.versionApi.getCode();
      const [os, arch] = (v.platform ?? '/').split('/');
      return { engine: 'kubernetes', version: v.gitVersion, apiVersion: 'v1', os: os ?? '', arch: arch ?? '' };
    } catch (err) {
      this.fail(err, 'version');
    }
  }

  /**
   * How this runtime's boxes get the agent's binary, and why (undefined: they get no agent): the `agentDelivery` option, else
   * (`auto`) a probe pod at the first call, once; a cluster that cannot mount the agent image as a
   * volume gets the init container, with a warning (SBX_KUBE_AGENT_DELIVERY) saying why.
   */
  agentDelivery(): Promise<DeliveryVerdict | undefined> {
    // Without the agent there is nothing to deliver (and no image to probe with).
    if (!this.agentEnabled) return Promise.resolve(undefined);
    if (this.delivery) return this.delivery;
    const decided = (async (): Promise<DeliveryVerdict> => {
      if (this.deliveryChoice !== 'auto') return { delivery: this.deliveryChoice, why: 'the agentDelivery option' };
      const verdict = await probeAgentDelivery(this.conn, this.options.agentImage!);
      if (verdict.delivery === 'init-container') {
        process.emitWarning(`${this.address}: the in-box agent is copied in by an init container (about a second more per create): ${verdict.why}`, {
          code: 'SBX_KUBE_AGENT_DELIVERY',
        });
      }
      return verdict;
    })();
    // A probe that could not reach the cluster decides nothing: the next create asks again.
    decided.catch(() => {
      if (this.delivery === decided) this.delivery = undefined;
    });
    this.delivery = decided;
    return decided;
  }

  async create(spec: ContainerSpec): Promise<string> {
    const valid = validateSpec(spec);
    // The name is the id: the caller's when it is a valid pod name, else a fresh one.
    const name = valid.name && isPodName(valid.name) ? valid.name : `sbx-${randomBytes(6).toString('hex')}`;
    const stopMs = Number(valid.labels?.['sbx.stop-timeout-ms']);
    const agent = this.agentEnabled ? { port: AGENT_PORT, token: randomBytes(32).toString('hex') } : undefined;
    const delivery = agent ? (await this.agentDelivery())?.delivery : undefined;
    // A spec without rules is `all`, which still closes the node's address: sbx's endpoints there stay open.
    if (this.egressImage && !valid.egress) valid.egress = { ...EGRESS_ALL, endpoints: this.hostEndpoints };
    const pod = podManifest(valid, {
      name,
      namespace: this.conn.namespace,
      ...(agent && delivery ? { agent: { image: this.options.agentImage!, token: agent.token, delivery } } : {}),
      ...(this.egressImage ? { egress: { image: this.egressImage, dns: this.egressDns, alwaysDeny: this.egressDenyNetworks } } : {}),
      ...(Number.isFinite(stopMs) && stopMs > 0 ? { terminationGracePeriodSeconds: Math.ceil(stopMs / 1000) } : {}),
    });
    try {
      await this.conn.core.createNamespacedPod({ namespace: this.conn.namespace, body: pod });
    } catch (err) {
      this.fail(err, `create pod from image ${valid.image}`);
    }
    if (this.unstarted.size > 10_000) this.unstarted.clear();
    this.unstarted.add(name);
    this.rememberAgent(name, agent ? { ...agent, ...(dialsPodIp(valid) ? { dialPodIp: true } : {}) } : null);
    this.rememberSidecar(name, !!this.egressImage);
    return name;
  }

  /** Waits until the pod is ready (a pod starts by itself once created). */
  async start(id: string): Promise<void> {
    const pod = await untilReady(this.conn, id, this.options.readyTimeoutMs ?? DEFAULT_READY_TIMEOUT_MS);
    this.unstarted.delete(id);
    const agent = await this.agentOf(id, pod);
    if (agent) await this.untilAgentListens(id, agent);
  }

  /**
   * After the pod is ready, waits until its agent answers, so the first exec finds it, and a box
   * command the agent cannot start fails `start` with the agent's reason (exit 126/127; the
   * container's log tail is its termination message), as on Docker.
   */
  private async untilAgentListens(id: string, agent: PodAgent): Promise<void> {
    const deadline = Date.now() + AGENT_LISTEN_WAIT_MS;
    let why = '';
    for (let delay = 10; Date.now() < deadline; delay = Math.min(delay * 2, 200)) {
      const probe = await probeAgent(podAgentTarget(this.conn, id, agent), 2000);
      if (probe.ok) return;
      why = probe.why;
      const pod = await this.readPod(id);
      const ended = pod.status?.containerStatuses?.find((c) => c.name === MAIN_CONTAINER)?.state?.terminated;
      if (ended) {
        // A command that ran and ended is not a failure to start; only the agent's own refusal is.
        const message = ended.message ?? '';
        if (!message.includes('sbx-agent: cannot start')) return;
        throw new SbxError('invalid_argument', `cmd: the box's command could not start in pod ${id}: ${message.trim()}`, {
          details: { field: 'cmd', exitCode: ended.exitCode, agent: message.trim() },
        });
      }
      await new Promise((r) => setTimeout(r, delay));
    }
    throw new SbxError('runtime_unavailable', `the agent of pod ${id} did not answer within ${AGENT_LISTEN_WAIT_MS} ms: ${why}`, { details: { id } });
  }

  private rememberAgent(id: string, agent: PodAgent | null): void {
    if (this.agents.size > 10_000) this.agents.clear();
    this.agents.set(id, agent);
  }

  /**
   * The pod's agent: known since its create, else read from the pod once (`pod`: a read just
   * made). One reached at the pod's IP is read again until the pod has one.
   */
  private async agentOf(id: string, pod?: V1Pod): Promise<PodAgent | undefined> {
    let agent = this.agents.get(id);
    if (agent === undefined || (agent?.dialPodIp && !agent.podIp)) {
      agent = podAgentOf(pod ?? (await this.readPod(id))) ?? null;
      this.rememberAgent(id, agent);
    }
    return agent ?? undefined;
  }

  /**
   * Runs `run` on the pod's agent when it has one, else on the API server's exec. No fallback
   * from the agent to the API exec: that would run as the container's user (root when the agent
   * switches users), so an agent that does not answer is an error.
   */
  private async viaAgent<T>(id: string, run: (t: ReturnType<typeof podAgentTarget>) => Promise<T>, api: () => Promise<T>): Promise<T> {
    // A pod with an agent always uses it, whatever this runtime's `agent` says: it runs as root.
    const agent = await this.agentOf(id);
    if (!agent) return api();
    const target = podAgentTarget(this.conn, id, agent);
    const deadline = Date.now() + AGENT_RETRY_MS;
    for (;;) {
      try {
        return await run(target);
      } catch (err) {
        if (!(err instanceof AgentUnreachable)) throw err;
        if (err.reason === 'version' || Date.now() > deadline) {
          throw new SbxError('runtime_unavailable', `exec in pod ${id}: ${err.message}`, { cause: err, details: { id } });
        }
        const pod = await this.readPod(id);
        if (!isRunning(pod)) throw new SbxError('conflict', `pod ${id} is not running`, { details: { id, status: statusOf(pod) } });
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }

  /** Deletes the pod (after SIGTERM and the grace period): a pod cannot be stopped and started again. */
  async stop(id: string, opts: { timeoutMs?: number } = {}): Promise<void> {
    await this.delete(id, Math.max(0, Math.ceil((opts.timeoutMs ?? 2000) / 1000)));
  }

  /** A pod has no freezer the API reaches (`capabilities.pause` false). */
  pause(id: string): Promise<void> {
    return Promise.reject(
      new SbxError('not_available', `pod ${id}: Kubernetes has no pause (no freezer through the API)`, { details: { id, reason: 'pause_unsupported' } }),
    );
  }

  unpause(id: string): Promise<void> {
    return this.pause(id);
  }

  /** A pod's filesystem cannot be saved as an image through the API (`capabilities.commit` false). */
  commit(id: string): Promise<void> {
    return Promise.reject(
      new SbxError('not_available', `pod ${id}: Kubernetes cannot save a pod's filesystem as an image`, { details: { id, reason: 'commit_unsupported' } }),
    );
  }

  async remove(id: string, opts: { force?: boolean } = {}): Promise<void> {
    // Without force a running pod is refused; with it there is nothing to read first (a missing pod is the delete's not_found).
    if (!opts.force && !this.unstarted.has(id) && isRunning(await this.readPod(id)))
      throw new SbxError('conflict', `pod ${id} is running; remove it with force`, { details: { id } });
    await this.delete(id, 0);
  }

  /** Deletes a pod and returns once it is gone (its name free again). */
  private async delete(id: string, graceSeconds: number): Promise<void> {
    try {
      await this.conn.core.deleteNamespacedPod({ name: id, namespace: this.conn.namespace, gracePeriodSeconds: graceSeconds });
    } catch (err) {
      this.fail(err, `delete pod ${id}`);
    }
    this.users.delete(id);
    this.agents.delete(id);
    this.sidecars.delete(id);
    this.unstarted.delete(id);
    await this.untilGone(id);
  }

  private async untilGone(id: string): Promise<void> {
    const deadline = Date.now() + REMOVE_WAIT_MS;
    for (let delay = 20; Date.now() < deadline; delay = Math.min(delay * 2, 500)) {
      try {
        await this.conn.core.readNamespacedPod({ name: id, namespace: this.conn.namespace });
      } catch (err) {
        if (toSbxError(err, this.address, `pod ${id}`).code === 'not_found') return;
        this.fail(err, `pod ${id}`);
      }
      await new Promise((r) => setTimeout(r, delay));
    }
    throw new SbxError('timeout', `pod ${id} was still there ${REMOVE_WAIT_MS} ms after its delete`, { details: { id } });
  }

  async inspect(id: string): Promise<ContainerInfo> {
    const pod = await this.readPod(id);
    return { ...infoOf(pod), execPath: podAgentOf(pod) ? 'agent' : 'engine' };
  }

  async list(opts: ContainerListOptions = {}): Promise<ContainerSummary[]> {
    const want = Object.entries(opts.labels ?? {});
    // Pairs Kubernetes can hold are selected by the API server; the rest are checked here.
    const selector = want
      .filter(([k, v]) => isKubeLabel(k, v === '' ? 'x' : v))
      .map(([k, v]) => (v === '' ? k : `${k}=${v}`))
      .join(',');
    let pods: V1Pod[];
    try {
      pods = (await this.conn.core.listNamespacedPod({ namespace: this.conn.namespace, ...(selector ? { labelSelector: selector } : {}) })).items;
    } catch (err) {
      this.fail(err, 'list pods');
    }
    return pods
      .filter((p) => {
        const labels = labelsOf(p);
        return want.every(([k, v]) => (v === '' ? k in labels : labels[k] === v)) && ((opts.all ?? true) ? true : isRunning(p));
      })
      .map(summaryOf);
  }

  /** `ps` in the box (Kubernetes has no top): the image needs a `ps` that knows `-o`. */
  async processes(id: string): Promise<ProcessInfo[]> {
    const r = await this.exec(id, ['ps', '-o', 'pid,user,args']);
    if (r.exitCode !== 0) throw new SbxError('not_available', `ps failed in pod ${id} (exit ${r.exitCode}): ${r.stderr.trim()}`, { details: { id } });
    return r.stdout
      .split('\n')
      .slice(1)
      .map((l) => /^\s*(\d+)\s+(\S+)\s+(.*)$/.exec(l))
      .filter((m): m is RegExpExecArray => !!m)
      .filter((m) => !m[3]!.startsWith('ps -o pid,user,args'))
      .map((m) => ({ pid: m[1]!, user: m[2]!, command: m[3]! }));
  }

  async *events(opts: { labels?: Record<string, string>; signal: AbortSignal }): AsyncGenerator<ContainerEvent> {
    if (opts.signal.aborted) return;
    const selector = Object.entries(opts.labels ?? {})
      .filter(([k, v]) => isKubeLabel(k, v === '' ? 'x' : v))
      .map(([k, v]) => (v === '' ? k : `${k}=${v}`))
      .join(',');
    const queue: Array<ContainerEvent | Error | 'end'> = [];
    let wake: (() => void) | undefined;
    const put = (e: ContainerEvent | Error | 'end') => {
      queue.push(e);
      wake?.();
    };
    const known = new Map<string, 'created' | 'started' | 'stopped'>();
    let controller: AbortController | undefined;
    try {
      controller = await this.conn.watcher.watch(
        `/api/v1/namespaces/${this.conn.namespace}/pods`,
        selector ? { labelSelector: selector } : {},
        (type: string, pod: V1Pod) => {
          const id = pod.metadata?.name ?? '';
          const labels = labelsOf(pod);
          const at = new Date().toISOString();
          if (type === 'DELETED') {
            known.delete(id);
            return put({ id, action: 'removed', labels, at });
          }
          const status = statusOf(pod);
          const action = status === 'running' ? 'started' : status === 'exited' ? 'stopped' : status === 'created' ? 'created' : undefined;
          if (!action || known.get(id) === action) return;
          // A watch starts with every existing pod as ADDED: those are not news.
          const isNew = type !== 'ADDED' || action === 'created';
          known.set(id, action);
          if (isNew) put({ id, action, labels, at });
        },
        (err: unknown) => put(opts.signal.aborted ? 'end' : err ? toSbxError(err, this.address, 'watch pods') : 'end'),
      );
    } catch (err) {
      if (opts.signal.aborted) return;
      this.fail(err, 'watch pods');
    }
    const abort = () => {
      controller?.abort();
      put('end');
    };
    opts.signal.addEventListener('abort', abort, { once: true });
    try {
      for (;;) {
        const next = queue.shift();
        if (next === undefined) {
          await new Promise<void>((r) => (wake = r));
          continue;
        }
        if (next === 'end') break;
        if (next instanceof Error) throw next;
        yield next;
      }
    } finally {
      opts.signal.removeEventListener('abort', abort);
      controller?.abort();
    }
    if (!opts.signal.aborted) throw new SbxError('runtime_unavailable', `the pod watch of ${this.address} ended`);
  }

  /**
   * The pod log of the box's container (stdout and stderr as one: the API has no way to tell
   * them apart, so every chunk says stdout; `capabilities.logStreams` is false). A pod whose
   * container has not started yet has no log: not_available.
   */
  async logs(id: string, opts?: LogOptions): Promise<AsyncIterable<LogChunk>> {
    const valid = validateLogs(opts);
    if (!isPodName(id)) throw new SbxError('not_found', `pod ${id} not found on ${this.address}`, { details: { id } });
    const since = logSinceNanos(valid);
    if (valid.signal?.aborted) return logChunks([], since);
    const q = new URLSearchParams({ container: MAIN_CONTAINER, timestamps: 'true' });
    if (valid.follow) q.set('follow', 'true');
    if (valid.tail !== undefined) q.set('tailLines', String(valid.tail));
    // Whole seconds to the API server (sinceTime has no fraction); the exact time is filtered by logChunks.
    if (since !== undefined) q.set('sinceTime', new Date(Number(since / 1_000_000n)).toISOString().replace(/\.\d+Z$/, 'Z'));
    let body: Readable;
    try {
      body = await this.conn.getStream(
        `/api/v1/namespaces/${encodeURIComponent(this.conn.namespace)}/pods/${encodeURIComponent(id)}/log?${q}`,
        `pod ${id}`,
        valid.signal,
      );
    } catch (err) {
      if (valid.signal?.aborted) return logChunks([], since);
      if (isSbxError(err, 'invalid_argument') && /waiting to start|ContainerCreating|PodInitializing/i.test(err.message)) {
        throw new SbxError('not_available', `pod ${id} has not started its container yet: it has no log`, {
          cause: err,
          details: { id, reason: 'not_started' },
        });
      }
      throw err;
    }
    // The log ends as the container exits, before the pod's status says so: the follow ends
    // once it does, so a caller that reads the box next sees it stopped.
    const settled = valid.follow ? () => this.untilNotRunning(id) : undefined;
    return logChunks(podLogLines(body), since, () => body.destroy(), valid.signal, settled);
  }

  private async untilNotRunning(id: string): Promise<void> {
    const deadline = Date.now() + LOG_SETTLE_MS;
    while (Date.now() < deadline) {
      const pod = await this.readPod(id).catch(() => undefined);
      if (!pod || !isRunning(pod)) return;
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** The nodes' allocatable cores and memory; zero (no ceiling known) when nodes cannot be read. */
  async resources(): Promise<RuntimeResources> {
    try {
      const nodes = (await this.conn.core.listNode()).items;
      let cpus = 0;
      let memoryBytes = 0;
      for (const n of nodes) {
        cpus = Math.max(cpus, quantity(n.status?.allocatable?.['cpu'] ?? '0'));
        memoryBytes = Math.max(memoryBytes, quantity(n.status?.allocatable?.['memory'] ?? '0'));
      }
      return { cpus, memoryBytes };
    } catch (err) {
      const e = toSbxError(err, this.address, 'list nodes');
      if (e.code === 'forbidden') return { cpus: 0, memoryBytes: 0 };
      throw e;
    }
  }

  /**
   * Memory and pids from the box's own cgroup (no metrics-server is assumed); CPU is not sampled
   * (null). The memory limit is the pod spec's: under gVisor the box's cgroup files show its
   * sandbox's, which holds the RuntimeClass's overhead too.
   */
  async stats(id: string): Promise<ContainerStats> {
    const script =
      'for f in /sys/fs/cgroup/memory.current /sys/fs/cgroup/memory/memory.usage_in_bytes; do [ -r $f ] && { cat $f; break; }; done; echo;' +
      'for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do [ -r $f ] && { cat $f; break; }; done; echo;' +
      'for f in /sys/fs/cgroup/pids.current /sys/fs/cgroup/pids/pids.current; do [ -r $f ] && { cat $f; break; }; done; echo';
    const [r, pod] = await Promise.all([this.exec(id, ['/bin/sh', '-c', script]), this.readPod(id)]);
    const [mem, limit, pids] = r.stdout.split('\n').filter((l) => l.trim() !== '');
    const num = (s: string | undefined) => (s && /^\d+$/.test(s.trim()) ? Number(s.trim()) : 0);
    const specLimit = pod.spec?.containers.find((c) => c.name === MAIN_CONTAINER)?.resources?.limits?.['memory'];
    // No limit reads `max` (cgroup v2) or a huge number (v1): none to report.
    const cap = specLimit ? quantity(specLimit) : num(limit);
    return { cpuPercent: null, memoryBytes: num(mem), memoryLimitBytes: cap > 0 && cap < 2 ** 62 ? cap : null, pids: num(pids) };
  }

  /** The container's user, as the pod spec says (exec runs as it: Kubernetes' exec has no user). */
  private async containerUser(id: string): Promise<string | undefined> {
    if (this.users.has(id)) return this.users.get(id);
    const pod = await this.readPod(id);
    const sc = pod.spec?.containers.find((c) => c.name === MAIN_CONTAINER)?.securityContext;
    const user = sc?.runAsUser !== undefined ? `${sc.runAsUser}${sc.runAsGroup !== undefined ? `:${sc.runAsGroup}` : ''}` : undefined;
    if (this.users.size > 10_000) this.users.clear();
    this.users.set(id, user);
    return user;
  }

  /** An exec user is fine only when it is the container's own: Kubernetes cannot switch users. */
  private async checkUser(id: string, user: string | undefined): Promise<void> {
    if (user === undefined) return;
    const own = await this.containerUser(id);
    if (own !== undefined && (user === own || own.startsWith(`${user}:`))) return;
    throw new SbxError(
      'not_available',
      `exec as user '${user}' in pod ${id}: Kubernetes runs execs as the container's user (${own ?? "the image's"}); another user needs the in-box agent`,
      {
        details: { id, field: 'user', reason: 'exec_user' },
      },
    );
  }

  async exec(id: string, cmd: string[], opts?: ExecOptions): Promise<ExecResult> {
    const valid = validateExec(cmd, opts);
    return this.viaAgent(
      id,
      (t) => agentExec(t, cmd, valid),
      async () => {
        await this.checkUser(id, valid.user);
        return kubeExec({ conn: this.conn, pod: id, gate: this.gate }, cmd, valid);
      },
    );
  }

  async execStream(id: string, cmd: string[], opts?: ExecStreamOptions): Promise<ExecStream> {
    const valid = validateExecStream(cmd, opts);
    return this.viaAgent(
      id,
      (t) => agentExecStream(t, cmd, valid),
      async () => {
        await this.checkUser(id, valid.user);
        return kubeExecStream({ conn: this.conn, pod: id, gate: this.gate }, cmd, valid);
      },
    );
  }

  /** Hands the variables to the pod's agent; false without one (the caller passes them with each exec). */
  async setBoxEnv(id: string, env: Record<string, string>): Promise<boolean> {
    const agent = await this.agentOf(id);
    if (!agent) return false;
    await configureAgent(podAgentTarget(this.conn, id, agent), env);
    return true;
  }

  private rememberSidecar(id: string, has: boolean): void {
    if (this.sidecars.size > 10_000) this.sidecars.clear();
    this.sidecars.set(id, has);
  }

  /** Whether the pod has the egress sidecar: known since its create, else read from the pod once. */
  private async hasSidecar(id: string): Promise<boolean> {
    let has = this.sidecars.get(id);
    if (has === undefined) {
      has = !!(await this.readPod(id)).spec?.initContainers?.some((c) => c.name === EGRESS_CONTAINER);
      this.rememberSidecar(id, has);
    }
    return has;
  }

  /**
   * Replaces a running box's rules through its sidecar, which commits them in one nft
   * transaction before it answers. A pod made without the sidecar cannot get one
   * (`not_available`): its rules were never enforced.
   */
  async setEgress(id: string, egress: EgressSpec): Promise<void> {
    const valid = validateEgressSpec(egress);
    if (!(await this.hasSidecar(id))) {
      throw new SbxError('not_available', `pod ${id} has no egress sidecar (it was created without egress rules): its rules cannot change`, {
        details: { id, reason: 'egress_unsupported' },
      });
    }
    await putPodEgress({ conn: this.conn, pod: id }, valid, this.egressDns);
  }

  /**
   * sbx's endpoints on the node (heartbeats, the API), which the egress sidecar would otherwise
   * close with the node's address: new pods whose spec has no egress rules get them as their
   * `endpoints` (a spec with rules carries its own). Pods already running keep theirs.
   */
  allowHostEndpoints(endpoints: HostEndpoint[]): Promise<void> {
    this.hostEndpoints = endpoints.map((e) => ({ host: `${e.address}/32`, ports: [e.port, e.port], protocol: 'tcp' }));
    return Promise.resolve();
  }

  /** The rules in force, as the pod's sidecar reports them; undefined for a pod without one. */
  async getEgress(id: string): Promise<EgressSpec | undefined> {
    if (!(await this.hasSidecar(id))) return undefined;
    return getPodEgress({ conn: this.conn, pod: id });
  }

  /** The file tool is the agent's binary, in pods that have it (`box.files()`); none without. */
  async boxTool(id: string): Promise<string | null> {
    return (await this.agentOf(id)) ? AGENT_BIN : null;
  }

  /** Through the API server's port-forward: a port listed at create, or any with `dialAnyPort`. */
  async dialPort(id: string, containerPort: number, opts: { signal?: AbortSignal } = {}): Promise<Duplex> {
    checkPort(containerPort);
    const pod = await this.readPod(id);
    if (!isRunning(pod)) throw new SbxError('conflict', `pod ${id} is not running`, { details: { id, status: statusOf(pod) } });
    const annotations = pod.metadata?.annotations ?? {};
    const listed = (JSON.parse(annotations[PORTS_ANNOTATION] ?? '[]') as PortSpec[]).some(
      (p) => p.containerPort === containerPort && (p.protocol ?? 'tcp') === 'tcp',
    );
    if (!listed && annotations[DIAL_ANY_PORT_ANNOTATION] !== 'true') {
      throw new SbxError('not_available', `port ${containerPort} of pod ${id} is not exposed: list it in the box's ports at create`, {
        details: { id, port: containerPort, reason: 'port_not_exposed' },
      });
    }
    const podIp = annotations[DIAL_POD_IP_ANNOTATION] === 'true' ? pod.status?.podIP : undefined;
    if (podIp) return dialPodIp(id, podIp, containerPort, opts.signal);
    return portForward(this.conn, id, containerPort, opts.signal);
  }

  /** Creates the PVC a workspace directory is on Kubernetes (PVCs.ts), unless it exists; of the pool's `storageClass` unless `opts` names one. */
  createWorkspaceVolume(hostPath: string, opts: PvcOptions = {}): Promise<string> {
    return ensurePvc(this.conn, hostPath, { ...(this.options.storageClass ? { storageClassName: this.options.storageClass } : {}), ...opts });
  }

  /** Deletes a workspace's PVC, and with it (reclaim policy Delete) its data. */
  removeWorkspaceVolume(hostPath: string): Promise<void> {
    return deletePvc(this.conn, hostPath);
  }

  /**
   * Starts a workspace's helper pod (workspace-helper.ts: the agent image and the PVC, nothing
   * else) and waits until its agent answers; a helper that does not start is removed again.
   */
  async startWorkspaceHelper(hostPath: string, opts: WorkspaceHelperOptions): Promise<WorkspaceHelper> {
    const id = await createHelperPod(this.conn, hostPath, { ...opts, image: this.options.agentImage });
    try {
      await this.start(id);
    } catch (err) {
      await this.remove(id, { force: true }).catch(() => undefined);
      throw err;
    }
    return { id, tool: HELPER_TOOL, root: HELPER_ROOT };
  }

  async close(): Promise<void> {
    // Connections are per request (HTTP keep-alive, one WebSocket per exec): nothing is held.
  }
}

/** A TCP connection to a pod's IP (a pod its port-forward cannot reach), once open; a refusal is `not_available` port_not_listening. */
function dialPodIp(id: string, host: string, port: number, signal?: AbortSignal): Promise<Duplex> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host, port, ...(signal ? { signal } : {}) });
    const failed = (err: NodeJS.ErrnoException) => {
      const details = { id, port, reason: err.name === 'AbortError' ? 'cancelled' : 'port_not_listening' };
      if (err.name === 'AbortError') return reject(new SbxError('cancelled', 'dial cancelled', { details, cause: err }));
      reject(new SbxError('not_available', `port ${port} of pod ${id} (${host}) is not listening (${err.code ?? err.message})`, { details, cause: err }));
    };
    socket.once('error', failed);
    socket.once('connect', () => {
      socket.off('error', failed);
      resolve(socket);
    });
  });
}

/** A Kubernetes quantity (`2`, `1500m`, `8Gi`, `16318892Ki`, `1e3`) as a number. */
/** A pod log read with timestamps: each line is `<RFC 3339 time> <text>\n`. */
async function* podLogLines(body: AsyncIterable<Buffer>): AsyncGenerator<LogPiece> {
  let pending: Buffer = Buffer.alloc(0);
  const piece = (line: Buffer): LogPiece | undefined => {
    const space = line.indexOf(0x20);
    return space < 0 ? undefined : { stream: 'stdout', time: line.subarray(0, space).toString('latin1'), data: line.subarray(space + 1) };
  };
  for await (const chunk of body) {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    let at = 0;
    for (let nl = pending.indexOf(0x0a, at); nl >= 0; nl = pending.indexOf(0x0a, at)) {
      const p = piece(pending.subarray(at, nl + 1));
      if (p) yield p;
      at = nl + 1;
    }
    pending = pending.subarray(at);
  }
  const last = pending.length > 0 ? piece(pending) : undefined;
  if (last) yield last;
}

export function quantity(q: string): number {
  const m = /^([0-9.]+(?:e[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/.exec(q.trim());
  if (!m) return 0;
  const scale: Record<string, number> = {
    m: 1e-3,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    P: 1e15,
    E: 1e18,
    Ki: 2 ** 10,
    Mi: 2 ** 20,
    Gi: 2 ** 30,
    Ti: 2 ** 40,
    Pi: 2 ** 50,
    Ei: 2 ** 60,
  };
  return Number(m[1]) * (m[2] ? scale[m[2]]! : 1);
}
