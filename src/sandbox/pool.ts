import { openRuntime } from '../runtime/index.js';
import { timedRuntime } from '../runtime/timed-runtime.js';
import type { EngineCallObserver } from '../runtime/timed-runtime.js';
import type { Runtime, RuntimeResources } from '../runtime/types.js';
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
  /** The host ports last declared to the runtime, so that an unchanged set costs nothing. */
  private hostPorts: { key: string; done: Promise<void> } | undefined;

  /** `observe` is told of every engine call this pool makes (duration, outcome): sbx serve's metrics. */
  constructor(
    readonly def: ResolvedPool,
    private readonly observe?: EngineCallObserver,
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
          ...(d.readyTimeoutMs !== undefined ? { readyTimeoutMs: d.readyTimeoutMs } : {}),
          ...(d.storageClass ? { storageClass: d.storageClass } : {}),
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
      maxLifetimeMs: d.maxLifetimeMs,
      stopTimeoutMs: d.stopTimeoutMs,
      security: d.security,
      memory: d.memory,
      cpus: d.cpus,
      agent: d.agent,
      networks: [...d.networks],
      warm: d.warm.map((t) => ({ ...t })),
      ...(d.agentImage ? { agentImage: d.agentImage } : {}),
      ...(d.readyTimeoutMs !== undefined ? { readyTimeoutMs: d.readyTimeoutMs } : {}),
      ...(d.storageClass ? { storageClass: d.storageClass } : {}),
      ...(d.ociRuntime ? { ociRuntime: d.ociRuntime } : {}),
      ...(d.pidsLimit !== undefined ? { pidsLimit: d.pidsLimit } : {}),
      ...(d.maxMemory !== undefined ? { maxMemory: d.maxMemory } : {}),
      ...(d.maxCpus !== undefined ? { maxCpus: d.maxCpus } : {}),
    };
  }

  /**
   * Tells the runtime which ports of its machine boxes may reach (Runtime.allowHostPorts), when
   * the set changed since the last time; concurrent creates share one declaration.
   */
  async allowHostPorts(ports: number[]): Promise<void> {
    const rt = this.runtime();
    if (!rt.allowHostPorts) return;
    const key = ports.join(',');
    if (this.hostPorts?.key !== key) {
      const done = rt.allowHostPorts(ports).catch((err: unknown) => {
        if (this.hostPorts?.done === done) this.hostPorts = undefined;
        throw err;
      });
      this.hostPorts = { key, done };
    }
    await this.hostPorts.done;
  }

  async close(): Promise<void> {
    this.hostPorts = undefined;
    await this.warm?.close();
    await this.watch?.stop();
    this.watch = undefined;
    // A runtime handed in by the caller is theirs to close.
    if (this.rt && !this.def.runtime) await this.rt.close();
    this.rt = undefined;
    this.connected = false;
  }
}

/**
 * The ports of sbx's own endpoints a box is told to reach: the API of `SBX_API_URL` (heartbeats)
 * and the gRPC heartbeat of `SBX_GRPC_ADDR` (`host:port`, `[v6]:port`), sorted, without repeats.
 */
export function endpointPorts(apiUrl: string | undefined, grpcAddr: string | undefined): number[] {
  const ports = new Set<number>();
  if (apiUrl) {
    try {
      const u = new URL(apiUrl);
      ports.add(Number(u.port || (u.protocol === 'https:' ? 443 : 80)));
    } catch {
      // The config schema checked it is a URL; nothing to declare otherwise.
    }
  }
  const grpcPort = Number(/:(\d{1,5})$/.exec(grpcAddr ?? '')?.[1]);
  if (grpcPort > 0 && grpcPort < 65536) ports.add(grpcPort);
  return [...ports].sort((a, b) => a - b);
}
