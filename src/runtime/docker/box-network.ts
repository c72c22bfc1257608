/**
 * Isolation of Docker boxes from each other and from the host (docs/network.md). Boxes that name
 * no network join sbx's user-defined bridge network, created per engine when first needed
 * (idempotently, labelled) with `enable_icc=false`: Docker then drops box ↔ box traffic on it (one
 * FORWARD rule for the whole bridge). On a local engine the host firewall (host-firewall.ts) closes
 * this machine's own services to those bridges, but the endpoints (address and port) sbx declares. Nothing is per box.
 *
 * A Linux bridge takes at most 1023 ports (one per running container): a start that finds the
 * bridge full moves its box to the next of these networks (`sbx-boxes`, `sbx-boxes-1`, … on bridges
 * `sbx-boxes0`, `sbx-boxes1`, …), made when first needed; Docker's own isolation keeps boxes of
 * different bridges apart, and the firewall matches every one of them.
 *
 * Host → box traffic is untouched: the host reaches any port of a box at its address on the bridge
 * (dialPort, the agent), and published ports work as before.
 */
import { existsSync } from 'node:fs';
import type Docker from 'dockerode';
import { SbxError } from '../../errors.js';
import type { ContainerSpec, HostEndpoint } from '../types.js';
import { HostFirewall, firewallError } from './host-firewall.js';

/** The first network boxes join when they name none; more (`sbx-boxes-<n>`) when its bridge is full. */
export const BOX_NETWORK = 'sbx-boxes';
/** The bridge interfaces' prefix on the engine's machine: `sbx-boxes<n>` (at most 15 characters). */
export const BOX_BRIDGE_PREFIX = 'sbx-boxes';
/** Box networks at most: 16 bridges of 1023 ports, each a subnet of Docker's address pools. */
export const MAX_BOX_NETWORKS = 16;
const ICC = 'com.docker.network.bridge.enable_icc';
const BRIDGE_NAME = 'com.docker.network.bridge.name';

export const boxNetworkName = (n: number): string => (n === 0 ? BOX_NETWORK : `${BOX_NETWORK}-${n}`);
export const boxBridgeName = (n: number): string => `${BOX_BRIDGE_PREFIX}${n}`;

/** Which box network a network name is, or undefined for any other. */
export function boxNetworkIndex(name: string): number | undefined {
  if (name === BOX_NETWORK) return 0;
  const m = /^sbx-boxes-(\d{1,2})$/.exec(name);
  return m && Number(m[1]) > 0 && Number(m[1]) < MAX_BOX_NETWORKS ? Number(m[1]) : undefined;
}

/** Whether the host firewall is wanted when the options do not say: on unless SBX_HOST_FIREWALL turns it off. */
export function hostFirewallDefault(env: NodeJS.ProcessEnv = process.env): boolean {
  return !/^(off|0|false|no)$/i.test(env['SBX_HOST_FIREWALL'] ?? '');
}

export class BoxIsolation {
  private readonly networks = new Map<number, Promise<void>>();
  /** The network new boxes join: the last one a start found room on. */
  private current = 0;
  /** Undefined: the engine is not on this machine, its host is its administrator's to firewall. */
  private readonly firewall: HostFirewall | undefined;

  /**
   * @param local the engine runs on this machine (a unix socket), so its bridges are ours to firewall.
   * @param hostFirewall install the host firewall (default `hostFirewallDefault()`); false leaves
   *   the host's services open to boxes (box ↔ box stays closed).
   */
  constructor(
    private readonly docker: () => Docker,
    local: boolean,
    hostFirewall: boolean,
  ) {
    this.firewall = local && hostFirewall ? new HostFirewall(`${BOX_BRIDGE_PREFIX}+`) : undefined;
  }

  /**
   * Creates a container: one that names no network joins a box network, made first if need be,
   * while the host firewall is checked beside the create; a failed check removes the container.
   */
  async create(spec: ContainerSpec, create: (spec: ContainerSpec) => Promise<Docker.Container>, retry = true): Promise<Docker.Container> {
    if (spec.network) return create(spec);
    const n = this.current;
    await this.readyNetwork(n);
    const [made, checked] = await Promise.allSettled([create({ ...spec, network: boxNetworkName(n) }), this.ensureFirewall()]);
    if (checked.status === 'rejected') {
      if (made.status === 'fulfilled') await made.value.remove({ force: true }).catch(() => undefined);
      throw checked.reason;
    }
    if (made.status === 'fulfilled') return made.value;
    // The network went away since (`docker network prune` while no box used it): make it again.
    const err = made.reason as { statusCode?: number; message?: string };
    if (retry && err.statusCode === 404 && /network/i.test(err.message ?? '')) {
      this.networks.delete(n);
      return this.create(spec, create, false);
    }
    throw made.reason;
  }

