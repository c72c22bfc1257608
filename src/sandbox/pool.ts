import { openRuntime } from '../runtime/index.js';
import type { Runtime } from '../runtime/types.js';
import type { ResolvedPool } from './config.js';
import type { PoolInfo } from './types.js';

/** A named runtime with its limits; the connection opens on first use and is reused. */
export class Pool {
  private rt: Runtime | undefined;
  /** Whether the last call that needed the engine reached it. */
  connected = false;
  /** Whether this pool's existing boxes have been adopted (start() or a later tick). */
  recovered = false;

  constructor(readonly def: ResolvedPool) {}

  get name(): string {
    return this.def.name;
  }

  runtime(): Runtime {
    this.rt ??= this.def.runtime ?? openRuntime(this.def.addr, this.def.runtimeOptions);
    return this.rt;
  }

  info(boxes: number): PoolInfo {
    return {
      name: this.def.name,
      addr: this.def.addr,
      connected: this.connected,
      boxes,
      maxPerUser: this.def.maxPerUser,
      maxTotal: this.def.maxTotal,
      idleTimeoutMs: this.def.idleTimeoutMs,
      maxLifetimeMs: this.def.maxLifetimeMs,
      stopTimeoutMs: this.def.stopTimeoutMs,
      security: this.def.security,
    };
  }

  async close(): Promise<void> {
    // A runtime handed in by the caller is theirs to close.
    if (this.rt && !this.def.runtime) await this.rt.close();
    this.rt = undefined;
    this.connected = false;
  }
}
