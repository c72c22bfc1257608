/**
 * sbx's own endpoints a box is told of (`SBX_API_URL`, `SBX_GRPC_ADDR`), as the host firewall
 * opens them: address and port, and only where the address is one of this machine's. An endpoint
 * elsewhere (a load balancer, another host) needs nothing opened here, and opening its port on
 * this machine would open whatever local service listens on that port (docs/network.md).
 */
import { readFileSync } from 'node:fs';
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { HostEndpoint } from '../runtime/types.js';

/** The host (a name or an address, brackets off) and port of `SBX_API_URL` and of `SBX_GRPC_ADDR`. */
export function endpointTargets(apiUrl: string | undefined, grpcAddr: string | undefined): { host: string; port: number }[] {
  const targets: { host: string; port: number }[] = [];
  if (apiUrl) {
    try {
      const u = new URL(apiUrl);
      targets.push({ host: unbracket(u.hostname), port: Number(u.port || (u.protocol === 'https:' ? 443 : 80)) });
    } catch {
      // The config schema checked it is a URL; nothing to declare otherwise.
    }
  }
  const grpc = /^(.+):(\d{1,5})$/.exec(grpcAddr ?? '');
  const grpcPort = Number(grpc?.[2]);
  if (grpc && grpcPort > 0 && grpcPort < 65536) targets.push({ host: unbracket(grpc[1]!), port: grpcPort });
  return targets;
}

/**
 * The IPv4 addresses of this machine a box can reach: every interface's but loopback's (a box's
 * 127.0.0.1 is its own). Node lists only interfaces that are up and have a carrier, and a bridge
 * with no container (or pod) on it has none — yet its address is the one the first box will
 * send its heartbeats to — so the kernel's own list of local addresses is read as well (Linux).
 */
export function localAddresses(): Set<string> {
  const found = new Set(
    Object.values(networkInterfaces())
      .flat()
      .filter((i) => i !== undefined && i.family === 'IPv4' && !i.internal)
      .map((i) => i!.address),
  );
  let trie = '';
  try {
    trie = readFileSync('/proc/net/fib_trie', 'latin1');
  } catch {
    // Not Linux, or no procfs: the interfaces are all there is.
  }
  for (const address of fibLocalAddresses(trie)) found.add(address);
  return found;
}

/** The local IPv4 addresses in /proc/net/fib_trie (`|-- <address>` followed by `/32 host LOCAL`), loopback's left out. */
export function fibLocalAddresses(trie: string): string[] {
  const out = new Set<string>();
  let last: string | undefined;
  for (const line of trie.split('\n')) {
    const leaf = /^\s*\|-- (\d+\.\d+\.\d+\.\d+)\s*$/.exec(line);
    if (leaf) last = leaf[1];
    else if (last && /^\s*\/32 host LOCAL\s*$/.test(line) && !last.startsWith('127.')) out.add(last);
  }
  return [...out];
}

export interface EndpointResolver {
  /** A name's IPv4 addresses (default: the system resolver, as `fetch` would); none when it does not resolve. */
  lookup?: (host: string) => Promise<string[]>;
  /** This machine's addresses (default `localAddresses()`). */
  local?: () => Set<string>;
}

/**
 * The endpoints to open to boxes: each target's IPv4 addresses (a name resolved) that are
 * addresses of this machine, sorted, without repeats. IPv4 only: the box networks have no IPv6.
 */
export async function hostEndpoints(apiUrl: string | undefined, grpcAddr: string | undefined, resolver: EndpointResolver = {}): Promise<HostEndpoint[]> {
  // Read only when there is an address to check: every create asks, most Managers have no
  // endpoint to open, and the read blocks the event loop (~3 ms with a few dozen interfaces).
  let local: Set<string> | undefined;
  const isLocal = (address: string) => (local ??= (resolver.local ?? localAddresses)()).has(address);
  return resolvedEndpoints(apiUrl, grpcAddr, resolver.lookup ?? ((host) => lookupAddresses(host, 4)), isLocal);
}

/**
 * sbx's endpoints a box must reach whatever its egress policy (compileEgress): each target's
 * addresses, IPv4 and IPv6, wherever they are (an SBX_API_URL on another machine, a load
 * balancer, crosses the egress rules where one on this machine does not), loopback aside (a box's
 * loopback is its own), sorted, without repeats.
 */
export async function egressEndpoints(apiUrl: string | undefined, grpcAddr: string | undefined, resolver: EndpointResolver = {}): Promise<HostEndpoint[]> {
  return resolvedEndpoints(apiUrl, grpcAddr, resolver.lookup ?? ((host) => lookupAddresses(host, 0)), (address) => !isLoopback(address));
}

async function resolvedEndpoints(
  apiUrl: string | undefined,
  grpcAddr: string | undefined,
  resolve: (host: string) => Promise<string[]>,
  keep: (address: string) => boolean,
): Promise<HostEndpoint[]> {
  const found = new Map<string, HostEndpoint>();
  for (const { host, port } of endpointTargets(apiUrl, grpcAddr)) {
    const addresses = isIP(host) ? [host] : await resolve(host);
    for (const address of addresses) if (keep(address)) found.set(`${address}:${port}`, { address, port });
  }
  return [...found.values()].sort((a, b) => a.address.localeCompare(b.address) || a.port - b.port);
}

function isLoopback(address: string): boolean {
  return address.startsWith('127.') || address === '::1' || address.startsWith('::ffff:127.');
}

async function lookupAddresses(host: string, family: 0 | 4): Promise<string[]> {
  try {
    return (await lookup(host, { all: true, family })).map((a) => a.address);
  } catch {
    // A name that does not resolve here names no address to open.
    return [];
  }
}

function unbracket(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}
