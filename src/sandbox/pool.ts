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

  async close(): Promise<void> {
    await this.warm?.close();
    await this.watch?.stop();
    this.watch = undefined;
    // A runtime handed in by the caller is theirs to close.
    if (this.rt && !this.def.runtime) await this.rt.close();
    this.rt = undefined;
    this.connected = false;
  }
}
