/**
 * The address of a pool on remote nodes: `sbx://<node>[,<node>…]`, each `<node>` a joined node's
 * name or the `host:port` a direct node joined with (`tai://` is accepted as the seed's spelling).
 * The nodes themselves are the Manager's (joined with a token, pinned); the address only picks them.
 *
 * @example
 * parseNodeAddress('sbx://10.0.0.2:7443,gpu-2') // ['10.0.0.2:7443', 'gpu-2']
 */
import { invalidArgument } from '../../errors.js';
import { NODE_NAME } from './trust-store.js';

const SCHEME = /^(sbx|tai):\/\//i;

export function isNodeAddress(addr: string): boolean {
  return SCHEME.test(addr.trim());
}

export function parseNodeAddress(addr: string): string[] {
  const rest = addr.trim().replace(SCHEME, '');
  const refs = rest
    .split(',')
    .map((r) => r.trim())
    .filter((r) => r !== '');
  if (refs.length === 0) throw invalidArgument('addr', `'${addr}' names no node; write sbx://<node name or host:port>[,…]`);
  for (const ref of refs) {
    const hostPort = /^(\[[0-9a-fA-F:]+\]|[a-zA-Z0-9.-]+):(\d{1,5})$/.exec(ref);
    const port = Number(hostPort?.[2]);
    if (!(NODE_NAME.test(ref) || (hostPort && port > 0 && port < 65536)))
      throw invalidArgument('addr', `'${ref}' in '${addr}' is neither a node name nor host:port`);
  }
  return [...new Set(refs)];
}
