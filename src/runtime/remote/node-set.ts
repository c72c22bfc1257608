/**
 * NodeSet: one Runtime over several machines, so a pool can span nodes while the Manager above
 * still sees one Runtime per pool and nothing of nodes. Each member is a Runtime of one machine
 * (a RemoteRuntime to one `sbx node`); the connection code owns the members and keeps their
 * state (online, offline, connecting; draining from `sbx nodes drain`), handed in as a live view.
 *
 * Ids: a container of the NodeSet is `<node>:<the member's container id>`; every call about a
 * container goes to that node. An id naming no member is not_found.
 *
 * Offline nodes: every call for a container of a node that is not online fails at once with
 * runtime_unavailable naming the node (`details.node`), never waiting for a timeout. `list`
 * answers for such a node what the node last said (its last successful lists, kept current by
 * creates, removes and events), so reconciliation never forgets a box because its node is
 * unreachable. The merged `events` stream survives a node's stream breaking, and when a node comes
 * back it emits what changed there meanwhile (created, started, stopped, removed), from a fresh
 * list against the last known one. It throws (runtime_unavailable) when no node is online, and
 * when a node comes back whose engine stopped boxes meanwhile or that was never listed: the
 * Manager then reconciles the pool and starts the boxes stopped behind sbx, as for one engine.
 *
 * Placement (`create`): a node that is online, not draining, under its `maxBoxes` (sbx's
 * containers listed there plus creates in flight) and with the memory the spec asks for free
 * (its machine's memory minus the limits of its running containers) takes the box, fewest
 * containers first, ties by name. A box mounting a workspace volume goes to the node holding the
 * volume (draining or not). A box with an egress policy other than `all` goes only to a node
 * whose runtime enforces one (`capabilities.egress`). See docs/nodes.md.
 */
import { Readable } from 'node:stream';
import type { Duplex } from 'node:stream';
import { SbxError, isSbxError } from '../../errors.js';
import { validateEgressSpec, validateSpec } from '../spec.js';
import { checkpointCallsOf } from '../types.js';
import type {
  CheckpointCalls,
  ContainerEvent,
  ContainerInfo,
  ContainerListOptions,
  ContainerSpec,
  ContainerStats,
  ContainerSummary,
  EgressSpec,
  ExecOptions,
  ExecResult,
  ExecStream,
  ExecStreamOptions,
  HostEndpoint,
  ImageInfo,
  Images,
  LogChunk,
  LogOptions,
  ProcessInfo,
  PullProgress,
  RegistryAuth,
  Runtime,
  RuntimeCapabilities,
  RuntimeResources,
  RuntimeVersion,
  WorkspaceHelper,
  WorkspaceHelperOptions,
  WorkspaceVolumeOptions,
} from '../types.js';

export type NodeState = 'online' | 'offline' | 'connecting';

/** One machine of a NodeSet, as the connection code keeps it. */
export interface NodeMember {
  /** The node's name (`[A-Za-z0-9][A-Za-z0-9_.-]{0,62}`): its containers are `<name>:<id>` to the NodeSet. */
  name: string;
  /** The machine's runtime; the connection code's, never closed by the NodeSet. */
  runtime: Runtime;
  /** Only an online node is called; the others fail fast (runtime_unavailable). */
  state: NodeState;
  /** `sbx nodes drain`: no new box is placed there; its boxes keep running. */
  draining: boolean;
  /** Containers of sbx this node may hold at most (boxes, spares, helpers; absent: no limit). */
  maxBoxes?: number;
  /** The machine's size as the node reported it on connect; absent: asked of its runtime once. */
  resources?: RuntimeResources;
}

export interface NodeSetOptions {
  /**
   * The members now (read at every call). A node the pool lists but that is not connected yet
   * must be here as `connecting`, not left out: an id of a node missing here is not_found, which
   * the Manager reads as a box that is gone.
   */
  members: () => readonly NodeMember[];
  /**
   * The members keep workspaces as volumes (RemoteRuntime): the NodeSet then has the three
   * workspace volume methods, placing each volume on a node and routing by its host path.
   */
  workspaceVolumes?: boolean;
  /** How often waiting streams read `members()` again when `membersChanged()` is not called (default 1000). */
  recheckMs?: number;
}

/** The label a NodeSet puts on what it creates with a memory limit: the bytes, so placement counts them from a list. */
export const MEMORY_LABEL = 'sbx.memory';
/**
 * The label that places a create on one node: the one whose engine holds the spec's image (an
 * image `commit` made there, which no other node has: a snapshot). Set by the caller; kept on the box.
 */
export const IMAGE_NODE_LABEL = 'sbx.image-node';
/** What every container of sbx carries (src/sandbox/labels.ts): what placement counts. */
const MANAGED = { 'sbx.managed-by': 'sbx' };
const NODE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;
const DEFAULT_RECHECK_MS = 1000;
/** Why placement skipped a node for a box with an egress policy. */
const NO_EGRESS = 'enforces no egress policy';

interface InFlight {
  count: number;
  memory: number;
}

export class NodeSet implements Runtime {
  readonly images: Images;
  createWorkspaceVolume?: (hostPath: string, opts?: WorkspaceVolumeOptions) => Promise<string>;
  removeWorkspaceVolume?: (hostPath: string) => Promise<void>;
  startWorkspaceHelper?: (hostPath: string, opts: WorkspaceHelperOptions) => Promise<WorkspaceHelper>;
  listVolumes?: () => Promise<{ hostPath: string; labels: Record<string, string> }[]>;

