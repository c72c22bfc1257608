import { invalidArgument } from '../errors.js';
import { DockerRuntime } from './docker/runtime.js';
import type { Runtime, RuntimeOptions } from './types.js';

export * from './types.js';
export { DockerRuntime } from './docker/runtime.js';

/**
 * Opens the Runtime an address names. Every address today is a Docker Engine's (`local`,
 * `unix://`, `tcp://`, `ssh://`); the remote node agent and Kubernetes get schemes of their own.
 * The connection is lazy: nothing is dialled until the first call, so opening never fails on an
 * unreachable engine (the first call does, with `runtime_unavailable`).
 *
 * @example
 * const rt = openRuntime('local');
 * await rt.ping();
 */
export function openRuntime(addr: string, options: RuntimeOptions = {}): Runtime {
  if (typeof addr !== 'string' || addr.trim() === '') throw invalidArgument('addr', "empty runtime address; use 'local' for the local Docker Engine");
  return new DockerRuntime(addr, options);
}
