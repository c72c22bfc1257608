/**
 * The host side of box isolation on a local Docker Engine: iptables rules that close the host's
 * own services (every address of this machine: the bridge gateway, docker0, eth0, …) to traffic
 * coming in from the boxes' bridge, except the endpoints sbx declares (its API for heartbeats,
 * its gRPC heartbeat), each one address of this machine and one port: the same port at another
 * address of the host is another service, and stays closed. Docker's `enable_icc=false` on the
 * boxes' network already drops box ↔ box traffic (FORWARD); what reaches the host itself goes
 * through INPUT, which Docker never touches.
 *
 * Rules (filter table, constant: none per box):
 *   INPUT:           -i <bridge> -j SBX-BOXES-IN                   (inserted first)
 *   SBX-BOXES-IN:    conntrack ESTABLISHED,RELATED -j ACCEPT      (replies to the host's own
 *                                                                   connections: dialPort, proxies)
 *                    -p udp|tcp --dport 15353 conntrack DNAT, original port 53 -j ACCEPT
 *                                                                  (boxes' DNS, redirected to the
 *                                                                   egress helper's proxy: egress.ts)
 *                    -j SBX-BOXES-PORTS
 *                    -j REJECT --reject-with icmp-admin-prohibited (TCP, UDP, ICMP alike)
 *   SBX-BOXES-PORTS: -d <address>/32 -p tcp --dport <port> -m comment --comment "sbx-owner <pid>:<start>:<n>" -j ACCEPT
 *
 * SBX-BOXES-IN is written in one `iptables-restore --noflush` transaction, so rebuilding it never
 * opens a window. Endpoint rules are added and deleted one by one (each is atomic) and tagged with
 * the process that declared them (pid and its start time, so a reused pid is not mistaken for
 * it): several sbx processes share the chain, and rules of processes that are gone are swept on
 * the next declaration. The `iptables` found on PATH is the one Docker uses (legacy or nft).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { SbxError, invalidArgument } from '../../errors.js';
import type { HostEndpoint } from '../types.js';
import { isPort } from '../ports.js';
import { EGRESS_DNS_PORT } from './egress.js';

export const IN_CHAIN = 'SBX-BOXES-IN';
export const PORTS_CHAIN = 'SBX-BOXES-PORTS';
const OWNER_PREFIX = 'sbx-owner ';
/** iptables lives in sbin, which a non-root PATH often lacks. */
const PATH = `${process.env['PATH'] ?? ''}:/usr/sbin:/sbin:/usr/local/sbin`;

/** This process, as the port rules name it: pid and start time (clock ticks since boot). */
const selfStart = startTimeOf(process.pid);
let instances = 0;

export class HostFirewall {
  private readonly owner = `${process.pid}:${selfStart ?? 0}:${++instances}`;
  private checking: Promise<void> | undefined;
  private endpoints: HostEndpoint[] = [];

  constructor(readonly bridge: string) {}

  /**
   * Checks the rules (one `iptables -S`) and installs what is missing: called beside every create,
   * so rules someone flushed come back before the next box runs. Concurrent calls share one check.
   */
  ensure(): Promise<void> {
    return (this.checking ??= this.check().finally(() => (this.checking = undefined)));
  }

  private async check(): Promise<void> {
    const rules = new Set((await iptables(['-S'])).split('\n'));
    const inputJump = `-A INPUT -i ${this.bridge} -j ${IN_CHAIN}`;
    const ok =
      rules.has(inputJump) &&
      rules.has(`-N ${PORTS_CHAIN}`) &&
      inChainRules().every((r) => rules.has(`-A ${IN_CHAIN} ${r}`)) &&
      [...rules].filter((r) => r.startsWith(`-A ${IN_CHAIN} `)).length === inChainRules().length &&
      this.endpoints.every((e) => rules.has(this.rule('-A', e)));
    if (ok) return;
    if (!rules.has(`-N ${PORTS_CHAIN}`)) await iptables(['-N', PORTS_CHAIN]).catch(ignoreExists);
    await iptablesRestore(['*filter', `:${IN_CHAIN} - [0:0]`, ...inChainRules().map((r) => `-A ${IN_CHAIN} ${r}`), 'COMMIT', ''].join('\n'));
    if (!rules.has(inputJump)) await iptables(['-I', 'INPUT', '1', '-i', this.bridge, '-j', IN_CHAIN]);
    for (const e of this.endpoints) if (!rules.has(this.rule('-A', e))) await iptables(this.ruleArgs('-A', e));
  }

