import { openRuntime } from '../runtime/index.js';
import { timedRuntime } from '../runtime/timed-runtime.js';
import type { EngineCallObserver } from '../runtime/timed-runtime.js';
import type { HostEndpoint, NodeRuntimes, Runtime, RuntimeResources } from '../runtime/types.js';
import type { ResolvedPool } from './config.js';
import type { PoolWatch } from './pool-watch.js';
import type { WarmPool } from './warm-pool.js';
import type { PoolInfo } from './types.js';

/** A named runtime with its limits; the connection opens on first use and is reused. */
export class Pool {
  private rt: Runtime | undefined;
  /** Whether the last call that needed the engine reached it. */
  connected = false;
  /** Whether this pool's existing boxes have been adopted (start() or a later pass). */
  recovered = false;
  /** The engine machine's size, learned at recovery: the default ceiling of box resources. */
  resources: RuntimeResources | undefined;
  watch: PoolWatch | undefined;
  /** The pool's warm spares; set by the Manager. */
  warm: WarmPool | undefined;
  /** The host endpoints last declared to the runtime, so that an unchanged set costs nothing. */
  private hostEndpoints: { key: string; done: Promise<void> } | undefined;

  /** `observe` is told of every engine call this pool makes (duration, outcome): sbx serve's metrics. */
  constructor(
    readonly def: ResolvedPool,
    private readonly observe?: EngineCallObserver,
    /** Opens `sbx://` addresses: the Manager's remote nodes. */
    private readonly nodes?: NodeRuntimes,
  ) {}

  get name(): string {
    return this.def.name;
  }

  runtime(): Runtime {
    const d = this.def;
    this.rt ??= this.timed(
      d.runtime ??
        openRuntime(d.addr, {
          ...d.runtimeOptions,
          agent: d.agent,
          ...(d.agentImage ? { agentImage: d.agentImage } : {}),
          ...(d.agentDelivery ? { agentDelivery: d.agentDelivery } : {}),
          ...(d.readyTimeoutMs !== undefined ? { readyTimeoutMs: d.readyTimeoutMs } : {}),
          ...(d.storageClass ? { storageClass: d.storageClass } : {}),
          ...(this.nodes ? { nodes: this.nodes } : {}),
        }),
    );
    return this.rt;
  }

  private timed(rt: Runtime): Runtime {
    return this.observe ? timedRuntime(rt, this.observe) : rt;
  }

  info(boxes: number): PoolInfo {
    const d = this.def;
    return {
      name: d.name,
      addr: d.addr,
      connected: this.connected,
      boxes,
      maxPerUser: d.maxPerUser,
      maxTotal: d.maxTotal,
      idleTimeoutMs: d.idleTimeoutMs,
      idlePauseMs: d.idlePauseMs,
      idleArchiveMs: d.idleArchiveMs,
      maxLifetimeMs: d.maxLifetimeMs,
      stopTimeoutMs: d.stopTimeoutMs,
      security: d.security,
      memory: d.memory,
      cpus: d.cpus,
      agent: d.agent,
      networks: [...d.networks],
      networkPolicy: d.networkPolicy,
      warm: d.warm.map((t) => ({ ...t })),
      ...(d.agentImage ? { agentImage: d.agentImage } : {}),
      ...(d.agentDelivery ? { agentDelivery: d.agentDelivery } : {}),
      ...(d.readyTimeoutMs !== undefined ? { readyTimeoutMs: d.readyTimeoutMs } : {}),
      ...(d.storageClass ? { storageClass: d.storageClass } : {}),
      ...(d.ociRuntime ? { ociRuntime: d.ociRuntime } : {}),
      ...(d.pauseMemory === 'release' ? { pauseMemory: d.pauseMemory } : {}),
      ...(d.pidsLimit !== undefined ? { pidsLimit: d.pidsLimit } : {}),
      ...(d.maxMemory !== undefined ? { maxMemory: d.maxMemory } : {}),
      ...(d.maxCpus !== undefined ? { maxCpus: d.maxCpus } : {}),
    };
  }

  /**
   * Tells the runtime which endpoints of its machine boxes may reach (Runtime.allowHostEndpoints),
   * when the set changed since the last time; concurrent creates share one declaration.
   */
  async allowHostEndpoints(endpoints: HostEndpoint[]): Promise<void> {
    const rt = this.runtime();
    if (!rt.allowHostEndpoints) return;
    const key = endpoints.map((e) => `${e.address}:${e.port}`).join(',');
    if (this.hostEndpoints?.key !== key) {
      const done = rt.allowHostEndpoints(endpoints).catch((err: unknown) => {
        if (this.hostEndpoints?.done === done) this.hostEndpoints = undefined;
        throw err;
      });
      this.hostEndpoints = { key, done };
    }
    await this.hostEndpoints.done;
  }

  async close(): Promise<void> {
    this.hostEndpoints = undefined;
    await this.warm?.close();
    await this.watch?.stop();
    this.watch = undefined;
    // A runtime handed in by the caller is theirs to close.
    if (this.rt && !this.def.runtime) await this.rt.close();
    this.rt = undefined;
    this.connected = false;
  }
}
