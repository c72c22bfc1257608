/**
 * `sbx node`'s service: the node machine's own Runtime (a DockerRuntime on its local engine),
 * served to a Manager (routes.ts puts it on the wire) with the node's checks in front of it
 * (docs/nodes.md): only containers this node created are reachable (label `sbx.node=<name>`;
 * anything else is not_found, never revealed), creates pass the node policy (policy.ts),
 * workspaces are the node's own volumes (volumes.ts), and its boxes' heartbeats go through the
 * node's relay (heartbeat-relay.ts).
 */
import { createHash } from 'node:crypto';
import { readFile, statfs } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import type { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import * as tar from 'tar-stream';
import { SbxError, isSbxError } from '../errors.js';
import { validateEgressGrammar } from '../runtime/egress-spec.js';
import { validateSpec } from '../runtime/spec.js';
import { checkpointCallsOf } from '../runtime/types.js';
import type {
  CheckpointCalls,
  BoxHeartbeat,
  ContainerEvent,
  ContainerInfo,
  ContainerListOptions,
  ContainerSpec,
  ContainerStats,
  ContainerSummary,
  EgressSpec,
  ExecStream,
  ExecStreamOptions,
  ImageInfo,
  LogChunk,
  LogOptions,
  ProcessInfo,
  PullProgress,
  RegistryAuth,
  Runtime,
  RuntimeResources,
  RuntimeVersion,
  WorkspaceHelper,
  WorkspaceHelperOptions,
  WorkspaceVolumeOptions,
} from '../runtime/types.js';
import { HeartbeatRelay } from './heartbeat-relay.js';
import { NODE_LABEL, nodeSpec } from './policy.js';
import { NodeVolumes } from './volumes.js';
import type { NodeFacts, NodeVolume } from '../runtime/remote/node-types.js';

export interface NodeServiceOptions {
  /** The node's name: the `sbx.node` label of its containers, and the name in its messages. */
  name: string;
  /** Where the node keeps its workspace volumes. */
  dataDir: string;
  /** Where sbx-agent-linux-<arch> is (the workspace helper's image is built from it); default `$SBX_AGENT_DIR`, else the package's `.build/agent`. */
  agentDir?: string;
}

/** The workspace helper's paths: the agent binary the image holds, the volume's mount. */
const HELPER_TOOL = '/sbx-agent';
const HELPER_ROOT = '/workspace';
/** Containers whose ownership was checked, at most (then the cache starts over). */
const MAX_CHECKED = 10_000;

/** What the client may do to a running exec besides its stream (routes.ts registers it). */
export interface ExecControl {
  cancel(): Promise<void>;
  signal(name: string): Promise<void>;
}

export class NodeService {
  readonly name: string;
  readonly volumes: NodeVolumes;
  /** Full container ids this node created (checked once each). */
  private readonly managed = new Set<string>();
  private readonly agentDir: string;
  private readonly dataDir: string;
  private relay: Promise<{ relay: HeartbeatRelay; url: string } | undefined> | undefined;
  private helperImage: Promise<string> | undefined;
  private closed = false;
  /** The execs running now, by the handle their `started` gave the client: its out-of-band kill and signal. */
  readonly execs = new Map<string, ExecControl>();

  constructor(
    readonly runtime: Runtime,
    opts: NodeServiceOptions,
  ) {
    this.name = opts.name;
    this.dataDir = opts.dataDir;
    this.volumes = new NodeVolumes(opts.dataDir);
    this.agentDir = opts.agentDir ?? defaultAgentDir();
  }

  /** Kills a running exec; one that already ended is fine (a cancel races its end). */
  async execCancel(handle: string): Promise<void> {
    await this.execs.get(handle)?.cancel();
  }

  /** Sends one signal to a running exec's process. */
  async execSignal(handle: string, name: string): Promise<void> {
    const control = this.execs.get(handle);
    if (!control) throw new SbxError('not_found', 'the process has ended', { details: { reason: 'exec_ended' } });
    await control.signal(name);
  }

  private notFound(id: string): SbxError {
    return new SbxError('not_found', `container ${id} not found on node ${this.name}`, { details: { id } });
  }

  /** Throws not_found unless `id` is a container this node created; never says which other containers exist. */
  async check(id: string): Promise<void> {
    if (this.managed.has(id)) return;
    let info: ContainerInfo;
    try {
      info = await this.runtime.inspect(id);
    } catch (err) {
      if (isSbxError(err, 'not_found')) throw this.notFound(id);
      throw err;
    }
    if (info.labels[NODE_LABEL] !== this.name) throw this.notFound(id);
    // Only a full id is remembered: a name or a prefix may name another container later.
    if (info.id === id) this.remember(id);
  }

  private remember(id: string): void {
    if (this.managed.size >= MAX_CHECKED) this.managed.clear();
    this.managed.add(id);
  }

  ping(): Promise<void> {
    return this.runtime.ping();
  }

  version(): Promise<RuntimeVersion> {
    return this.runtime.version();
  }

  resources(): Promise<RuntimeResources> {
    return this.runtime.resources();
  }

  async facts(): Promise<NodeFacts> {
    const [v, r, oci, fs] = await Promise.all([
      this.runtime.version(),
      this.runtime.resources(),
      this.runtime.ociRuntimes?.() ?? Promise.resolve([]),
      statfs(this.dataDir).catch(() => statfs(dirname(this.dataDir))),
    ]);
    return {
      name: this.name,
      engine: v.engine,
      engineVersion: v.version,
      os: v.os,
      arch: v.arch,
      cpus: r.cpus,
      memoryBytes: r.memoryBytes,
      ociRuntimes: oci,
      freeDiskBytes: fs.bavail * fs.bsize,
      egress: this.enforcesEgress(),
      checkpoint: checkpointCallsOf(this.runtime) !== undefined,
    };
  }

  /**
   * A spec as this node's runtime takes its egress: never a box whose policy would be ignored (a
   * runtime without egress would create it open), but `all` asks nothing such a runtime does not
   * do already: it goes without, as on a DockerRuntime whose engine lacks the enforcer's image.
   */
  private egressFor(spec: ContainerSpec): ContainerSpec {
    if (!spec.egress) return spec;
    // The Manager's bytes: every entry checked, beyond the shape the spec schema saw.
    validateEgressGrammar(spec.egress);
    if (this.enforcesEgress()) return spec;
    if (spec.egress.mode !== 'all') throw this.noEgress(`create a box with egress '${spec.egress.mode}'`);
    const { egress: _, ...rest } = spec;
    return rest;
  }

  /** Whether the node's runtime enforces egress policies (what `facts` tells the Manager). */
  private enforcesEgress(): boolean {
    return this.runtime.capabilities.egress === true && typeof this.runtime.setEgress === 'function';
  }

  private noEgress(what: string): SbxError {
    return new SbxError('not_available', `${what}: node ${this.name}'s runtime enforces no egress policy`, { details: { reason: 'no_egress' } });
  }

  async create(spec: ContainerSpec): Promise<string> {
    const valid = await nodeSpec(this.egressFor(validateSpec(spec)), this.name, (p) => this.volumes.dataDir(p));
    const env = valid.env ? await this.boxEnv(valid.env) : undefined;
    const id = await this.runtime.create(env ? { ...valid, env } : valid);
    this.remember(id);
    return id;
  }

  async start(id: string): Promise<void> {
    await this.check(id);
    await this.runtime.start(id);
  }

  async stop(id: string, opts?: { timeoutMs?: number }): Promise<void> {
    await this.check(id);
    await this.runtime.stop(id, opts);
  }

  async pause(id: string): Promise<void> {
    await this.check(id);
    await this.runtime.pause(id);
  }

  async unpause(id: string): Promise<void> {
    await this.check(id);
    await this.runtime.unpause(id);
  }

  async commit(id: string, ref: string, opts?: { labels?: Record<string, string> }): Promise<void> {
    await this.check(id);
    await this.runtime.commit(id, ref, opts);
  }

  async remove(id: string, opts?: { force?: boolean }): Promise<void> {
    await this.check(id);
    await this.runtime.remove(id, opts);
    this.managed.delete(id);
  }

  async inspect(id: string): Promise<ContainerInfo> {
    await this.check(id);
    return this.runtime.inspect(id);
  }

  list(opts: ContainerListOptions = {}): Promise<ContainerSummary[]> {
    return this.runtime.list({ ...opts, labels: { ...(opts.labels ?? {}), [NODE_LABEL]: this.name } });
  }

  async processes(id: string): Promise<ProcessInfo[]> {
    await this.check(id);
    return this.runtime.processes(id);
  }

  async stats(id: string): Promise<ContainerStats> {
    await this.check(id);
    return this.runtime.stats(id);
  }

  events(opts: { labels?: Record<string, string>; signal: AbortSignal }): AsyncIterable<ContainerEvent> {
    return this.runtime.events({ labels: { ...(opts.labels ?? {}), [NODE_LABEL]: this.name }, signal: opts.signal });
  }

  async execStream(id: string, cmd: string[], opts: ExecStreamOptions): Promise<ExecStream> {
    await this.check(id);
    return this.runtime.execStream(id, cmd, opts);
  }

  async logs(id: string, opts: LogOptions): Promise<AsyncIterable<LogChunk>> {
    await this.check(id);
    return this.runtime.logs(id, opts);
  }

  async setBoxEnv(id: string, env: Record<string, string>): Promise<boolean> {
    await this.check(id);
    return this.runtime.setBoxEnv(id, await this.boxEnv(env));
  }

  /**
   * Replaces a box's egress rules. The spec is the Manager's bytes: its shape is checked here
   * (bounded, invalid_argument naming the field) before anything else; then, as for every call
   * about a box, that this node created it; then that the runtime enforces egress at all.
   */
  async setEgress(id: string, egress: unknown): Promise<void> {
    const valid = validateEgressGrammar(egress);
    await this.check(id);
    if (!this.enforcesEgress()) {
      // What such a runtime does already (see egressFor).
      if (valid.mode === 'all') return;
      throw this.noEgress(`set egress '${valid.mode}' on container ${id}`);
    }
    await this.runtime.setEgress!(id, valid);
  }

  /** The egress rules in force for a box (undefined: none recorded). */
  async getEgress(id: string): Promise<EgressSpec | undefined> {
    await this.check(id);
    if (!this.enforcesEgress() || !this.runtime.getEgress) throw this.noEgress(`read the egress policy of container ${id}`);
    return this.runtime.getEgress(id);
  }

  /** The checkpoint calls for container `id` of this node; not_available from a runtime without them. */
  private async checkpointsOf(id: string): Promise<CheckpointCalls> {
    await this.check(id);
    const cp = checkpointCallsOf(this.runtime);
    if (!cp) {
      throw new SbxError('not_available', `node ${this.name}'s runtime cannot checkpoint container ${id}`, {
        details: { id, reason: 'checkpoint_unsupported' },
      });
    }
    return cp;
  }

  async checkpoint(id: string, name: string): Promise<void> {
    await (await this.checkpointsOf(id)).checkpoint(id, name);
  }

  async restoreCheckpoint(id: string, name: string): Promise<void> {
    await (await this.checkpointsOf(id)).restoreCheckpoint(id, name);
  }

  async listCheckpoints(id: string): Promise<string[]> {
    return (await this.checkpointsOf(id)).checkpoints(id);
  }

  async removeCheckpoint(id: string, name: string): Promise<void> {
    await (await this.checkpointsOf(id)).removeCheckpoint(id, name);
  }

  async boxTool(id: string): Promise<string | null> {
    await this.check(id);
    if (!this.runtime.boxTool) throw new SbxError('not_available', `node ${this.name}'s runtime has no file tool`);
    return this.runtime.boxTool(id);
  }

  /** A connection to a port of a box, routed by the local runtime: the caller never names an address. */
  async dialPort(id: string, port: number, opts: { signal?: AbortSignal } = {}): Promise<Duplex> {
    await this.check(id);
    return this.runtime.dialPort(id, port, opts);
  }

  imageExists(ref: string): Promise<boolean> {
    return this.runtime.images.exists(ref);
  }

  imageList(): Promise<ImageInfo[]> {
    return this.runtime.images.list();
  }

  imageRemove(ref: string, opts?: { force?: boolean }): Promise<void> {
    return this.runtime.images.remove(ref, opts);
  }

  pull(ref: string, opts: { auth?: RegistryAuth; signal?: AbortSignal }): AsyncIterable<PullProgress> {
    return this.runtime.images.pull(ref, opts);
  }

  /**
   * Refused: a build's RUN steps run on the engine's default bridge, outside the box network and
   * its firewall, and its tag could replace any image of the machine. Images come to a node by pull.
   */
  build(_context: Readable, tag: string, _opts: { labels?: Record<string, string> }): AsyncIterable<string> {
    throw new SbxError('forbidden', `build ${tag}: a node builds no images for its Manager (a build runs outside the box network); pull them`, {
      details: { reason: 'node_policy' },
    });
  }

  createWorkspaceVolume(hostPath: string, opts?: WorkspaceVolumeOptions): Promise<string> {
    return this.volumes.create(hostPath, opts);
  }

  removeWorkspaceVolume(hostPath: string): Promise<void> {
    return this.volumes.remove(hostPath);
  }

  listVolumes(): Promise<NodeVolume[]> {
    return this.volumes.list();
  }

  /**
   * A container holding the agent image alone and the volume at /workspace, for the workspace's
   * file I/O (`<tool> fs …` as uid:gid through execStream); removed with `remove`. The agent runs
   * as PID 1 (injected by the local runtime) with `sbx-agent init` as its idle command.
   */
  async startWorkspaceHelper(hostPath: string, opts: WorkspaceHelperOptions): Promise<WorkspaceHelper> {
    const data = await this.volumes.ownedDataDir(hostPath, opts);
    const image = await this.agentImage();
    const id = await this.runtime.create({
      image,
      cmd: ['init'],
      user: `${opts.uid}:${opts.gid}`,
      workDir: HELPER_ROOT,
      labels: { ...opts.labels, [NODE_LABEL]: this.name },
      binds: [{ hostPath: data, containerPath: HELPER_ROOT }],
      memory: 512 * 1024 * 1024,
      pidsLimit: 256,
      // What the agent needs to run each operation as uid:gid and kill it; nothing else.
      security: { capDrop: ['ALL'], capAdd: ['KILL', 'SETUID', 'SETGID'], noNewPrivileges: true, readOnlyRootfs: true },
    });
    this.remember(id);
    try {
      await this.runtime.start(id);
    } catch (err) {
      await this.runtime.remove(id, { force: true }).catch(() => undefined);
      throw err;
    }
    return { id, tool: HELPER_TOOL, root: HELPER_ROOT };
  }

  /** The helper's image: FROM scratch and this node's agent binary, tagged by the binary's hash, built when missing. */
  private agentImage(): Promise<string> {
    this.helperImage ??= this.buildAgentImage().catch((err: unknown) => {
      this.helperImage = undefined;
      throw err;
    });
    return this.helperImage;
  }

  private async buildAgentImage(): Promise<string> {
    const arch = { x64: 'amd64', arm64: 'arm64' }[process.arch as string];
    const path = join(this.agentDir, `sbx-agent-linux-${arch ?? process.arch}`);
    let binary: Buffer;
    try {
      binary = await readFile(path);
    } catch (err) {
      throw new SbxError('not_available', `workspace file I/O on node ${this.name} needs the agent binary ${path} (scripts/agent.sh builds it)`, {
        cause: err,
        details: { reason: 'no_agent_binary' },
      });
    }
    const tag = `sbx-agent:node-${createHash('sha256').update(binary).digest('hex').slice(0, 12)}`;
    if (await this.runtime.images.exists(tag)) return tag;
    const pack = tar.pack();
    pack.entry({ name: 'Dockerfile' }, 'FROM scratch\nCOPY sbx-agent /sbx-agent\nENTRYPOINT ["/sbx-agent"]\nCMD ["version"]\n');
    pack.entry({ name: 'sbx-agent', mode: 0o755 }, binary);
    pack.finalize();
    for await (const _ of this.runtime.images.build(Readable.from(pack), tag, { labels: { 'sbx.managed-by': 'sbx' } })) void _;
    return tag;
  }

  /**
   * A box's env as the node hands it over: `SBX_API_URL` (the Manager's, which a box here cannot
   * reach) becomes the node's heartbeat relay, or goes when the node has none.
   */
  private async boxEnv(env: Record<string, string>): Promise<Record<string, string>> {
    if (env['SBX_API_URL'] === undefined) return env;
    const { SBX_API_URL: _, ...rest } = env;
    const relay = await this.relayReady();
    return relay ? { ...rest, SBX_API_URL: relay.url } : rest;
  }

  /** Where this node's boxes post heartbeats (`SBX_API_URL` in their env); undefined when the node has no box gateway. */
  async relayUrl(): Promise<string | undefined> {
    return (await this.relayReady())?.url;
  }

  /** The relay, listening on the box network's gateway and opened in the host firewall, once. */
  private relayReady(): Promise<{ relay: HeartbeatRelay; url: string } | undefined> {
    this.relay ??= this.startRelay().catch((err: unknown) => {
      this.relay = undefined;
      throw err;
    });
    return this.relay;
  }

  private async startRelay(): Promise<{ relay: HeartbeatRelay; url: string } | undefined> {
    const gateway = await this.runtime.boxGateway?.();
    if (!gateway) return undefined;
    const relay = new HeartbeatRelay();
    const url = await relay.listen(gateway);
    try {
      await this.runtime.allowHostEndpoints?.([{ address: gateway, port: relay.port }]);
    } catch (err) {
      await relay.close();
      throw err;
    }
    if (this.closed) {
      await relay.close();
      throw new SbxError('not_available', `node ${this.name} is closed`);
    }
    return { relay, url };
  }

  /**
   * Heartbeats of this node's boxes from now on: resolves once the relay listens (so a Manager
   * that subscribes before it creates a box misses none); the iteration ends when `signal` aborts.
   */
  async heartbeats(signal: AbortSignal): Promise<AsyncIterable<BoxHeartbeat>> {
    const r = await this.relayReady();
    const queue: BoxHeartbeat[] = [];
    let wake: (() => void) | undefined;
    const unsubscribe = r?.relay.subscribe((hb) => {
      // A Manager that stopped reading loses old beats, not memory: the latest ones matter.
      if (queue.length >= 1000) queue.shift();
      queue.push(hb);
      wake?.();
    });
    // The call's end unsubscribes even when the iteration never started (a client gone right after `ready`).
    const onAbort = () => {
      unsubscribe?.();
      wake?.();
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    return (async function* () {
      try {
        while (!signal.aborted) {
          const hb = queue.shift();
          if (hb) {
            yield hb;
            continue;
          }
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
        }
      } finally {
        signal.removeEventListener('abort', onAbort);
        unsubscribe?.();
      }
    })();
  }

  /** Stops the relay and releases the local runtime (containers are not touched). */
  async close(): Promise<void> {
    this.closed = true;
    const r = await this.relay?.catch(() => undefined);
    await r?.relay.close();
    await this.runtime.close();
  }
}

/** `$SBX_AGENT_DIR`, else `.build/agent` of this checkout or package (two levels above src/node or dist/node). */
function defaultAgentDir(): string {
  const dir = process.env['SBX_AGENT_DIR'];
  return dir ? resolve(dir) : resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '.build', 'agent');
}
