import { SbxError } from '../errors.js';
import { loadConfig } from './config.js';
import type { ManagerConfig } from './config.js';
import { Manager } from './manager.js';

let instance: Manager | undefined;

/**
 * The seed's `Init(config)`: creates the process-wide Manager used by the seed-compatible
 * facade. The library itself needs no globals; prefer `new Manager()`. With no argument it reads
 * what `new Manager()` reads (`SBX_CONFIG`, `SBX_*`).
 */
export function init(config: ManagerConfig = loadConfig()): Manager {
  instance = new Manager(config);
  return instance;
}

/** The seed's `M()`: the Manager made by `init`; throws not_available before that. */
export function M(): Manager {
  if (!instance) throw new SbxError('not_available', 'sandbox manager not initialised; call init(config) first');
  return instance;
}

/** Forgets the global Manager (tests). Does not close it. */
export function resetForTest(): void {
  instance = undefined;
}
