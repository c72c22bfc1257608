/**
 * Isolation of Docker boxes from each other and from the host (docs/network.md). Boxes that name
 * no network join sbx's user-defined bridge network, created per engine when first needed
 * (idempotently, labelled) with `enable_icc=false`: Docker then drops box ↔ box traffic on it (one
 * FORWARD rule for the whole bridge). On a local engine the host firewall (host-firewall.ts) closes
 * this machine's own services to those bridges, but the endpoints (address and port) sbx declares. Nothing is per box.
 *
 * A Linux bridge takes at most 1023 ports (one per running container), so boxes are spread over
 * several of these networks (`sbx-boxes`, `sbx-boxes-1`, … on bridges `sbx-boxes0`, `sbx-boxes1`,
 * …), each made when first needed, the same way: a create joins the first one with room
 * (BOXES_PER_NETWORK boxes, counted from the network's endpoints when first used and as this
 * runtime creates and removes boxes there; a network that looks full is counted again, at most
 * every RECOUNT_MS, as other processes' boxes come and go). A start that still finds its bridge
 * full (boxes of other processes filled it meanwhile) moves its box to the next network with room.
 * Docker's own isolation keeps boxes of different bridges apart, and the host firewall and the
 * egress helper match every one of them by the bridges' prefix.
 *
 * Host → box traffic is untouched: the host reaches any port of a box at its address on the bridge
 * (dialPort, the agent), and published ports work as before.
 */
import { existsSync } from 'node:fs';
import type Docker from 'dockerode';
import { SbxError } from '../../errors.js';
import type { ContainerSpec, HostEndpoint } from '../types.js';
import { engineStatus } from './errors.js';
import { HostFirewall, firewallError } from './host-firewall.js';

/** The first network boxes join when they name none; more (`sbx-boxes-<n>`) when its bridge is full. */
export const BOX_NETWORK = 'sbx-boxes';
/** The bridge interfaces' prefix on the engine's machine: `sbx-boxes<n>` (at most 15 characters). */
export const BOX_BRIDGE_PREFIX = 'sbx-boxes';
/** Box networks at most: 16 bridges of 1023 ports, each a subnet of Docker's address pools. */
export const MAX_BOX_NETWORKS = 16;
/** Boxes a create puts on one network: under the bridge's 1023 ports, for boxes other processes start meanwhile. */
export const BOXES_PER_NETWORK = 1000;
/** How often a network that looks full is counted again (other processes' boxes leave it too). */
const RECOUNT_MS = 5_000;
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

/** What a runtime knows of a box network's boxes: its count (endpoints when counted, ± this runtime's creates and removals since). */
interface NetworkCount {
  boxes: number;
  countedAt: number;
}

export class BoxIsolation {
  private readonly networks = new Map<number, Promise<void>>();
  private readonly counts = new Map<number, Promise<NetworkCount>>();
  /** The box network of each box this runtime put on one, by container id: its removal frees a place there. */
  private readonly placed = new Map<string, number>();
  /** Undefined: the engine is not on this machine, its host is its administrator's to firewall. */
  private readonly firewall: HostFirewall | undefined;

  /**
   * @param local the engine runs on this machine (a unix socket), so its bridges are ours to firewall.
   * @param hostFirewall install the host firewall (default `hostFirewallDefault()`); false leaves
   *   the host's services open to boxes (box ↔ box stays closed).
   * @param boxesPerNetwork boxes a create puts on one network (default BOXES_PER_NETWORK; small in tests).
   */
  constructor(
    private readonly docker: () => Docker,
    local: boolean,
    hostFirewall: boolean,
    private readonly boxesPerNetwork = BOXES_PER_NETWORK,
  ) {
    this.firewall = local && hostFirewall ? new HostFirewall(`${BOX_BRIDGE_PREFIX}+`) : undefined;
  }

