import { parseRuntimeAddress } from './address.js';
import { DockerRuntime } from './docker/runtime.js';
import type { DockerConnectionOptions } from './docker/connection.js';
import type { Runtime } from './types.js';

export * from './types.js';
export { parseRuntimeAddress } from './address.js';
export type { RuntimeAddress } from './address.js';
export { DockerRuntime } from './docker/runtime.js';

export type RuntimeOptions = DockerConnectionOptions;

/**
 * Opens the Runtime an address names. The connection is lazy: nothing is dialled until the
 * first call, so opening never fails on an unreachable engine (the first call does, with
 * `runtime_unavailable`).
 *
 * @example
 * const rt = openRuntime('local');
 * await rt.ping();
 */
export function openRuntime(addr: string, options: RuntimeOptions = {}): Runtime {
  const parsed = parseRuntimeAddress(addr);
  switch (parsed.engine) {
    case 'docker':
      return new DockerRuntime(parsed, options);
  }
}
