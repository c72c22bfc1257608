import { invalidArgument } from '../errors.js';
import { DockerRuntime } from './docker/runtime.js';
import { isKubeAddress } from './kubernetes/address.js';
import { isNodeAddress } from './remote/address.js';
import { KubernetesRuntime } from './kubernetes/runtime.js';
import type { Runtime, RuntimeOptions } from './types.js';

export * from './types.js';
export { DockerRuntime } from './docker/runtime.js';
export { KubernetesRuntime } from './kubernetes/runtime.js';

/**
 * Opens the Runtime an address names: a Docker Engine's (`local`, `unix://`, `tcp://`, `ssh://`)
 * a Kubernetes namespace's (`k8s://?kubeconfig=…&context=…&namespace=…`, see
 * kubernetes/address.ts) or remote nodes' (`sbx://node[,node…]`, through `options.nodes`, see
 * remote/address.ts). Any other scheme is invalid_argument.
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
  if (isNodeAddress(addr)) {
    if (!options.nodes) throw invalidArgument('addr', `'${addr}' names remote nodes, which only a Manager (its node hub) can reach`);
    return options.nodes.runtimeFor(addr);
  }
  return new DockerRuntime(addr, options);
}