  /**
   * Creates a container: one that names no network joins a box network, made first if need be,
   * while the host firewall is checked beside the create; a failed check removes the container.
   */
  async create(spec: ContainerSpec, create: (spec: ContainerSpec) => Promise<Docker.Container>, retry = true): Promise<Docker.Container> {
    if (spec.network) return create(spec);
    const n = await this.place();
    const [made, checked] = await Promise.allSettled([create({ ...spec, network: boxNetworkName(n) }), this.ensureFirewall(n)]);
    if (made.status === 'fulfilled' && checked.status === 'fulfilled') {
      this.placed.set(made.value.id, n);
      return made.value;
    }
    // No box took the place.
    void this.count(n).then((c) => (c.boxes = Math.max(0, c.boxes - 1)));
    if (checked.status === 'rejected') {
      if (made.status === 'fulfilled') await made.value.remove({ force: true }).catch(() => undefined);
      throw checked.reason;
    }
    if (made.status === 'fulfilled') return made.value;
    // The network went away since (`docker network prune` while no box used it): make it again.
    if (retry && engineStatus(made.reason) === 404 && /network/i.test((made.reason as Error | undefined)?.message ?? '')) {
      this.networks.delete(n);
      this.counts.delete(n);
      return this.create(spec, create, false);
    }
    throw made.reason;
  }

  /** The container is gone (removed through this runtime): its place on its network is free. */
  forget(id: string): void {
    const n = this.placed.get(id);
    if (n === undefined) return;
    this.placed.delete(id);
    void this.count(n).then((c) => (c.boxes = Math.max(0, c.boxes - 1)));
  }

  /**
   * The first box network with room for one more box, made if need be, and that place taken. A
   * network that looks full is counted again (RECOUNT_MS at most) before it is passed over.
   */
  private async place(): Promise<number> {
    for (let n = 0; n < MAX_BOX_NETWORKS; n++) {
      await this.readyNetwork(n);
      let c = await this.count(n);
      if (c.boxes >= this.boxesPerNetwork && Date.now() - c.countedAt >= RECOUNT_MS) c = await this.recount(n, c);
      if (c.boxes < this.boxesPerNetwork) {
        c.boxes++;
        return n;
      }
    }
    throw new SbxError('limit_exceeded', `every box network is full (${MAX_BOX_NETWORKS} networks of ${this.boxesPerNetwork} boxes)`, {
      details: { reason: 'box_networks_full' },
    });
  }

  /** A network's count, from its endpoints the first time. */
  private count(n: number): Promise<NetworkCount> {
    let c = this.counts.get(n);
    if (!c) {
      c = this.endpoints(n).then((boxes) => ({ boxes, countedAt: Date.now() }));
      c.catch(() => this.counts.delete(n));
      this.counts.set(n, c);
    }
    return c;
  }

  /** Counts a network's endpoints again into `c` (shared by everyone holding it). */
  private async recount(n: number, c: NetworkCount): Promise<NetworkCount> {
    c.countedAt = Date.now();
    c.boxes = await this.endpoints(n);
    return c;
  }

  /** The containers connected to a box network now (running ones: each holds a port of its bridge). */
  private async endpoints(n: number): Promise<number> {
    const net = (await this.docker().getNetwork(boxNetworkName(n)).inspect()) as { Containers?: Record<string, unknown> };
    return Object.keys(net.Containers ?? {}).length;
  }

  /**
   * Starts a container; when its box network's bridge is full (1023 ports: other processes' boxes
   * filled it), moves it to the next box network with room (made if need be) and starts it there.
   * Other failures are the caller's to map.
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
        // Full as far as this runtime is concerned until it is counted again.
        const full = await this.count(from);
        full.boxes = Math.max(full.boxes, this.boxesPerNetwork);
        full.countedAt = Date.now();
        this.placed.delete(id);
        const to = await this.place();
        await this.docker()
          .getNetwork(boxNetworkName(from))
          .disconnect({ Container: id, Force: true })
          .catch(() => undefined);
        await this.docker().getNetwork(boxNetworkName(to)).connect({ Container: id });
        this.placed.set(id, to);
      }
    }
  }

  /** Declares the TCP endpoints of this machine boxes may reach (sbx's own); see Runtime.allowHostEndpoints. */
  async allowHostEndpoints(endpoints: HostEndpoint[]): Promise<void> {
    if (!this.firewall) return;
    await this.readyNetwork(0);
    this.checkBridge(0);
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

  private async ensureFirewall(n: number): Promise<void> {
    if (!this.firewall) return;
    this.checkBridge(n);
    await this.firewall.ensure();
  }

  /** The firewall matches the bridges by name: they must be interfaces of this machine. */
  private checkBridge(n: number): void {
    const bridge = boxBridgeName(n);
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
        if (engineStatus(err) !== 404 || attempt > 0) throw err;
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
        if (engineStatus(err) !== 409) throw err;
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