  /**
   * Declares the TCP endpoints of this machine boxes may reach, each an IPv4 address and a port
   * (replacing this instance's earlier declaration), and sweeps the rules of sbx processes that
   * are gone.
   */
  async allowEndpoints(endpoints: HostEndpoint[]): Promise<void> {
    for (const e of endpoints) {
      // iptables is IPv4 (the box networks have no IPv6); a port without its address would open every service on it.
      if (isIP(e.address) !== 4 || !isPort(e.port)) {
        throw invalidArgument('endpoints', `${e.address}:${e.port} is not an IPv4 address and a TCP port`);
      }
    }
    const want = [...new Map(endpoints.map((e) => [`${e.address}:${e.port}`, { address: e.address, port: e.port }])).values()];
    await this.ensure();
    const listed = (await iptables(['-S', PORTS_CHAIN])).split('\n').filter((l) => l.startsWith(`-A ${PORTS_CHAIN} `));
    for (const line of listed) {
      const owner = /--comment "?sbx-owner (\d+):(\d+):(\d+)"?/.exec(line);
      if (!owner) continue;
      const mine = `${owner[1]}:${owner[2]}:${owner[3]}` === this.owner;
      const started = startTimeOf(Number(owner[1]));
      // A start time of 0: its owner had no /proc to read its own from; only its pid can tell.
      const gone = !mine && (started === undefined || (owner[2] !== '0' && started !== Number(owner[2])));
      const dropped = mine && !want.some((e) => line === this.rule('-A', e));
      if (gone || dropped) await iptables(['-D', ...splitRule(line).slice(1)]).catch(ignoreMissing);
    }
    for (const e of want) if (!listed.includes(this.rule('-A', e))) await iptables(this.ruleArgs('-A', e));
    this.endpoints = want;
  }

  /** Deletes this instance's endpoint rules (the runtime closes); the shared chains stay. */
  async release(): Promise<void> {
    const endpoints = this.endpoints;
    this.endpoints = [];
    for (const e of endpoints) await iptables(this.ruleArgs('-D', e)).catch(ignoreMissing);
  }

  private ruleArgs(op: '-A' | '-D', e: HostEndpoint): string[] {
    return splitRule(this.rule(op, e));
  }

  /** The rule as `iptables -S` prints it. */
  private rule(op: '-A' | '-D', e: HostEndpoint): string {
    return `${op} ${PORTS_CHAIN} -d ${e.address}/32 -p tcp -m tcp --dport ${e.port} -m comment --comment "${OWNER_PREFIX}${this.owner}" -j ACCEPT`;
  }
}

/** SBX-BOXES-IN's rules, as `iptables -S` prints them (without `-A <chain>`). */
function inChainRules(): string[] {
  return [
    '-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
    // DNS of boxes, redirected (nat prerouting, egress.ts's helper) from port 53 to the helper's
    // proxy on the gateway: only redirected packets, never the proxy's port asked for directly.
    ...(['udp', 'tcp'] as const).map((p) => `-p ${p} -m ${p} --dport ${EGRESS_DNS_PORT} -m conntrack --ctstate DNAT --ctorigdstport 53 -j ACCEPT`),
    `-j ${PORTS_CHAIN}`,
    '-j REJECT --reject-with icmp-admin-prohibited',
  ];
}

/** A process's start time (field 22 of /proc/<pid>/stat), or undefined when it is gone. */
function startTimeOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
  } catch {
    return undefined;
  }
}

/** `-A CHAIN -p tcp … --comment "a b" -j ACCEPT` → its arguments (quotes as iptables -S prints them). */
function splitRule(line: string): string[] {
  return [...line.matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2]!);
}

function ignoreExists(err: unknown): void {
  if (!/exists/i.test((err as Error).message)) throw err;
}

function ignoreMissing(err: unknown): void {
  if (!/does a matching rule exist|bad rule|no chain/i.test((err as Error).message)) throw err;
}

function iptables(args: string[]): Promise<string> {
  return run('iptables', ['-w', ...args]);
}

function iptablesRestore(input: string): Promise<string> {
  return run('iptables-restore', ['-w', '--noflush'], input);
}

function run(tool: string, args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(tool, args, { env: { ...process.env, PATH }, timeout: 30_000 }, (err, stdout, stderr) => {
      if (!err) return resolve(stdout);
      const code = (err as NodeJS.ErrnoException).code;
      const text = String(stderr).trim() || err.message;
      if (code === 'ENOENT') {
        return reject(
          firewallError(`${tool} is not installed; the host firewall that closes this machine's services to boxes needs it (apt-get install iptables)`, err),
        );
      }
      if (/permission denied|you must be root|operation not permitted/i.test(text)) {
        return reject(firewallError(`${tool} ${args.join(' ')}: ${text}; the host firewall needs root (or CAP_NET_ADMIN)`, err));
      }
      reject(new SbxError('internal', `${tool} ${args.join(' ')}: ${text}`, { cause: err }));
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}

/** Why a box cannot be created with its isolation: the stable reason and the way out. */
export function firewallError(why: string, cause?: unknown): SbxError {
  return new SbxError(
    'not_available',
    `${why}. Boxes are not created without it; to run without the host firewall (boxes can then reach this machine's services), set SBX_HOST_FIREWALL=off or the runtime option hostFirewall: false (docs/network.md)`,
    { details: { reason: 'host_firewall' }, ...(cause ? { cause } : {}) },
  );
}
