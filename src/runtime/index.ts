import { invalidArgument } from '../errors.js';
import { DockerRuntime } from './docker/runtime.js';
import { isKubeAddress } from './kubernetes/address.js';
import { KubernetesRuntime } from './kubernetes/runtime.js';
import type { Runtime, RuntimeOptions } from './types.js';

export * from './types.js';
export { DockerRuntime } from './docker/runtime.js';
export { KubernetesRuntime } from './kubernetes/runtime.js';

/**
 * Opens the Runtime an address names: a Docker Engine's (`local`, `unix://`, `tcp://`, `ssh://`)
 * or a Kubernetes namespace's (`k8s://?kubeconfig=…&context=…&namespace=…`, see
 * kubernetes/address.ts). Any other scheme is invalid_argument.
 * The connection is lazy: nothing is dialled until the first call, so opening never fails on an
 * unreachable engine (the first call does, with `runtime_unavailable`).
 *
 * @example
 * const rt = openRuntime('local');
 * await rt.ping();
 */
export function openRuntime(addr: string, options: RuntimeOptions = {}): Runtime {
  if (typeof addr !== 'string' || addr.trim() === '') throw invalidArgument('addr', "empty runtime address; use 'local' for the local Docker Engine");
  if (isKubeAddress(addr)) return new KubernetesRuntime(addr, options);
  return new DockerRuntime(addr, options);
}