  /**
   * Starts a container; when its box network's bridge is full (1023 ports), moves it to the next
   * box network (made if need be) and starts it there. Other failures are the caller's to map.
   */
  async start(id: string, start: () => Promise<unknown>): Promise<void> {
    for (let moves = 0; ; moves++) {
      try {
        await start();
        return;
      } catch (err) {
        if (!/exchange full/i.test(String((err as Error).message)) || moves >= MAX_BOX_NETWORKS - 1) throw err;
        const c = await this.docker().getContainer(id).inspect();
        // Its networks, not its NetworkMode: a moved box keeps the NetworkMode it was created with.
        const from = Object.keys(c.NetworkSettings?.Networks ?? {})
          .map(boxNetworkIndex)
          .find((i) => i !== undefined);
        if (from === undefined) throw err;
        const to = (Math.max(from, this.current) + 1) % MAX_BOX_NETWORKS;
        await this.readyNetwork(to);
        await this.docker()
          .getNetwork(boxNetworkName(from))
          .disconnect({ Container: id, Force: true })
          .catch(() => undefined);
        await this.docker().getNetwork(boxNetworkName(to)).connect({ Container: id });
        this.current = to;
      }
    }
  }

  /** Declares the TCP endpoints of this machine boxes may reach (sbx's own); see Runtime.allowHostEndpoints. */
  async allowHostEndpoints(endpoints: HostEndpoint[]): Promise<void> {
    if (!this.firewall) return;
    await this.readyNetwork(this.current);
    this.checkBridge();
    await this.firewall.allowEndpoints(endpoints);
  }

  /** The gateway (this machine's address) of the first box network, made if need be: every box network's boxes reach it. */
  async gateway(): Promise<string | undefined> {
    await this.readyNetwork(0);
    const net = await this.docker().getNetwork(boxNetworkName(0)).inspect();
    return (net.IPAM?.Config ?? []).map((c: { Gateway?: string }) => c.Gateway).find((g: string | undefined) => !!g && !g.includes(':'));
  }

  async close(): Promise<void> {
    await this.firewall?.release().catch(() => undefined);
  }

  /** A box network, checked or made once per runtime (again after a failure). */
  private readyNetwork(n: number): Promise<void> {
    let ready = this.networks.get(n);
    if (!ready) {
      ready = this.ensureNetwork(n).catch((err: unknown) => {
        this.networks.delete(n);
        throw err;
      });
      this.networks.set(n, ready);
    }
    return ready;
  }

  private async ensureFirewall(): Promise<void> {
    if (!this.firewall) return;
    this.checkBridge();
    await this.firewall.ensure();
  }

  /** The firewall matches the bridges by name: they must be interfaces of this machine. */
  private checkBridge(): void {
    const bridge = boxBridgeName(this.current);
    if (!existsSync(`/sys/class/net/${bridge}`)) {
      throw firewallError(
        `the boxes' bridge ${bridge} is not a network interface of this machine (the engine runs in a VM or another network namespace), so sbx cannot firewall it`,
      );
    }
  }

  private async ensureNetwork(n: number): Promise<void> {
    const name = boxNetworkName(n);
    for (let attempt = 0; ; attempt++) {
      try {
        return check(await this.docker().getNetwork(name).inspect(), n);
      } catch (err) {
        if ((err as { statusCode?: number }).statusCode !== 404 || attempt > 0) throw err;
      }
      try {
        await this.docker().createNetwork({
          Name: name,
          Driver: 'bridge',
          CheckDuplicate: true,
          Labels: { 'sbx.managed-by': 'sbx', 'sbx.network': 'boxes' },
          Options: { [ICC]: 'false', [BRIDGE_NAME]: boxBridgeName(n) },
        });
        return;
      } catch (err) {
        // Another sbx process made it meanwhile: inspect it as above.
        if ((err as { statusCode?: number }).statusCode !== 409) throw err;
      }
    }
  }
}

/** A network of that name that is not an isolated box network (made by hand) must not be used silently. */
function check(net: Docker.NetworkInspectInfo, n: number): void {
  const o = net.Options ?? {};
  if (net.Driver !== 'bridge' || o[ICC] !== 'false' || o[BRIDGE_NAME] !== boxBridgeName(n)) {
    throw new SbxError(
      'conflict',
      `network ${net.Name} exists but is not sbx's isolated box network (it needs driver bridge, ${ICC}=false, ${BRIDGE_NAME}=${boxBridgeName(n)}); remove it and sbx makes it again`,
      { details: { network: net.Name, reason: 'box_network' } },
    );
  }
}