  /** Per node: the containers it last reported, by its own id. */
  private readonly known = new Map<string, Map<string, ContainerSummary>>();
  private readonly inFlight = new Map<string, InFlight>();
  /** Workspace volume host path → the node holding it. */
  private readonly volumeHome = new Map<string, string>();
  private readonly machines = new Map<string, RuntimeResources>();
  private readonly listeners = new Set<() => void>();
  /** Placements one at a time: each sees the creates the earlier ones put in flight. */
  private placing: Promise<unknown> = Promise.resolve();
  private endpoints: { key: string; list: HostEndpoint[] } | undefined;
  /** Per node: the endpoint declaration it has (by key). */
  private readonly declared = new Map<string, { key: string; done: Promise<void> }>();
  private readonly closing = new AbortController();

  constructor(
    readonly address: string,
    private readonly o: NodeSetOptions,
  ) {
    this.images = new NodeImages(this);
    if (o.workspaceVolumes) {
      this.createWorkspaceVolume = (hostPath, opts) => this.createVolume(hostPath, opts);
      this.removeWorkspaceVolume = (hostPath) => this.removeVolume(hostPath);
      this.startWorkspaceHelper = (hostPath, opts) => this.startHelper(hostPath, opts);
      this.listVolumes = () => this.volumes();
    }
  }

  // --- nodes ---------------------------------------------------------------------------

  /** The members now; a name that cannot prefix an id is the connection code's bug. */
  members(): readonly NodeMember[] {
    const members = this.o.members();
    for (const m of members) {
      if (!NODE_NAME.test(m.name)) throw new SbxError('internal', `node name '${m.name}' of ${this.address} is not [A-Za-z0-9][A-Za-z0-9_.-]{0,62}`);
    }
    return members;
  }

  /** The connection code calls this when a member's state changed: waiting streams look again at once. */
  membersChanged(): void {
    for (const l of [...this.listeners]) l();
  }

  /** The node a container id of this NodeSet names, or undefined. */
  nodeOf(containerId: string): string | undefined {
    const i = containerId.indexOf(':');
    return i > 0 ? containerId.slice(0, i) : undefined;
  }

  private member(name: string): NodeMember | undefined {
    return this.members().find((m) => m.name === name);
  }

  /** @internal The online members, in the order the connection code gives them. */
  online(): NodeMember[] {
    return this.members().filter((m) => m.state === 'online');
  }

  /** @internal runtime_unavailable for a call that needs a node and finds none online. */
  noneOnline(what: string): SbxError {
    const states = this.members().map((m) => `${m.name} ${m.state}`);
    return new SbxError('runtime_unavailable', `${what} on ${this.address}: no node is online (${states.join(', ') || 'no nodes'})`, {
      details: { address: this.address, nodes: Object.fromEntries(this.members().map((m) => [m.name, m.state])) },
    });
  }

  private offline(m: NodeMember, what: string): SbxError {
    return new SbxError('runtime_unavailable', `${what}: node '${m.name}' is ${m.state}`, { details: { node: m.name, state: m.state, address: this.address } });
  }

  /** The member a container id names and its id there; not_found when it names none. */
  private route(id: string): { m: NodeMember; local: string } {
    const node = this.nodeOf(id);
    const m = node === undefined ? undefined : this.member(node);
    if (!m || id.length === node!.length + 1) {
      throw new SbxError('not_found', `container ${id}: no such container on ${this.address} (it names no node of it)`, {
        details: { id, address: this.address },
      });
    }
    return { m, local: id.slice(node!.length + 1) };
  }

  /** Runs a call about one container on its node, failing fast when the node is not online. */
  private async on<T>(id: string, what: string, call: (rt: Runtime, local: string, m: NodeMember) => Promise<T>): Promise<T> {
    const { m, local } = this.route(id);
    if (m.state !== 'online') throw this.offline(m, `${what} ${id}`);
    try {
      return await call(m.runtime, local, m);
    } catch (err) {
      throw this.reword(err, m, local);
    }
  }

  private reword(err: unknown, m: NodeMember, local?: string): unknown {
    return inNodeTerms(err, m.name, local);
  }

  // --- last known lists ----------------------------------------------------------------

  private table(node: string): Map<string, ContainerSummary> {
    let t = this.known.get(node);
    if (!t) this.known.set(node, (t = new Map()));
    return t;
  }

  private knownOf(node: string, opts: ContainerListOptions): ContainerSummary[] {
    return [...(this.known.get(node)?.values() ?? [])].filter((c) => inScope(c, opts));
  }

  /** A successful list of a node: what it covers is now exactly what it said. */
  private remember(node: string, opts: ContainerListOptions, listed: ContainerSummary[]): void {
    const t = this.table(node);
    const ids = new Set(listed.map((c) => c.id));
    for (const [id, c] of t) if (!ids.has(id) && inScope(c, opts)) t.delete(id);
    for (const c of listed) t.set(c.id, { ...c, labels: { ...c.labels } });
  }

  /** What an event says of a container the node knows; a created one is noted with what the event carries. */
  private note(node: string, e: ContainerEvent): void {
    const t = this.table(node);
    const c = t.get(e.id);
    if (e.action === 'removed') t.delete(e.id);
    else if (e.action === 'created' && !c)
      t.set(e.id, { id: e.id, name: '', image: '', status: 'created', running: false, labels: { ...e.labels }, createdAt: e.at });
    else if (c && e.action === 'started') t.set(e.id, { ...c, status: 'running', running: true });
    else if (c && e.action === 'stopped') t.set(e.id, { ...c, status: 'exited', running: false });
  }

  private async listOf(m: NodeMember, opts: ContainerListOptions): Promise<ContainerSummary[]> {
    const listed = await m.runtime.list(opts);
    this.remember(m.name, opts, listed);
    return listed;
  }

  // --- Runtime: the machine --------------------------------------------------------------

  /**
   * What every member can do (the optional ones absent = true); no member: nothing. Egress
   * (absent = false): every member enforces it, except that a node not online whose runtime has
   * not said yet (a RemoteRuntime before its node's facts came) is not held against the pool —
   * placement sends boxes with a policy only to nodes that enforce it. Checkpoint (absent =
   * false): some member can; a box's own node decides, refusing as its runtime does.
   */
  get capabilities(): RuntimeCapabilities {
    const members = this.members();
    const caps = members.map((m) => m.runtime.capabilities);
    const all = (k: Exclude<keyof RuntimeCapabilities, 'hostMounts' | 'egress'>) => caps.every((c) => c[k] ?? true);
    return {
      egress:
        caps.some((c) => c.egress === true) &&
        members.every((m) => m.runtime.capabilities.egress === true || (m.state !== 'online' && m.runtime.capabilities.egress === undefined)),
      hostMounts: caps.length > 0 && caps.every((c) => c.hostMounts),
      stopStart: all('stopStart'),
      pause: all('pause'),
      commit: all('commit'),
      publishedPorts: all('publishedPorts'),
      pidsLimit: all('pidsLimit'),
      execUser: all('execUser'),
      logStreams: all('logStreams'),
      cpuStats: all('cpuStats'),
      checkpoint: caps.some((c) => c.checkpoint === true),
    };
  }

  /** Succeeds when at least one online node answers. */
  async ping(): Promise<void> {
    const online = this.online();
    if (online.length === 0) throw this.noneOnline('ping');
    try {
      await Promise.any(online.map((m) => m.runtime.ping()));
    } catch (err) {
      const first = (err as AggregateError).errors[0] as unknown;
      throw this.reword(first, online[0]!);
    }
  }

  /** The first online node's. */
  async version(): Promise<RuntimeVersion> {
    const m = this.online()[0];
    if (!m) throw this.noneOnline('version');
    return m.runtime.version().catch((err: unknown) => Promise.reject(this.reword(err, m)));
  }

  /** The largest node's (by memory, then cores): the Manager's ceiling for one box. */
  async resources(): Promise<RuntimeResources> {
    const sizes = await Promise.all(this.members().map((m) => this.machineOf(m).catch(() => undefined)));
    const known = sizes.filter((r): r is RuntimeResources => r !== undefined);
    if (known.length === 0) throw this.noneOnline('resources');
    return known.reduce((a, b) => (b.memoryBytes > a.memoryBytes || (b.memoryBytes === a.memoryBytes && b.cpus > a.cpus) ? b : a));
  }

  private async machineOf(m: NodeMember): Promise<RuntimeResources> {
    if (m.resources) return m.resources;
    const cached = this.machines.get(m.name);
    if (cached) return cached;
    if (m.state !== 'online') throw this.offline(m, 'resources');
    const r = await m.runtime.resources();
    this.machines.set(m.name, r);
    return r;
  }

  /**
   * Every node's containers, ids prefixed, newest first. A node that is not online (or that fails
   * runtime_unavailable now) answers with its last known list; a node never listed yet adds
   * nothing (its boxes are adopted by the reconciliation after it comes online). No node
   * online: runtime_unavailable, as an unreachable engine (the Manager then changes nothing).
   */
  async list(opts: ContainerListOptions = {}): Promise<ContainerSummary[]> {
    const members = this.members();
    if (!members.some((m) => m.state === 'online')) throw this.noneOnline('list');
    const lists = await Promise.all(
      members.map(async (m) => {
        if (m.state !== 'online') return { m, list: this.knownOf(m.name, opts) };
        // A node that was away when the endpoints were declared gets them here (every reconcile
        // lists; the Pool declares again only when they change). A failure is tried again at
        // the next list, and surfaces at the next create on that node.
        void this.declare(m).catch(() => undefined);
        try {
          return { m, list: await this.listOf(m, opts) };
        } catch (err) {
          if (!isSbxError(err, 'runtime_unavailable')) throw this.reword(err, m);
          return { m, list: this.knownOf(m.name, opts) };
        }
      }),
    );
    return lists
      .flatMap(({ m, list }) => list.map((c) => ({ ...c, id: `${m.name}:${c.id}`, labels: { ...c.labels } })))
      .sort((a, b) => Date.parse(b.createdAt) - Date.parse(a.createdAt));
  }

  /**
   * Declares the endpoints to every online node that takes declarations; a node offline now gets
   * them before the next create placed on it.
   */
  async allowHostEndpoints(endpoints: HostEndpoint[]): Promise<void> {
    this.endpoints = { key: endpoints.map((e) => `${e.address}:${e.port}`).join(','), list: endpoints.map((e) => ({ ...e })) };
    await Promise.all(this.online().map((m) => this.declare(m)));
  }

  private async declare(m: NodeMember): Promise<void> {
    const want = this.endpoints;
    if (!want || !m.runtime.allowHostEndpoints) return;
    let d = this.declared.get(m.name);
    if (d?.key !== want.key) {
      const done = m.runtime.allowHostEndpoints(want.list).catch((err: unknown) => {
        if (this.declared.get(m.name)?.done === done) this.declared.delete(m.name);
        throw this.reword(err, m);
      });
      d = { key: want.key, done };
      this.declared.set(m.name, d);
    }
    await d.done;
  }

  /** Closes nothing: the members are the connection code's. Ends the NodeSet's own waits. */
  async close(): Promise<void> {
    this.closing.abort();
    this.membersChanged();
  }

  // --- Runtime: containers ---------------------------------------------------------------

  async create(spec: ContainerSpec): Promise<string> {
    const valid = validateSpec(spec);
    const { m, release } = await this.place(valid);
    try {
      await this.declare(m);
      const labels = valid.memory ? { ...valid.labels, [MEMORY_LABEL]: String(valid.memory) } : valid.labels;
      const local = await m.runtime.create(egressFor({ ...valid, ...(labels ? { labels } : {}) }, m.runtime));
      // Known at once: a node that goes offline right after still lists the box.
      this.table(m.name).set(local, {
        id: local,
        name: valid.name ?? '',
        image: valid.image,
        status: 'created',
        running: false,
        labels: { ...labels },
        createdAt: new Date().toISOString(),
      });
      return `${m.name}:${local}`;
    } catch (err) {
      throw this.reword(err, m);
    } finally {
      release();
    }
  }

  async start(id: string): Promise<void> {
    await this.on(id, 'start container', async (rt, local, m) => {
      await rt.start(local);
      this.note(m.name, { id: local, action: 'started', labels: {}, at: new Date().toISOString() });
    });
  }

  async stop(id: string, opts?: { timeoutMs?: number }): Promise<void> {
    await this.on(id, 'stop container', async (rt, local, m) => {
      await rt.stop(local, opts);
      this.note(m.name, { id: local, action: 'stopped', labels: {}, at: new Date().toISOString() });
    });
  }

  async pause(id: string): Promise<void> {
    await this.on(id, 'pause container', (rt, local) => rt.pause(local));
  }

  async unpause(id: string): Promise<void> {
    await this.on(id, 'unpause container', (rt, local) => rt.unpause(local));
  }

  /** The image is made on the container's node only: a create from it names that node (IMAGE_NODE_LABEL). */
  async commit(id: string, ref: string, opts?: { labels?: Record<string, string> }): Promise<void> {
    await this.on(id, 'commit container', (rt, local) => rt.commit(local, ref, opts));
  }

  async remove(id: string, opts?: { force?: boolean }): Promise<void> {
    await this.on(id, 'remove container', async (rt, local, m) => {
      try {
        await rt.remove(local, opts);
      } catch (err) {
        if (isSbxError(err, 'not_found')) this.table(m.name).delete(local);
        throw err;
      }
      this.table(m.name).delete(local);
    });
  }

  inspect(id: string): Promise<ContainerInfo> {
    return this.on(id, 'inspect container', async (rt, local) => ({ ...(await rt.inspect(local)), id }));
  }

  processes(id: string): Promise<ProcessInfo[]> {
    return this.on(id, 'processes of container', (rt, local) => rt.processes(local));
  }

  stats(id: string): Promise<ContainerStats> {
    return this.on(id, 'stats of container', (rt, local) => rt.stats(local));
  }

  exec(id: string, cmd: string[], opts?: ExecOptions): Promise<ExecResult> {
    return this.on(id, 'exec in container', (rt, local) => rt.exec(local, cmd, opts));
  }

  execStream(id: string, cmd: string[], opts?: ExecStreamOptions): Promise<ExecStream> {
    return this.on(id, 'exec in container', async (rt, local, m) => {
      const s = await rt.execStream(local, cmd, opts);
      const wait = () => s.wait().catch((err: unknown) => Promise.reject(this.reword(err, m, local)));
      return new Proxy(s, {
        get(target, key) {
          if (key === 'wait') return wait;
          const value = Reflect.get(target, key, target) as unknown;
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
    });
  }

  logs(id: string, opts?: LogOptions): Promise<AsyncIterable<LogChunk>> {
    return this.on(id, 'logs of container', (rt, local) => rt.logs(local, opts));
  }

  setBoxEnv(id: string, env: Record<string, string>): Promise<boolean> {
    return this.on(id, 'configure container', (rt, local) => rt.setBoxEnv(local, env));
  }

  dialPort(id: string, containerPort: number, opts?: { signal?: AbortSignal }): Promise<Duplex> {
    return this.on(id, `dial port ${containerPort} of container`, (rt, local) => rt.dialPort(local, containerPort, opts));
  }

  /** Replaces the box's egress rules on its node; not_available naming the node when its runtime enforces none. */
  async setEgress(id: string, egress: EgressSpec): Promise<void> {
    const valid = validateEgressSpec(egress);
    await this.on(id, 'set the egress policy of container', async (rt, local, m) => {
      // `all` on a node without egress: what it does already (see egressFor).
      if (valid.mode === 'all' && rt.capabilities.egress !== true) return;
      await egressOf(rt, m).setEgress(local, valid);
    });
  }

  getEgress(id: string): Promise<EgressSpec | undefined> {
    return this.on(id, 'read the egress policy of container', (rt, local, m) => egressOf(rt, m).getEgress(local));
  }

  /** Checkpoints the box on its node; not_available (checkpoint_unsupported) naming the node when its runtime cannot. */
  checkpoint(id: string, name: string): Promise<void> {
    return this.on(id, 'checkpoint container', (rt, local, m) => checkpointsOf(rt, m).checkpoint(local, name));
  }

  restoreCheckpoint(id: string, name: string): Promise<void> {
    return this.on(id, 'restore container', (rt, local, m) => checkpointsOf(rt, m).restoreCheckpoint(local, name));
  }

  checkpoints(id: string): Promise<string[]> {
    return this.on(id, 'list the checkpoints of container', (rt, local, m) => checkpointsOf(rt, m).checkpoints(local));
  }

  removeCheckpoint(id: string, name: string): Promise<void> {
    return this.on(id, 'remove a checkpoint of container', (rt, local, m) => checkpointsOf(rt, m).removeCheckpoint(local, name));
  }

  /** The node's file tool for the box; null when the node's runtime has none. */
  boxTool(id: string): Promise<string | null> {
    return this.on(id, 'file tool of container', async (rt, local) => (rt.boxTool ? rt.boxTool(local) : null));
  }

  // --- placement -----------------------------------------------------------------------

  /**
   * The node a create goes to, with the create counted in flight there until `release`. One
   * placement at a time (each lists the candidates, in parallel), so concurrent creates never
   * overfill a node.
   */
  private place(spec: ContainerSpec): Promise<{ m: NodeMember; release: () => void }> {
    const placed = this.placing.then(() => this.choose(spec, { memory: spec.memory ?? 0 }));
    this.placing = placed.catch(() => undefined);
    return placed;
  }

  private async choose(spec: ContainerSpec, need: { memory: number }): Promise<{ m: NodeMember; release: () => void }> {
    const volumeHome = await this.volumeMemberOf(spec);
    const imageHome = this.imageMemberOf(spec);
    if (volumeHome && imageHome && volumeHome !== imageHome) {
      throw new SbxError('conflict', `the box's workspace volume is on node '${volumeHome.name}', its image ${spec.image} on node '${imageHome.name}' only`, {
        details: { address: this.address, nodes: { volume: volumeHome.name, image: imageHome.name } },
      });
    }
    const home = volumeHome ?? imageHome;
    if (home && home.state !== 'online') {
      throw this.offline(home, volumeHome ? `create a box mounting workspace volume ${spec.binds![0]!.hostPath}` : `create a box from image ${spec.image}`);
    }
    const candidates = home ? [home] : this.members();
    const why = new Map<string, string>();
    const fits = await Promise.all(
      candidates.map(async (m) => {
        if (m.state !== 'online') return void why.set(m.name, m.state);
        // A box whose workspace or image is on one node goes there even while it drains: it has nowhere else to run.
        if (m.draining && !home) return void why.set(m.name, 'draining');
        // Never created open: a runtime without egress would ignore the policy (`all` asks nothing of it).
        if (spec.egress && spec.egress.mode !== 'all' && m.runtime.capabilities.egress !== true) return void why.set(m.name, NO_EGRESS);
        let load;
        try {
          load = await this.loadOf(m, need.memory > 0);
        } catch (err) {
          if (!isSbxError(err, 'runtime_unavailable')) throw this.reword(err, m);
          return void why.set(m.name, 'unreachable');
        }
        if (m.maxBoxes !== undefined && load.boxes >= m.maxBoxes) return void why.set(m.name, `full (${load.boxes} of ${m.maxBoxes} boxes)`);
        if (need.memory > 0 && load.freeMemory < need.memory) {
          return void why.set(m.name, `not enough memory (${load.freeMemory} bytes free, ${need.memory} asked)`);
        }
        return { m, boxes: load.boxes };
      }),
    );
    const best = fits
      .filter((f): f is { m: NodeMember; boxes: number } => f !== undefined)
      .sort((a, b) => a.boxes - b.boxes || (a.m.name < b.m.name ? -1 : a.m.name > b.m.name ? 1 : 0))[0];
    // A node away that enforces egress (or has not said) may take the box once back: then it is not for good.
    const egressAway = candidates.some((m) => m.state !== 'online' && m.runtime.capabilities.egress !== false);
    if (!best) throw this.noFit(why, home, egressAway);
    const flight = this.inFlight.get(best.m.name) ?? { count: 0, memory: 0 };
    flight.count++;
    flight.memory += need.memory;
    this.inFlight.set(best.m.name, flight);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      flight.count--;
      flight.memory -= need.memory;
    };
    return { m: best.m, release };
  }

  /** sbx's containers on the node (a fresh list, plus creates in flight) and its free memory. */
  private async loadOf(m: NodeMember, withMemory: boolean): Promise<{ boxes: number; freeMemory: number }> {
    const [listed, machine] = await Promise.all([this.listOf(m, { labels: MANAGED }), withMemory ? this.machineOf(m) : undefined]);
    const flight = this.inFlight.get(m.name) ?? { count: 0, memory: 0 };
    const used = listed.filter((c) => c.running).reduce((n, c) => n + (Number(c.labels[MEMORY_LABEL]) || 0), 0);
    return { boxes: listed.length + flight.count, freeMemory: machine ? machine.memoryBytes - used - flight.memory : Infinity };
  }

  private noFit(why: Map<string, string>, home: NodeMember | undefined, egressAway: boolean): SbxError {
    const reasons = [...why].map(([node, reason]) => `${node}: ${reason}`).join('; ') || 'the pool has no nodes';
    const states = [...why.values()];
    const nodes = Object.fromEntries(why);
    const away = (s: string) => s === 'offline' || s === 'connecting' || s === 'unreachable';
    if (states.includes(NO_EGRESS) && states.every((s) => s === NO_EGRESS || away(s)) && !egressAway) {
      return new SbxError('not_available', `no node of ${this.address} that is online enforces egress policies, which the box has (${reasons})`, {
        details: { address: this.address, nodes, reason: 'no_egress' },
      });
    }
    // A node that enforces no egress is no place for the box at all: what remains is only away.
    if (!home && !states.some((s) => !away(s) && s !== NO_EGRESS)) {
      return new SbxError('runtime_unavailable', `no node of ${this.address} is online to take the box (${reasons})`, {
        details: { address: this.address, nodes },
      });
    }
    const where = home ? `node '${home.name}', which holds the box's workspace or image,` : `no node of ${this.address}`;
    return new SbxError('limit_exceeded', `${where} can take the box now (${reasons})`, {
      details: { address: this.address, nodes, ...(home ? { node: home.name } : {}) },
    });
  }

  /** The node the spec's image is on (IMAGE_NODE_LABEL), or undefined; a node this set does not have: not_found. */
  private imageMemberOf(spec: ContainerSpec): NodeMember | undefined {
    const name = spec.labels?.[IMAGE_NODE_LABEL];
    if (name === undefined) return undefined;
    const m = this.member(name);
    if (!m) throw new SbxError('not_found', `image ${spec.image} is on node '${name}', which is not a node of ${this.address}`, { details: { node: name } });
    return m;
  }

  // --- workspace volumes ---------------------------------------------------------------

  /** The node holding the workspace volume the spec mounts, or undefined (no volumes, no binds). */
  private async volumeMemberOf(spec: ContainerSpec): Promise<NodeMember | undefined> {
    const hostPath = this.o.workspaceVolumes ? spec.binds?.[0]?.hostPath : undefined;
    return hostPath === undefined ? undefined : this.homeOf(hostPath);
  }

  /** The node holding a volume: remembered, else learned from the online nodes' volume lists. */
  private async homeOf(hostPath: string): Promise<NodeMember> {
    let name = this.volumeHome.get(hostPath);
    if (name === undefined) {
      await this.volumes();
      name = this.volumeHome.get(hostPath);
    }
    const m = name === undefined ? undefined : this.member(name);
    if (m) return m;
    const away = this.members().filter((x) => x.state !== 'online');
    if (away.length > 0) {
      const names = away.map((x) => x.name);
      throw new SbxError(
        'runtime_unavailable',
        `workspace volume ${hostPath} is on none of the online nodes of ${this.address}; not online: ${names.join(', ')}`,
        {
          details: { address: this.address, hostPath, node: names[0], nodes: names },
        },
      );
    }
    throw new SbxError('not_found', `workspace volume ${hostPath}: no node of ${this.address} holds it`, { details: { address: this.address, hostPath } });
  }

  /** Every online node's volumes (remembering where each is). */
  private async volumes(): Promise<{ hostPath: string; labels: Record<string, string> }[]> {
    const lists = await Promise.all(
      this.online().map(async (m) => {
        const vols = (await m.runtime.listVolumes?.().catch((err: unknown) => Promise.reject(this.reword(err, m)))) ?? [];
        for (const v of vols) this.volumeHome.set(v.hostPath, m.name);
        return vols;
      }),
    );
    return lists.flat();
  }

  private async createVolume(hostPath: string, opts?: WorkspaceVolumeOptions): Promise<string> {
    let m = this.member(this.volumeHome.get(hostPath) ?? '');
    let release = () => undefined as void;
    if (!m) {
      // The same placement as a box's, without memory: a workspace is storage.
      ({ m, release } = await this.place({ image: 'workspace-volume' }));
    }
    try {
      if (m.state !== 'online') throw this.offline(m, `create workspace volume ${hostPath}`);
      const made = await this.volumeRuntime(m).createWorkspaceVolume(hostPath, opts);
      this.volumeHome.set(hostPath, m.name);
      return made;
    } catch (err) {
      throw this.reword(err, m);
    } finally {
      release();
    }
  }

  private async removeVolume(hostPath: string): Promise<void> {
    const m = await this.homeOf(hostPath);
    if (m.state !== 'online') throw this.offline(m, `remove workspace volume ${hostPath}`);
    try {
      await this.volumeRuntime(m).removeWorkspaceVolume(hostPath);
    } catch (err) {
      if (!isSbxError(err, 'not_found')) throw this.reword(err, m);
      this.volumeHome.delete(hostPath);
      throw this.reword(err, m);
    }
    this.volumeHome.delete(hostPath);
  }

  private async startHelper(hostPath: string, opts: WorkspaceHelperOptions): Promise<WorkspaceHelper> {
    const m = await this.homeOf(hostPath);
    if (m.state !== 'online') throw this.offline(m, `start the file helper of workspace volume ${hostPath}`);
    try {
      const h = await this.volumeRuntime(m).startWorkspaceHelper(hostPath, opts);
      return { ...h, id: `${m.name}:${h.id}` };
    } catch (err) {
      throw this.reword(err, m);
    }
  }

  private volumeRuntime(m: NodeMember): Required<Pick<Runtime, 'createWorkspaceVolume' | 'removeWorkspaceVolume' | 'startWorkspaceHelper'>> {
    const rt = m.runtime;
    if (!rt.createWorkspaceVolume || !rt.removeWorkspaceVolume || !rt.startWorkspaceHelper) {
      throw new SbxError('not_available', `node '${m.name}' keeps no workspace volumes`, { details: { node: m.name } });
    }
    return rt as Required<Pick<Runtime, 'createWorkspaceVolume' | 'removeWorkspaceVolume' | 'startWorkspaceHelper'>>;
  }

  // --- streams -------------------------------------------------------------------------

  /**
   * Every node's events, ids prefixed. A node's stream that breaks (or a node not online) is
   * followed again once the node is online; then what changed there meanwhile is emitted from a
   * fresh list against the last known one. Throws runtime_unavailable when no node is online,
   * and, after those events, when a node comes back whose engine stopped boxes meanwhile (it
   * restarted) or that was never listed and holds containers: to the Manager the pool's engine
   * went away and came back, so it reconciles the pool and starts the boxes stopped behind sbx,
   * exactly as after a one-engine pool's restart. A node that was only unreachable (a partition)
   * does not end it.
   */
  events(opts: { labels?: Record<string, string>; signal: AbortSignal }): AsyncIterable<ContainerEvent> {
    const labels = opts.labels ?? {};
    return this.merge<ContainerEvent>(opts.signal, {
      endWhenNoneOnline: true,
      open: (m, signal) => m.runtime.events({ labels, signal }),
      onItem: (m, e) => {
        this.note(m.name, e);
        return { ...e, id: `${m.name}:${e.id}`, labels: { ...e.labels } };
      },
      catchUp: (m, push) => this.catchUp(m, labels, push),
    });
  }

  /**
   * A node back online: its changes since the last known list, as the events they were; the
   * error to end the merged stream with when the pool must be reconciled (see `events`).
   */
  private async catchUp(m: NodeMember, labels: Record<string, string>, push: (e: ContainerEvent) => void): Promise<SbxError | undefined> {
    const had = this.known.has(m.name);
    const before = new Map(this.knownOf(m.name, { labels }).map((c) => [c.id, c]));
    const now = await this.listOf(m, { labels });
    const back = (why: string) =>
      new SbxError('runtime_unavailable', `node '${m.name}' of ${this.address} is back and ${why}: the pool is reconciled again`, {
        details: { node: m.name, address: this.address, reason: 'node_returned' },
      });
    if (!had) return now.length > 0 ? back(`was never listed before (${now.length} container(s))`) : undefined;
    let stopped = 0;
    const at = new Date().toISOString();
    const event = (c: ContainerSummary, action: ContainerEvent['action']) => push({ id: `${m.name}:${c.id}`, action, labels: { ...c.labels }, at });
    for (const c of now) {
      const old = before.get(c.id);
      before.delete(c.id);
      if (!old) event(c, 'created');
      if (c.running && !old?.running) event(c, 'started');
      else if (!c.running && old?.running) {
        event(c, 'stopped');
        stopped++;
      }
    }
    for (const c of before.values()) event(c, 'removed');
    return stopped > 0 ? back(`its engine stopped ${stopped} container(s) meanwhile`) : undefined;
  }

  /** Waits for a change of the members (membersChanged), the recheck interval or the abort. */
  private changed(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.listeners.delete(done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, this.o.recheckMs ?? DEFAULT_RECHECK_MS);
      timer.unref();
      this.listeners.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  /** One stream out of every node's, each followed again when it breaks. */
  private async *merge<T>(
    outer: AbortSignal,
    o: {
      endWhenNoneOnline: boolean;
      open: (m: NodeMember, signal: AbortSignal) => AsyncIterable<T> | undefined;
      onItem: (m: NodeMember, item: T) => T;
      catchUp?: (m: NodeMember, push: (item: T) => void) => Promise<SbxError | undefined>;
    },
  ): AsyncGenerator<T> {
    if (outer.aborted) return;
    if (o.endWhenNoneOnline && this.online().length === 0) throw this.noneOnline('events');
    const stop = new AbortController();
    const signal = AbortSignal.any([outer, stop.signal, this.closing.signal]);
    const queue: T[] = [];
    let failure: SbxError | undefined;
    let wake: (() => void) | undefined;
    const poke = () => wake?.();
    const push = (item: T) => {
      queue.push(item);
      poke();
    };
    const loops = new Map<string, Promise<void>>();
    const end = (err: SbxError) => {
      failure ??= err;
      poke();
    };
    const look = () => {
      for (const m of this.members()) {
        // A node taken out of the members and put back later is followed again.
        const gone = () => loops.delete(m.name);
        if (!loops.has(m.name)) loops.set(m.name, this.follow(m.name, signal, o, { push, broke: look, end, gone }));
      }
      if (o.endWhenNoneOnline && this.online().length === 0) failure ??= this.noneOnline('events');
      poke();
    };
    this.listeners.add(look);
    signal.addEventListener('abort', poke, { once: true });
    const recheck = setInterval(look, this.o.recheckMs ?? DEFAULT_RECHECK_MS);
    recheck.unref();
    try {
      look();
      for (;;) {
        while (queue.length > 0) yield queue.shift()!;
        if (signal.aborted) return;
        if (failure) throw failure;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
    } finally {
      clearInterval(recheck);
      this.listeners.delete(look);
      signal.removeEventListener('abort', poke);
      stop.abort();
      await Promise.allSettled(loops.values());
    }
  }

  /** Follows one node's stream while it is a member: again after each break, once it is online. */
  private async follow<T>(
    name: string,
    signal: AbortSignal,
    o: {
      open: (m: NodeMember, signal: AbortSignal) => AsyncIterable<T> | undefined;
      onItem: (m: NodeMember, item: T) => T;
      catchUp?: (m: NodeMember, push: (item: T) => void) => Promise<SbxError | undefined>;
    },
    to: { push: (item: T) => void; broke: () => void; end: (err: SbxError) => void; gone: () => void },
  ): Promise<void> {
    let behind = false;
    while (!signal.aborted) {
      const m = this.member(name);
      if (!m) return void to.gone();
      if (m.state === 'online') {
        const stream = o.open(m, signal);
        if (!stream) return;
        try {
          const it = stream[Symbol.asyncIterator]();
          // Asked for before the catch-up list: what changes while it runs is not missed (at worst told twice).
          let next = it.next();
          next.catch(() => undefined);
          const reconcile = behind && o.catchUp ? await o.catchUp(m, to.push) : undefined;
          if (reconcile) return to.end(reconcile);
          behind = false;
          for (let r = await next; !r.done; r = await next) {
            to.push(o.onItem(m, r.value));
            next = it.next();
          }
        } catch {
          /* the node went away: followed again once it is online */
        }
        if (signal.aborted) return;
        to.broke();
      }
      behind = true;
      await this.changed(signal);
    }
  }
}

/**
 * Images across the nodes: a pull, build or remove goes to every online node (an offline node
 * misses it: pull again once it is back); `exists` is true when every online node has the image;
 * `list` is each image once (by id), from every online node.
 */
class NodeImages implements Images {
  constructor(private readonly set: NodeSet) {}

  private online(what: string): NodeMember[] {
    const online = this.set.online();
    if (online.length === 0) throw this.set.noneOnline(what);
    return online;
  }

  async exists(ref: string): Promise<boolean> {
    const answers = await Promise.all(this.online(`image ${ref}`).map((m) => m.runtime.images.exists(ref)));
    return answers.every(Boolean);
  }

  async *pull(ref: string, opts?: { auth?: RegistryAuth; signal?: AbortSignal }): AsyncGenerator<PullProgress> {
    for (const m of this.online(`pull ${ref}`)) {
      try {
        for await (const p of m.runtime.images.pull(ref, opts)) yield p;
      } catch (err) {
        throw inNodeTerms(err, m.name);
      }
    }
  }

  async list(): Promise<ImageInfo[]> {
    const lists = await Promise.all(this.online('images').map((m) => m.runtime.images.list()));
    const byId = new Map<string, ImageInfo>();
    for (const img of lists.flat()) {
      const seen = byId.get(img.id);
      byId.set(img.id, seen ? { ...seen, tags: [...new Set([...seen.tags, ...img.tags])] } : { ...img, tags: [...img.tags] });
    }
    return [...byId.values()];
  }

  /** Removed from every online node that has it; not_found only when none had it. */
  async remove(ref: string, opts?: { force?: boolean }): Promise<void> {
    const members = this.online(`remove image ${ref}`);
    const results = await Promise.allSettled(members.map((m) => m.runtime.images.remove(ref, opts)));
    const failed = results.flatMap((r, i) => (r.status === 'rejected' ? [inNodeTerms(r.reason, members[i]!.name)] : []));
    const real = failed.find((err) => !isSbxError(err, 'not_found'));
    if (real) throw real;
    if (failed.length === results.length) throw failed[0];
  }

  /** Built on every online node, one after the other (the context is read once, kept in memory). */
  async *build(context: Readable, tag: string, opts?: { labels?: Record<string, string> }): AsyncGenerator<string> {
    const members = this.online(`build ${tag}`);
    const chunks: Buffer[] = [];
    for await (const c of context) chunks.push(Buffer.from(c as Buffer));
    for (const m of members) {
      try {
        for await (const line of m.runtime.images.build(Readable.from([Buffer.concat(chunks)]), tag, opts)) yield line;
      } catch (err) {
        throw inNodeTerms(err, m.name);
      }
    }
  }
}

/**
 * A spec as a member takes it: a node that enforces no egress gets none (only `all` is placed
 * there, which asks nothing of it, and a node from before egress policies refuses the field).
 */
function egressFor(spec: ContainerSpec, rt: Runtime): ContainerSpec {
  if (!spec.egress || rt.capabilities.egress === true) return spec;
  const { egress: _, ...rest } = spec;
  return rest;
}

/** The member's runtime as one that enforces egress; not_available naming the node when it does not. */
function egressOf(rt: Runtime, m: NodeMember): Required<Pick<Runtime, 'setEgress' | 'getEgress'>> {
  if (rt.capabilities.egress !== true || !rt.setEgress || !rt.getEgress) {
    throw new SbxError('not_available', `node '${m.name}' enforces no egress policy`, { details: { node: m.name, reason: 'no_egress' } });
  }
  return rt as Required<Pick<Runtime, 'setEgress' | 'getEgress'>>;
}

/** The member's runtime as one that checkpoints; not_available naming the node when it cannot. */
function checkpointsOf(rt: Runtime, m: NodeMember): CheckpointCalls {
  const calls = checkpointCallsOf(rt);
  if (!calls) {
    throw new SbxError('not_available', `node '${m.name}' cannot checkpoint a box to release its memory`, {
      details: { node: m.name, reason: 'checkpoint_unsupported' },
    });
  }
  return calls;
}

/**
 * A node's error in the NodeSet's words: the node's container id (and its 12-digit short form)
 * as the NodeSet's `<node>:<id>`, so the layers above find the id they know in it
 * (src/sandbox/box-errors.ts), the node named in the message and in `details.node`.
 */
function inNodeTerms(err: unknown, node: string, local?: string): unknown {
  if (!(err instanceof SbxError)) return err;
  const ids = local === undefined ? [] : /^[0-9a-f]{64}$/.test(local) ? [local, local.slice(0, 12)] : [local];
  const bare = ids.length > 0 ? new RegExp(`(?<![\\w:.-])(?:${ids.map(escapeRegExp).join('|')})(?![\\w.-])`, 'g') : undefined;
  const text = (s: string) => (bare ? s.replace(bare, `${node}:${local}`) : s);
  let message = text(err.message);
  if (!message.includes(`'${node}'`) && !message.includes(`${node}:`)) message = `node '${node}': ${message}`;
  const details = Object.fromEntries(Object.entries(err.details ?? {}).map(([k, v]) => [k, typeof v === 'string' ? text(v) : v]));
  return new SbxError(err.code, message, { cause: err, details: { ...details, node } });
}

/** Whether a container is one a list with these options covers: every label pair ('' = present), running only with `all: false`. */
function inScope(c: ContainerSummary, opts: ContainerListOptions): boolean {
  if (opts.all === false && !c.running) return false;
  return Object.entries(opts.labels ?? {}).every(([k, v]) => Object.hasOwn(c.labels, k) && (v === '' || c.labels[k] === v));
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
