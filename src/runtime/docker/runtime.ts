import { createConnection } from 'node:net';
import { EGRESS_ALL } from '../egress-spec.js';
import type { Socket } from 'node:net';
import type { Duplex, Readable } from 'node:stream';
import type Docker from 'dockerode';
import { SbxError, invalidArgument, isSbxError } from '../../errors.js';
import { parseRuntimeAddress } from './address.js';
import type { RuntimeAddress } from './address.js';
import { isoNanos, logSinceNanos, validateEgressSpec, validateExec, validateExecStream, validateLogs, validateSpec } from '../spec.js';
import { logChunks } from '../log-chunks.js';
import { wholeFrames } from './demux.js';
import type {
  ContainerInfo,
  ContainerSpec,
  ContainerStats,
  ContainerStatus,
  ContainerSummary,
  ExecOptions,
  ExecResult,
  ExecStream,
  ExecStreamOptions,
  ContainerListOptions,
  ContainerEvent,
  EgressSpec,
  ProcessInfo,
  HostEndpoint,
  LogChunk,
  LogOptions,
  PublishedPort,
  Runtime,
  RuntimeCapabilities,
  RuntimeOptions,
  RuntimeResources,
  RuntimeVersion,
} from '../types.js';
import { DockerConnection } from './connection.js';
import { DIAL_ANY_PORT_LABEL, toCreateOptions } from './container-config.js';
import { engineStatus, toSbxError } from './errors.js';
import { runBuffered, runStreaming } from './exec.js';
import { AgentUnreachable, agentExec, agentExecStream, configureAgent, dropKeptConnections, hasOomLine, probeAgent, tcpTarget } from '../agent-client.js';
import type { AgentTarget } from '../agent-client.js';
import { canCopyTool, copyTool, mountedTool } from './box-tool.js';
import { AGENT_PORT, AGENT_TOKEN_ENV } from '../agent-protocol.js';
import { IMAGE_OWNER_LABEL } from '../types.js';
import { formatImageRef, parseImageRef } from '../image-ref.js';
import { AGENT_BIN, AGENT_LABEL, agentBoxOf, bridgeAddressOf, defaultAgentDir, imageConfigOf, injectAgent } from './agent-inject.js';
import type { AgentBox, ImageConfig } from './agent-inject.js';
import { DockerCheckpoints, checkpointRefusal, checkpointRefused } from './checkpoint.js';
import { DockerImages } from './images.js';
import { BoxIsolation, hostFirewallDefault } from './box-network.js';
import { jsonLines } from './json-lines.js';
import { setPaused, type FreezerEngine } from './freezer.js';
import { HOST_SUBID_FILES, usernsOf, type EngineInfo } from './userns.js';
import {
  DEFAULT_EGRESS_IMAGE,
  DockerEgress,
  EGRESS_LABEL,
  attachmentOf,
  attachmentOfNetwork,
  NO_INTERFACES,
  boxInterfacesOf,
  egressFromLabels,
  parseEgressDns,
} from './egress.js';
import { checkPort } from '../ports.js';
import { checkGvisorSpec, isGvisorRuntime, keepTmpInRootfs, parseBoxPs } from './gvisor.js';

/**
 * The Runtime for a Docker Engine (local socket, tcp with optional TLS, or ssh).
 *
 * @example
 * const rt = new DockerRuntime('local');
 * const id = await rt.create({ image: 'sbx-base:latest' });
 * await rt.start(id);
 * const { stdout } = await rt.exec(id, ['echo', 'hi']);
 */
export class DockerRuntime implements Runtime {
  readonly address: string;
  readonly images: DockerImages;
  readonly capabilities: RuntimeCapabilities;
  private readonly conn: DockerConnection;
  private readonly parsedAddress: RuntimeAddress;
  /** Whether new boxes get the in-box agent: asked for (default) and the engine is on this machine. */
  readonly agentEnabled: boolean;
  private readonly agentDir: string;
  /** What is known of each box's agent, by the id the caller uses (learned at create or from one inspect). */
  private readonly agentBoxes = new Map<string, AgentBox>();
  /** Where each box's file tool is (null: it cannot have one), by container id; see boxTool. */
  private readonly tools = new Map<string, string | null>();
  /** Image fields the injection needs, by reference; checked again beside every create. */
  private readonly imageConfigs = new Map<string, ImageConfig>();
  /** The boxes' network and the host firewall (box-network.ts). */
  private readonly isolation: BoxIsolation;
  /** The driver of each named network a box was created on (only a bridge's boxes get the agent). */
  private readonly networkDrivers = new Map<string, string>();
  /** Whether a box's agent said its command was OOM-killed, by `<container id> <FinishedAt>` (see agentSawOomKill). */
  private readonly oomVerdicts = new Map<string, boolean>();
  /** The egress enforcer of this engine (egress.ts). */
  private readonly egress: DockerEgress;
  /** The egress rules of boxes created here and not started yet: their first start needs not ask the helper. */
  private readonly freshEgress = new Map<string, EgressSpec>();
  /** Each container's last CPU reading, by the id the caller uses: what a one-shot read's rate is measured from (see stats). */
  private readonly cpuSamples = new Map<string, CpuSample>();
  /** The engine's runtimes that are gVisor, and its default runtime (gvisor.ts), read from its info when a name is new. */
  private engineRuntimes?: Promise<EngineRuntimes>;
  /** The last engine runtimes read, for capabilitiesFor (which cannot wait for a read). */
  private knownRuntimes?: EngineRuntimes;
  /** Whether each box runs on gVisor, by the id the caller uses (learned at create or from one inspect). */
  private readonly onGvisor = new Map<string, boolean>();
  /** The engine's checkpoint calls (checkpoint.ts): gVisor boxes only. */
  private readonly checkpointer = new DockerCheckpoints(() => this.docker);

  /** @param options with, for tests only, `boxesPerNetwork`: how many boxes a create puts on one box network (box-network.ts). */
  constructor(addr: string | RuntimeAddress, options: RuntimeOptions & { boxesPerNetwork?: number } = {}) {
    const parsed = typeof addr === 'string' ? parseRuntimeAddress(addr) : addr;
    this.address = parsed.raw;
    this.parsedAddress = parsed;
    // Bind mounts name paths on the engine's machine: only a local socket means this machine.
    this.capabilities = { hostMounts: parsed.transport === 'unix', egress: true, checkpoint: true };
    this.conn = new DockerConnection(parsed, options);
    this.egress = new DockerEgress(this.conn, {
      local: parsed.transport === 'unix',
      image: options.egressImage ?? DEFAULT_EGRESS_IMAGE,
      dns: parseEgressDns(options.egressDns),
    });
    this.images = new DockerImages(this.conn);
    // The agent's binary is a host path and its address a local bridge's: tcp and ssh engines
    // keep the engine's exec.
    this.agentEnabled = (options.agent ?? true) && parsed.transport === 'unix';
    this.agentDir = options.agentDir ?? defaultAgentDir();
    this.isolation = new BoxIsolation(() => this.docker, parsed.transport === 'unix', options.hostFirewall ?? hostFirewallDefault(), options.boxesPerNetwork);
  }

  private get docker(): Docker {
    return this.conn.docker;
  }

  private fail(err: unknown, what: string): never {
    throw toSbxError(err, this.address, what);
  }

  async ping(): Promise<void> {
    try {
      await this.docker.ping();
    } catch (err) {
      this.fail(err, 'ping');
    }
  }

  async version(): Promise<RuntimeVersion> {
    try {
      const v = await this.docker.version();
      return { engine: 'docker', version: v.Version, apiVersion: v.ApiVersion, os: v.Os, arch: v.Arch };
    } catch (err) {
      this.fail(err, 'version');
    }
  }

  async create(spec: ContainerSpec): Promise<string> {
    const valid = await this.withEgress(validateSpec(spec));
    const gvisor = await this.isGvisor(valid.ociRuntime);
    if (gvisor) checkGvisorSpec(valid);
    let id: string;
    if (!this.agentEnabled) {
      this.checkImageOwner(valid, await this.imageConfig(valid.image));
      id = this.remember(await this.createContainer(valid), { token: undefined, user: undefined });
    } else {
      id = await this.createWithAgent(valid, true);
    }
    if (this.freshEgress.size > 10_000) this.freshEgress.clear();
    this.freshEgress.set(id, valid.egress ?? EGRESS_ALL);
    if (this.onGvisor.size > 10_000) this.onGvisor.clear();
    this.onGvisor.set(id, gvisor);
    return id;
  }

  /**
   * What boxes of an engine runtime get: a gVisor box no per-box pids limit (gvisor.ts). The
   * engine's runtimes as last read (every create reads them once); before any read, by name.
   */
  capabilitiesFor(ociRuntime: string | undefined): RuntimeCapabilities {
    const known = this.knownRuntimes;
    const gvisor = known ? known.gvisor.has(ociRuntime ?? known.default) : ociRuntime !== undefined && isGvisorRuntime(ociRuntime, undefined);
    return gvisor ? { ...this.capabilities, pidsLimit: false } : this.capabilities;
  }

  /**
   * Whether an engine runtime (the engine's default when none is named) is gVisor. The engine's
   * runtimes are read once, and again when a name is not among them (one registered since).
   */
  private async isGvisor(name: string | undefined): Promise<boolean> {
    let known = this.engineRuntimes ? await this.engineRuntimes.catch(() => undefined) : undefined;
    if (!known || (name !== undefined && !known.all.has(name))) {
      this.engineRuntimes = this.docker
        .info()
        .then((info: { Runtimes?: Record<string, { path?: string; runtimeType?: string }>; DefaultRuntime?: string; ExperimentalBuild?: boolean }) => {
          const runtimes = Object.entries(info.Runtimes ?? {});
          return (this.knownRuntimes = {
            gvisor: new Set(runtimes.filter(([n, r]) => isGvisorRuntime(n, r)).map(([n]) => n)),
            all: new Set(runtimes.map(([n]) => n)),
            default: info.DefaultRuntime ?? 'runc',
            experimental: info.ExperimentalBuild === true,
          });
        });
      try {
        known = await this.engineRuntimes;
      } catch (err) {
        this.fail(err, 'info');
      }
    }
    return known.gvisor.has(name ?? known.default);
  }

  /** Whether a box runs on gVisor (its inspect's runtime, once). */
  private async boxOnGvisor(id: string): Promise<boolean> {
    let gvisor = this.onGvisor.get(id);
    if (gvisor === undefined) {
      const c = await this.rawInspect(id);
      gvisor = await this.isGvisor(c.HostConfig?.Runtime || undefined);
      if (this.onGvisor.size > 10_000) this.onGvisor.clear();
      this.onGvisor.set(id, gvisor);
    }
    return gvisor;
  }

  /**
   * The spec with its egress rules in the `sbx.egress` label, after checking they can be
   * enforced: on a box network by the helper (its image must be on the engine unless the rules
   * are `all`), on network `none` trivially (nothing leaves), on any other network not at all
   * (only `all` goes there).
   */
  private async withEgress(valid: ContainerSpec): Promise<ContainerSpec> {
    const egress = valid.egress;
    if (!egress) return valid;
    const where = attachmentOfNetwork(valid.network);
    if (egress.mode !== 'all' && where === 'other') {
      throw invalidArgument(
        'egress',
        `egress '${egress.mode}' is enforced on sbx's box networks only, not on network '${valid.network}'; leave network unset (or 'none', where nothing leaves the box)`,
      );
    }
    if (egress.mode !== 'all' && where === 'box' && !(await this.egressAvailable())) throw this.egress.missingError();
    return { ...valid, labels: { ...valid.labels, [EGRESS_LABEL]: JSON.stringify(egress) } };
  }

  /** Whether this engine's egress helper runs (made first if need be); its failures as SbxErrors. */
  private async egressAvailable(): Promise<boolean> {
    try {
      return await this.egress.available();
    } catch (err) {
      this.fail(err, 'the egress enforcer');
    }
  }

  /**
   * An owner's image (IMAGE_OWNER_LABEL) makes only that owner's containers; to anyone else it is
   * as missing as an image that is not there, by whatever name or id prefix they gave.
   */
  private checkImageOwner(spec: ContainerSpec, image: ImageConfig | undefined): void {
    if (image?.owner === undefined || image.owner === spec.labels?.[IMAGE_OWNER_LABEL]) return;
    throw new SbxError('not_found', `image ${spec.image} not found on ${this.address}; pull or build it first`, { details: { image: spec.image } });
  }

  private remember(id: string, box: AgentBox): string {
    if (this.agentBoxes.size > 10_000) this.agentBoxes.clear();
    this.agentBoxes.set(id, box);
    return id;
  }

  private async imageConfig(ref: string): Promise<ImageConfig | undefined> {
    try {
      const cfg = imageConfigOf(await this.docker.getImage(ref).inspect());
      this.imageConfigs.set(ref, cfg);
      return cfg;
    } catch {
      // A missing image: the create says so, in its own words.
      this.imageConfigs.delete(ref);
      return undefined;
    }
  }

  /**
   * Creates the box with the agent injected. The image's entrypoint, CMD and user are needed
   * (the agent replaces the entrypoint and runs as root); a known image's are used at once and
   * checked by an inspect beside the create, which is redone once if the tag moved meanwhile.
   */
  private async createWithAgent(valid: ContainerSpec, retry: boolean): Promise<string> {
    const known = this.imageConfigs.get(valid.image);
    const image = known ?? (await this.imageConfig(valid.image));
    this.checkImageOwner(valid, image);
    let injected = image ? injectAgent(valid, image, this.agentDir) : undefined;
    if (injected && !('skip' in injected)) {
      const skip = await this.agentNetworkSkip(valid.network);
      if (skip) injected = { skip };
    }
    if (!injected || 'skip' in injected) return this.remember(await this.createContainer(valid), { token: undefined, user: undefined });
    const check = known ? this.imageConfig(valid.image) : undefined;
    const id = await this.createContainer(injected.spec);
    const fresh = check ? await check : image;
    if (retry && fresh && (fresh.id !== image!.id || fresh.owner !== image!.owner)) {
      await this.docker
        .getContainer(id)
        .remove({ force: true })
        .catch(() => undefined);
      return this.createWithAgent(valid, false);
    }
    return this.remember(id, { token: injected.token, user: injected.user });
  }

  /**
   * Why a box on a named network gets no agent: the host dials the agent at the box's address,
   * which only a bridge network (a host interface on it) lets it reach. A driver is asked once per
   * network name; the default network is a bridge.
   */
  private async agentNetworkSkip(network: string | undefined): Promise<string | undefined> {
    if (!network || network === 'bridge' || network === 'default') return undefined;
    let driver = this.networkDrivers.get(network);
    if (driver === undefined) {
      // A network that is not there: the create says so, in its own words.
      const info = (await this.docker
        .getNetwork(network)
        .inspect()
        .catch(() => undefined)) as { Driver?: string } | undefined;
      if (!info) return undefined;
      driver = info.Driver ?? '';
      if (this.networkDrivers.size > 1000) this.networkDrivers.clear();
      this.networkDrivers.set(network, driver);
    }
    return driver === 'bridge' ? undefined : `network '${network}' (driver '${driver}'): the host cannot dial the agent there`;
  }

  private async createContainer(valid: ContainerSpec): Promise<string> {
    try {
      const container = await this.isolation.create(valid, (spec) => this.docker.createContainer(toCreateOptions(spec)));
      // A read-only root filesystem takes no marker (and has no /tmp to write to on runc either).
      if (!valid.security?.readOnlyRootfs && (await this.isGvisor(valid.ociRuntime))) {
        await keepTmpInRootfs(container).catch(async (err: unknown) => {
          await container.remove({ force: true }).catch(() => undefined);
          throw err;
        });
      }
      return container.id;
    } catch (err) {
      const e = toSbxError(err, this.address, `create from image ${valid.image}`);
      if (e.code === 'not_found' && /image/i.test(e.message)) {
        throw new SbxError('not_found', `image ${valid.image} not found on ${this.address}; pull or build it first`, {
          cause: err,
          details: { image: valid.image },
        });
      }
      throw e;
    }
  }

  async start(id: string): Promise<void> {
    try {
      await this.isolation.start(id, () => this.docker.getContainer(id).start());
    } catch (err) {
      if (engineStatus(err) === 304) return;
      this.fail(err, `container ${id}`);
    }
    const started = await this.registerEgress(id);
    const box = this.agentBoxes.get(id);
    if (this.agentEnabled && box?.token && !box.refused) await this.untilAgentListens(id, box, started);
  }

  /**
   * Hands a box that just started to the egress helper with its address(es), which the engine
   * gives anew at every start: its rules are the helper's entry (a setEgress since its create),
   * else its label's, else `all`. Until then the helper drops its packets (fail closed), `all`
   * included. A box the rules cannot be put in force for is stopped again, and the start fails.
   * Returns the container as inspected after the start (undefined: it is gone already).
   */
  private async registerEgress(id: string): Promise<Docker.ContainerInspectInfo | undefined> {
    const fresh = this.freshEgress.get(id);
    this.freshEgress.delete(id);
    const c = await this.docker
      .getContainer(id)
      .inspect()
      .catch(() => undefined);
    // Not running (its command ended already) or not on a box network: nothing of it to filter.
    if (!c?.State.Running || attachmentOf(c) !== 'box') return c;
    try {
      if (!(await this.egress.available())) {
        if ((fresh ?? egressFromLabels(c.Config.Labels)).mode === 'all') return c;
        throw this.egress.missingError();
      }
      const entry = fresh ? undefined : await this.egress.get(c.Id);
      await this.egress.put(c.Id, boxInterfacesOf(c), entry?.spec ?? fresh ?? egressFromLabels(c.Config.Labels));
    } catch (err) {
      await this.docker
        .getContainer(id)
        .stop({ t: 0 })
        .catch(() => undefined);
      this.fail(err, `the egress rules of container ${id}`);
    }
    return c;
  }

  /**
   * After a start, waits (a few ms) until the agent answers, so that the first exec finds it
   * and a box command that cannot start fails `start` as it does without the agent: the
   * agent starts the command before it answers and exits 126/127 when it cannot.
   */
  private async untilAgentListens(id: string, box: AgentBox, started?: Docker.ContainerInspectInfo): Promise<void> {
    const deadline = Date.now() + AGENT_LISTEN_WAIT_MS;
    // The engine gives the address at each start: the one known from before may be another box's now.
    box.address = started?.State.Running ? bridgeAddressOf(started) : undefined;
    // The run the address belongs to: an answer from the agent there verifies that run, so the
    // first info() of the box need not ask the agent again (execPathOf), at any number of boxes.
    let run = started?.State.Running ? started.State.StartedAt : undefined;
    for (let attempt = 0; ; attempt++) {
      const probe = box.address ? await probeAgent(tcpTarget(id, box.address, AGENT_PORT, box.token!), 500) : undefined;
      if (probe?.ok) {
        if (run) box.verifiedStart = run;
        return;
      }
      // An agent that answers with its refusal (another protocol version, another token) listens:
      // the command started; execs learn the refusal and take the engine's path.
      if (probe?.refused) return;
      // The box's state is read at the end too: a box that ended after its start shows no agent
      // at its address, and each probe of that dead address waits its whole timeout, so the wait
      // can run out before the next read would have seen the command's failure.
      const last = Date.now() >= deadline;
      if (!box.address || attempt % 5 === 4 || last) {
        const c = await this.docker
          .getContainer(id)
          .inspect()
          .catch(() => undefined);
        if (c?.State.Running) {
          box.address = bridgeAddressOf(c);
          run = c.State.StartedAt;
        }
        // sbx gives a box no restart policy, so a command that ended leaves it not running; one
        // given a policy behind sbx (docker update) reads Restarting, with the last exit code.
        if (c && (!c.State.Running || c.State.Restarting)) {
          // A command that ran and ended is not a failure to start; only the agent's own refusal is.
          const why = c.State.ExitCode === 126 || c.State.ExitCode === 127 ? await this.refusalOf(id) : '';
          if (!why.includes('sbx-agent: cannot start')) return;
          throw new SbxError('invalid_argument', `cmd: the box's command could not start in container ${id} (exit ${c.State.ExitCode}): ${why}`, {
            details: { field: 'cmd', exitCode: c.State.ExitCode, agent: why },
          });
        }
        // Running with no IPv4 address (an IPv6-only network): nothing to dial; execs use the engine's.
        if (!box.address) return;
      }
      if (last) return;
      await new Promise((r) => setTimeout(r, 2));
    }
  }

  async logs(id: string, opts?: LogOptions): Promise<AsyncIterable<LogChunk>> {
    const valid = validateLogs(opts);
    const since = logSinceNanos(valid);
    if (valid.signal?.aborted) return logChunks([], since);
    let body: Readable | Buffer;
    try {
      const container = this.docker.getContainer(id) as unknown as { logs(o: Record<string, unknown>): Promise<Readable | Buffer> };
      body = await container.logs({
        stdout: true,
        stderr: true,
        timestamps: true,
        follow: valid.follow ?? false,
        tail: valid.tail ?? 'all',
        // Whole seconds to the engine; the exact time is filtered by logChunks.
        ...(since !== undefined ? { since: Math.max(0, Number(since / 1_000_000_000n)) } : {}),
        ...(valid.signal ? { abortSignal: valid.signal } : {}),
      });
    } catch (err) {
      if (valid.signal?.aborted) return logChunks([], since);
      this.fail(err, `container ${id}`);
    }
    const stream = Buffer.isBuffer(body) ? undefined : body;
    const frames = wholeFrames(stream ?? [body as Buffer]);
    // The engine ends a follow as the process exits, a moment before its state says so: the
    // follow ends once an inspect agrees, so a caller that reads the box next sees it stopped.
    const settled = valid.follow ? () => this.untilNotRunning(id) : undefined;
    return logChunks(frameLines(frames), since, () => stream?.destroy(), valid.signal, settled);
  }

  private async untilNotRunning(id: string): Promise<void> {
    const deadline = Date.now() + AGENT_START_WAIT_MS;
    while (Date.now() < deadline) {
      const c = await this.docker
        .getContainer(id)
        .inspect()
        .catch(() => undefined);
      if (!c?.State.Running || c.State.Restarting) return;
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /** The last lines a container wrote (stdout and stderr), for messages. */
  /**
   * The log tail of a box that ended with 126/127, read again for a moment when the agent's
   * refusal is not in it yet: the engine reports the container exited before its log copier has
   * written the last lines (seen on a loaded machine), and a refusal read as "a command that ran"
   * would make a failed start look like a box that stopped.
   */
  private async refusalOf(id: string): Promise<string> {
    let why = await this.logTail(id);
    for (let i = 0; i < 10 && !why.includes('sbx-agent: cannot start'); i++) {
      await new Promise((r) => setTimeout(r, 20));
      why = await this.logTail(id);
    }
    return why;
  }

  private async logTail(id: string): Promise<string> {
    const text = await this.logText(id, { stdout: true, stderr: true, tail: 5 });
    return text === undefined ? 'its output could not be read' : text.trim() || 'no output';
  }

  /**
   * The text of a container's last `tail` log lines of the streams asked for (since: the engine's
   * `seconds.nanoseconds`), or undefined when the engine cannot give them (a log driver it cannot
   * read back). Boxes have no TTY: the log comes multiplexed.
   */
  private async logText(id: string, opts: { stdout?: boolean; stderr?: boolean; tail: number; since?: string }): Promise<string | undefined> {
    try {
      const raw = (await this.docker.getContainer(id).logs({ stdout: false, stderr: false, ...opts, follow: false })) as unknown as Buffer;
      const parts: Buffer[] = [];
      for await (const f of wholeFrames([raw])) parts.push(f.payload);
      return Buffer.concat(parts).toString('utf8');
    } catch {
      return undefined;
    }
  }

  async stop(id: string, opts: { timeoutMs?: number } = {}): Promise<void> {
    // The Engine API counts the grace period in whole seconds.
    const t = Math.max(0, Math.ceil((opts.timeoutMs ?? 2000) / 1000));
    try {
      await this.docker.getContainer(id).stop({ t });
    } catch (err) {
      if (engineStatus(err) !== 304) this.fail(err, `container ${id}`);
    }
    // Its address is free for the engine's next box, which must not get this box's rules with it.
    await this.egress.release(id).catch(() => undefined);
  }

  async pause(id: string): Promise<void> {
    await this.setPaused(id, true);
  }

  async unpause(id: string): Promise<void> {
    await this.setPaused(id, false);
  }

  /** Frozen or not as asked, by containerd's word: the engine's own flag can lag (freezer.ts). */
  private async setPaused(id: string, paused: boolean): Promise<void> {
    const c = this.docker.getContainer(id);
    const engine: FreezerEngine = {
      set: async (p) => {
        await (p ? c.pause() : c.unpause());
      },
      read: async () => {
        const s = (await c.inspect()).State;
        return { paused: s.Paused, running: s.Running };
      },
    };
    try {
      await setPaused(engine, paused, `container ${id}`);
    } catch (err) {
      this.fail(err, `container ${id}`);
    }
  }

  async checkpoint(id: string, name: string): Promise<void> {
    const c = await this.rawInspect(id);
    const named = c.HostConfig?.Runtime || undefined;
    const gvisor = await this.isGvisor(named);
    const why = checkpointRefusal(named ?? this.knownRuntimes?.default ?? 'runc', gvisor, this.knownRuntimes?.experimental === true);
    if (why) throw checkpointRefused(id, why);
    if (!c.State.Running) {
      throw new SbxError('conflict', `container ${id} is ${c.State.Status}: only a running container can be checkpointed`, {
        details: { id, status: c.State.Status },
      });
    }
    // Its processes must run to be saved. The engine's flag may also be a stale one (freezer.ts).
    if (c.State.Paused) await this.setPaused(id, false);
    const box = this.agentBoxes.get(id);
    if (box?.token && box.address) dropKeptConnections(tcpTarget(id, box.address, AGENT_PORT, box.token));
    try {
      await this.checkpointer.create(id, name);
    } catch (err) {
      this.fail(err, `container ${id}`);
    }
    // The engine answers as the checkpoint is written and learns of the sandbox's exit a moment
    // later: until then the container reads running and a start from the checkpoint is refused.
    await this.untilNotRunning(id);
    // As at a stop: its address is free for the engine's next box, which must not get this box's rules.
    await this.egress.release(id).catch(() => undefined);
  }

  async restoreCheckpoint(id: string, name: string): Promise<void> {
    try {
      await this.isolation.start(id, () => this.checkpointer.restore(id, name));
    } catch (err) {
      this.fail(err, `container ${id} from its checkpoint ${name}`);
    }
    // As after any start: the address is this start's, the egress rules follow it, and the agent
    // (restored with the box, its listener in gVisor's netstack) answers before the first exec.
    const started = await this.registerEgress(id);
    const box = await this.agentBoxFor(id);
    if (this.agentEnabled && box.token && !box.refused) await this.untilAgentListens(id, box, started);
  }

  async checkpoints(id: string): Promise<string[]> {
    try {
      return await this.checkpointer.list(id);
    } catch (err) {
      this.fail(err, `container ${id}`);
    }
  }

  async removeCheckpoint(id: string, name: string): Promise<void> {
    try {
      await this.checkpointer.remove(id, name);
    } catch (err) {
      this.fail(err, `checkpoint ${name} of container ${id}`);
    }
  }

  async commit(id: string, ref: string, opts: { labels?: Record<string, string> } = {}): Promise<void> {
    const { tag, ...name } = parseImageRef(ref, 'ref');
    const c = await this.rawInspect(id);
    // The settings of the image the container was made from: the box's own entrypoint is the
    // agent's (injected at create), which a create from this image injects again.
    const base = await this.docker
      .getImage(c.Image)
      .inspect()
      .then((i) => i.Config)
      .catch(() => undefined);
    // The engine merges the container's env into the image's (commit keeps what the body does not
    // name): sbx's variables of this box are named here, blank, so none of its credentials stays.
    const env = (c.Config.Env ?? []).map((kv) => {
      const key = kv.slice(0, kv.indexOf('=') === -1 ? kv.length : kv.indexOf('='));
      return key.startsWith('SBX_') || key === AGENT_TOKEN_ENV ? `${key}=` : kv;
    });
    // Labels merge the same way: every one of the container's is named, blank (its spec and record
    // are the box's, not the image's), but its owner, whose image this is (IMAGE_OWNER_LABEL).
    const own = c.Config.Labels ?? {};
    const labels: Record<string, string> = Object.fromEntries(Object.keys(own).map((k) => [k, '']));
    Object.assign(labels, base?.Labels ?? {}, own[IMAGE_OWNER_LABEL] ? { [IMAGE_OWNER_LABEL]: own[IMAGE_OWNER_LABEL] } : {}, opts.labels ?? {});
    const config = {
      Entrypoint: base?.Entrypoint ?? null,
      Cmd: base?.Cmd ?? null,
      User: base?.User ?? '',
      WorkingDir: base?.WorkingDir ?? '',
      Env: env,
      Labels: labels,
    };
    try {
      await this.docker.getContainer(id).commit({
        _query: { container: id, repo: formatImageRef(name), tag: tag ?? 'latest', pause: true },
        _body: config,
      });
    } catch (err) {
      this.fail(err, `container ${id}`);
    }
  }

  async remove(id: string, opts: { force?: boolean } = {}): Promise<void> {
    try {
      await this.docker.getContainer(id).remove({ force: opts.force ?? false, v: true });
    } catch (err) {
      // Gone already: its place on its box network is free all the same.
      if (engineStatus(err) === 404) this.isolation.forget(id);
      this.fail(err, `container ${id}`);
    }
    this.isolation.forget(id);
    this.cpuSamples.delete(id);
    this.agentBoxes.delete(id);
    this.tools.delete(id);
    this.freshEgress.delete(id);
    // An entry the helper keeps (its failure here) is swept at the next allowHostEndpoints; its
    // address, given to another box, moves to that box's entry at its registration meanwhile.
    await this.egress.delete(id).catch(() => undefined);
  }

  async setEgress(id: string, egress: EgressSpec): Promise<void> {
    const valid = validateEgressSpec(egress);
    const c = await this.rawInspect(id);
    if (!c.State.Running) throw new SbxError('conflict', `container ${id} is not running`, { details: { id, status: c.State.Status } });
    const where = attachmentOf(c);
    if (where === 'other') {
      if (valid.mode === 'all') return;
      throw invalidArgument('egress', `egress '${valid.mode}' is enforced on sbx's box networks only; container ${id} is on another network`);
    }
    if (!(await this.egressAvailable())) {
      // Nothing to enforce: `all` needs no helper, and nothing leaves a box without a network.
      if (valid.mode === 'all' || where === 'none') return;
      throw this.egress.missingError();
    }
    try {
      // No network: nothing leaves the box whatever the rules say; the entry (no address) only records them.
      await this.egress.put(c.Id, where === 'box' ? boxInterfacesOf(c) : NO_INTERFACES, valid);
    } catch (err) {
      this.fail(err, `the egress rules of container ${id}`);
    }
  }

  async getEgress(id: string): Promise<EgressSpec | undefined> {
    const c = await this.rawInspect(id);
    let entry;
    try {
      entry = await this.egress.get(c.Id);
    } catch (err) {
      this.fail(err, `the egress rules of container ${id}`);
    }
    if (entry) return entry.spec;
    return c.Config.Labels?.[EGRESS_LABEL] ? egressFromLabels(c.Config.Labels) : undefined;
  }

  /** The engine's own inspect of a container; its errors as SbxErrors. */
  private async rawInspect(id: string): Promise<Docker.ContainerInspectInfo> {
    try {
      return await this.docker.getContainer(id).inspect();
    } catch (err) {
      this.fail(err, `container ${id}`);
    }
  }

  async inspect(id: string): Promise<ContainerInfo> {
    const c = await this.rawInspect(id);
    const ports: PublishedPort[] = [];
    for (const [key, binds] of Object.entries(c.NetworkSettings?.Ports ?? {})) {
      const [p, proto] = key.split('/');
      for (const b of binds ?? []) {
        ports.push({ containerPort: Number(p), protocol: proto === 'udp' ? 'udp' : 'tcp', hostIp: b.HostIp, hostPort: Number(b.HostPort) });
      }
    }
    const started = c.State.StartedAt && !c.State.StartedAt.startsWith('0001-') ? new Date(c.State.StartedAt).toISOString() : null;
    return {
      id: c.Id,
      name: c.Name.replace(/^\//, ''),
      image: c.Config.Image,
      status: c.State.Status as ContainerStatus,
      running: c.State.Running,
      // While restarting (a policy someone else gave it) the last run's code is the news.
      exitCode: !started || (c.State.Running && !c.State.Restarting) ? null : c.State.ExitCode,
      oomKilled: c.State.OOMKilled || (await this.agentSawOomKill(c)),
      labels: c.Config.Labels ?? {},
      ports,
      createdAt: new Date(c.Created).toISOString(),
      startedAt: started,
      execPath: await this.execPathOf(id, c),
    };
  }

  /**
   * Whether the box's agent wrote, in this run's log, that the kernel's OOM killer took the command
   * (agent/oom.go), with the proof of the box's token. Engine 20.10 sets OOMKilled only when
   * containerd's OOM event comes before the exit event; under load the exit sometimes wins and the
   * flag stays false. Read only for a box that ended with 137 the engine does not call OOM-killed,
   * once per run (the log of an ended run no longer changes).
   */
  private async agentSawOomKill(c: Docker.ContainerInspectInfo): Promise<boolean> {
    if (c.State.OOMKilled || c.State.ExitCode !== 137 || (c.State.Running && !c.State.Restarting)) return false;
    const token = agentBoxOf(c).token;
    if (!token) return false;
    const key = `${c.Id} ${c.State.FinishedAt}`;
    const known = this.oomVerdicts.get(key);
    if (known !== undefined) return known;
    // The agent's line is its last word; the command's last output may land after it (stdout and
    // stderr are copied apart), hence a few lines more than one. This run's lines only, as near as
    // the engine's times tell: the engine notes StartedAt once the process runs, so a command that
    // dies at once may be logged just before it (see OOM_LINE_SLACK_NS).
    const since = isoNanos(c.State.StartedAt) - OOM_LINE_SLACK_NS;
    const text = await this.logText(c.Id, { stderr: true, tail: 32, since: `${since / 1_000_000_000n}.${String(since % 1_000_000_000n).padStart(9, '0')}` });
    const verdict = text !== undefined && hasOomLine(text, token);
    // An unreadable log is asked again next time.
    if (text !== undefined) {
      if (this.oomVerdicts.size > 10_000) this.oomVerdicts.clear();
      this.oomVerdicts.set(key, verdict);
    }
    return verdict;
  }

  /** Which path serves the box's execs: its agent when it has one that answers (asked once per start). */
  private async execPathOf(id: string, c: Docker.ContainerInspectInfo): Promise<'agent' | 'engine'> {
    const box = { ...agentBoxOf(c), ...pickVerdict(this.agentBoxes.get(id)) };
    this.remember(id, box);
    if (!this.agentEnabled || !box.token || box.refused) return 'engine';
    if (!c.State.Running || box.verifiedStart === c.State.StartedAt) return 'agent';
    if (!box.address) return 'engine';
    // Right after a start the agent may not listen yet (a few ms): wait for it as exec does.
    const target = tcpTarget(id, box.address, AGENT_PORT, box.token);
    const deadline = Math.min(Date.now(), Date.parse(c.State.StartedAt) || 0) + AGENT_START_WAIT_MS;
    let probe = await probeAgent(target);
    while (!probe.ok && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
      probe = await probeAgent(target);
    }
    if (!probe.ok) return 'engine';
    box.verifiedStart = c.State.StartedAt;
    return 'agent';
  }

  /** The agent of a box: known since its create, else learned from one inspect. */
  private async agentBoxFor(id: string): Promise<AgentBox> {
    const known = this.agentBoxes.get(id);
    if (known) return known;
    const c = await this.rawInspect(id);
    const box = agentBoxOf(c);
    this.remember(id, box);
    return box;
  }

  /**
   * Runs `agent` on the box's agent when it has one that answers; otherwise (the agent off, not
   * there, refusing this host, not up yet after several tries, the box stopped) `engine` on the
   * engine's exec, as the box's user (the container itself runs as root when it has an agent).
   * The address known for a box is its last start's: when nothing answers there, or an agent
   * that does not know the box's token does (the box restarted behind this runtime's back and
   * another box has its old address), the box is inspected again for its current one.
   */
  private async viaAgent<T>(
    id: string,
    opts: { user?: string },
    agent: (t: AgentTarget) => Promise<T>,
    engine: (user: string | undefined) => Promise<T>,
  ): Promise<T> {
    const box = await this.agentBoxFor(id);
    const engineUser = opts.user ?? (box.user ? box.user : undefined);
    if (!this.agentEnabled || !box.token || box.refused) return engine(engineUser);
    let inspected = !box.address;
    if (!box.address && !(await this.refreshAddress(id, box))) return engine(engineUser);
    const deadline = Date.now() + AGENT_START_WAIT_MS;
    for (;;) {
      try {
        return await agent(tcpTarget(id, box.address!, AGENT_PORT, box.token));
      } catch (err) {
        if (!(err instanceof AgentUnreachable)) throw err;
        if (err.reason === 'version') {
          box.refused = err.message;
          return engine(engineUser);
        }
        // Not listening (a box that just started: the agent takes a few ms; one that is down), or
        // the address is another box's now: once, the box's own state and address.
        if (!inspected) {
          inspected = true;
          const before = box.address;
          if (!(await this.refreshAddress(id, box))) return engine(engineUser);
          if (box.address !== before) continue;
        }
        if (err.reason === 'forbidden') {
          // The box's own address and still refused: this agent does not take this host's token.
          box.refused = err.message;
          return engine(engineUser);
        }
        if (Date.now() > deadline) return engine(engineUser);
        await new Promise((r) => setTimeout(r, 10));
      }
    }
  }

  /** Inspects the box for its address now; false when it does not run (or has none). */
  private async refreshAddress(id: string, box: AgentBox): Promise<boolean> {
    const c = await this.docker
      .getContainer(id)
      .inspect()
      .catch(() => undefined);
    box.address = c?.State.Running ? bridgeAddressOf(c) : undefined;
    return !!box.address;
  }

  async list(opts: ContainerListOptions = {}): Promise<ContainerSummary[]> {
    const label = Object.entries(opts.labels ?? {}).map(([k, v]) => (v === '' ? k : `${k}=${v}`));
    try {
      const items = await this.docker.listContainers({ all: opts.all ?? true, ...(label.length ? { filters: { label } } : {}) });
      return items.map((c) => ({
        id: c.Id,
        name: (c.Names[0] ?? '').replace(/^\//, ''),
        image: c.Image,
        status: c.State as ContainerStatus,
        running: c.State === 'running',
        labels: c.Labels ?? {},
        createdAt: new Date(c.Created * 1000).toISOString(),
      }));
    } catch (err) {
      this.fail(err, 'list containers');
    }
  }

  async processes(id: string): Promise<ProcessInfo[]> {
    if (await this.boxOnGvisor(id)) return this.boxProcesses(id);
    let top: { Titles: string[]; Processes: string[][] };
    try {
      top = (await this.docker.getContainer(id).top({ ps_args: '-o pid,user,args' })) as typeof top;
    } catch (err) {
      // Some engines (e.g. without procps on the host) reject ps_args; plain `top` still works.
      if (engineStatus(err) !== 500) this.fail(err, `container ${id}`);
      try {
        top = (await this.docker.getContainer(id).top()) as typeof top;
      } catch (err2) {
        this.fail(err2, `container ${id}`);
      }
    }
    const col = (names: string[]) => top.Titles.findIndex((t) => names.includes(t.toUpperCase()));
    const pid = col(['PID']);
    const user = col(['USER', 'UID']);
    const cmd = col(['COMMAND', 'CMD', 'ARGS']);
    return (top.Processes ?? []).map((p) => ({ pid: p[pid] ?? '', user: user >= 0 ? (p[user] ?? '') : '', command: cmd >= 0 ? (p[cmd] ?? '') : '' }));
  }

  /** The processes of a box as its own /proc has them (gVisor: the engine's top lists the host's; gvisor.ts). */
  private async boxProcesses(id: string): Promise<ProcessInfo[]> {
    const tool = await this.boxTool(id);
    if (!tool)
      throw new SbxError('not_available', `the processes of gVisor container ${id} cannot be listed: it has no file tool (a read-only root filesystem)`, {
        details: { id },
      });
    const r = await this.exec(id, [tool, 'ps'], { user: '0' });
    try {
      if (r.exitCode !== 0) throw new Error(r.stderr.trim() || `exit ${r.exitCode}`);
      return parseBoxPs(r.stdout);
    } catch (err) {
      throw new SbxError('not_available', `the processes of gVisor container ${id} cannot be listed: ${(err as Error).message}`, { details: { id } });
    }
  }

  async *events(opts: { labels?: Record<string, string>; signal: AbortSignal }): AsyncGenerator<ContainerEvent> {
    if (opts.signal.aborted) return;
    const label = Object.entries(opts.labels ?? {}).map(([k, v]) => (v === '' ? k : `${k}=${v}`));
    let body: Readable;
    try {
      body = (await this.docker.getEvents({
        filters: { type: ['container'], event: Object.keys(EVENT_ACTIONS), ...(label.length ? { label } : {}) },
        abortSignal: opts.signal,
      } as Docker.GetEventsOptions)) as unknown as Readable;
    } catch (err) {
      if (opts.signal.aborted) return;
      this.fail(err, 'events');
    }
    const abort = () => body.destroy();
    opts.signal.addEventListener('abort', abort, { once: true });
    try {
      for await (const e of jsonLines(body)) {
        const action = EVENT_ACTIONS[String(e['Action'] ?? e['status'] ?? '')];
        const actor = (e['Actor'] ?? {}) as { ID?: string; Attributes?: Record<string, string> };
        const id = actor.ID ?? String(e['id'] ?? '');
        if (!action || !id) continue;
        const nanos = Number(e['timeNano']);
        const at = Number.isFinite(nanos) && nanos > 0 ? new Date(nanos / 1e6).toISOString() : new Date().toISOString();
        // A box that stopped by itself frees its address as stop() does (egress.ts release).
        if (action === 'stopped') void this.egress.release(id).catch(() => undefined);
        yield { id, action, labels: actor.Attributes ?? {}, at };
      }
    } catch (err) {
      if (!opts.signal.aborted) this.fail(err, 'events');
    } finally {
      opts.signal.removeEventListener('abort', abort);
      body.destroy();
    }
    // The engine closed the stream (it is shutting down): the caller must know to reconnect.
    if (!opts.signal.aborted) throw new SbxError('runtime_unavailable', `events from ${this.address} ended: the engine went away`);
  }

  /** The machine's size, and the user namespace boxes run in when the engine remaps them (userns.ts). */
  async resources(): Promise<RuntimeResources> {
    let info: { NCPU?: number; MemTotal?: number } & EngineInfo;
    try {
      info = (await this.docker.info()) as typeof info;
    } catch (err) {
      this.fail(err, 'info');
    }
    const userns = await usernsOf(info, this.parsedAddress.transport === 'unix' ? HOST_SUBID_FILES : undefined);
    return { cpus: info.NCPU ?? 0, memoryBytes: info.MemTotal ?? 0, ...(userns ? { userns } : {}) };
  }

  /**
   * CPU as `docker stats` computes it: the container's share of the machine's CPU time between two
   * samples, times its cores. The engine's plain read waits for two of its samples (1 s apart) and
   * takes 2 s once the container had a read before (measured on Engine 20.10: 1 s for the first,
   * 2 s for each later one); a `one-shot` read takes 1 s but has no previous sample. So a container
   * read within CPU_SAMPLE_MAX_AGE_MS is read one-shot and its rate measured from that earlier
   * reading (a list polled every few seconds: the CPU over the poll interval, in 1 s); the first
   * read, or one after a long pause, is the engine's two-sample read.
   */
  async stats(id: string): Promise<ContainerStats> {
    let s: Docker.ContainerStats;
    let sizeRw: number | undefined;
    const prev = this.cpuSamples.get(id);
    const oneShot = prev !== undefined && Date.now() - prev.atMs <= CPU_SAMPLE_MAX_AGE_MS;
    try {
      const c = this.docker.getContainer(id);
      // The writable layer's size beside the sample (the engine walks only that layer's files).
      [s, sizeRw] = await Promise.all([
        // dockerode passes options as the query (`one-shot` needs API 1.41).
        c.stats(oneShot ? ({ stream: false, 'one-shot': true } as { stream: false }) : { stream: false }) as Promise<Docker.ContainerStats>,
        // dockerode's types omit `size`.
        c.inspect({ size: true } as Docker.ContainerInspectOptions).then(
          (i) => (i as { SizeRw?: number }).SizeRw,
          () => undefined,
        ),
      ]);
    } catch (err) {
      this.fail(err, `container ${id}`);
    }
    const total = s.cpu_stats.cpu_usage.total_usage;
    const system = s.cpu_stats.system_cpu_usage ?? 0;
    const engines = s.precpu_stats?.system_cpu_usage ? { total: s.precpu_stats.cpu_usage.total_usage, system: s.precpu_stats.system_cpu_usage } : undefined;
    const base = engines ?? (oneShot ? prev : undefined);
    const cores = s.cpu_stats.online_cpus ?? s.cpu_stats.cpu_usage.percpu_usage?.length ?? 1;
    let cpuPercent: number | null = null;
    if (base && system > base.system) cpuPercent = (Math.max(0, total - base.total) / (system - base.system)) * cores * 100;
    // Two reads within one engine sample (one tick): the same sample, the same rate.
    else if (base && system === base.system && prev) cpuPercent = prev.cpuPercent;
    if (system > 0) {
      if (this.cpuSamples.size > 10_000) this.cpuSamples.clear();
      this.cpuSamples.set(id, { total, system, atMs: Date.now(), cpuPercent });
    }
    const memStats = s.memory_stats.stats as Record<string, number> | undefined;
    const cache = memStats?.['inactive_file'] ?? 0;
    const pageCache = memStats?.['cache'] ?? memStats?.['file'];
    return {
      cpuPercent,
      memoryBytes: Math.max(0, (s.memory_stats.usage ?? 0) - cache),
      memoryLimitBytes: s.memory_stats.limit || null,
      pids: (s as unknown as { pids_stats?: { current?: number } }).pids_stats?.current ?? 0,
      ...(typeof pageCache === 'number' ? { memoryCacheBytes: pageCache } : {}),
      ...(typeof sizeRw === 'number' ? { diskUsedBytes: sizeRw } : {}),
    };
  }

  async exec(id: string, cmd: string[], opts?: ExecOptions): Promise<ExecResult> {
    const valid = validateExec(cmd, opts);
    return this.viaAgent(
      id,
      valid,
      (t) => agentExec(t, cmd, valid),
      (user) => this.engineExec(id, () => runBuffered(this.conn, id, cmd, user ? { ...valid, user } : valid)),
    );
  }

  async execStream(id: string, cmd: string[], opts?: ExecStreamOptions): Promise<ExecStream> {
    const valid = validateExecStream(cmd, opts);
    return this.viaAgent(
      id,
      valid,
      (t) => agentExecStream(t, cmd, valid),
      (user) => this.engineExec(id, () => runStreaming(this.conn, id, cmd, user ? { ...valid, user } : valid)),
    );
  }

  /**
   * The engine's exec, made once more after an unpause when the engine refused it for its paused
   * flag: a box is thawed before any use, and the flag can say paused after that (freezer.ts).
   */
  private async engineExec<T>(id: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (err) {
      if (!isSbxError(err, 'conflict') || !/is paused/i.test(err.message)) throw err;
      await this.setPaused(id, false);
      return run();
    }
  }

  async setBoxEnv(id: string, env: Record<string, string>): Promise<boolean> {
    return this.viaAgent(
      id,
      {},
      async (t) => {
        await configureAgent(t, env);
        return true;
      },
      async () => false,
    );
  }

  /**
   * The box's file tool: the agent's bind mount when the box has it (whichever path serves its
   * exec), else a copy put in through the archive API once (box-tool.ts); null for a read-only
   * root filesystem or an architecture without a binary.
   */
  async boxTool(id: string): Promise<string | null> {
    const known = this.tools.get(id);
    if (known !== undefined) return known;
    const c = await this.rawInspect(id);
    let tool = mountedTool(c);
    if (!tool && canCopyTool(c)) {
      const image = await this.docker
        .getImage(c.Image)
        .inspect()
        .catch(() => undefined);
      try {
        if (await copyTool(this.docker.getContainer(id), this.agentDir, image?.Architecture ?? '')) tool = AGENT_BIN;
      } catch (err) {
        this.fail(err, `copy sbx's file tool into container ${id}`);
      }
    }
    if (this.tools.size > 10_000) this.tools.clear();
    this.tools.set(id, tool);
    return tool;
  }

  async dialPort(id: string, containerPort: number, opts: { signal?: AbortSignal } = {}): Promise<Duplex> {
    checkPort(containerPort);
    const info = await this.inspect(id);
    // The agent's port is the host's: not the owner's to reach, through the proxy or otherwise.
    if (containerPort === AGENT_PORT && info.labels[AGENT_LABEL] !== undefined) {
      throw invalidArgument('port', `port ${AGENT_PORT} of container ${id} is its in-box agent's, which serves sbx only`);
    }
    if (!info.running) throw new SbxError('conflict', `container ${id} is not running`, { details: { id, status: info.status } });
    const published = info.ports.find((p) => p.containerPort === containerPort && p.protocol === 'tcp');
    if (!published && info.labels[DIAL_ANY_PORT_LABEL] === 'true') {
      const address = await this.containerAddress(id);
      if (address) return connectTcp(address, containerPort, opts.signal, { id, port: containerPort });
    }
    if (!published) {
      throw new SbxError('not_available', `port ${containerPort} of container ${id} is not exposed: list it in the box's ports at create`, {
        details: { id, port: containerPort, reason: 'port_not_exposed' },
      });
    }
    const host = this.publishedHost(published.hostIp);
    if (!host) {
      throw new SbxError(
        'not_available',
        `port ${containerPort} of container ${id} is published on ${published.hostIp} of the engine's machine, which sbx cannot reach`,
        {
          details: { id, port: containerPort, reason: 'port_not_reachable' },
        },
      );
    }
    return connectTcp(host, published.hostPort, opts.signal, { id, port: containerPort });
  }

  /** The container's address on its network, when this machine can reach it (a local engine's bridge). */
  private async containerAddress(id: string): Promise<string | undefined> {
    if (this.parsedAddress.transport !== 'unix') return undefined;
    return bridgeAddressOf(await this.rawInspect(id));
  }

  /** Where a published port is reached from here: the engine's own loopback only when it runs on this machine. */
  private publishedHost(hostIp: string): string | undefined {
    const addr = this.parsedAddress;
    const any = hostIp === '' || hostIp === '0.0.0.0' || hostIp === '::';
    if (addr.transport === 'unix') return any ? '127.0.0.1' : hostIp;
    if (any) return addr.host;
    return hostIp.startsWith('127.') || hostIp === '::1' ? undefined : hostIp;
  }

  async allowHostEndpoints(endpoints: HostEndpoint[]): Promise<void> {
    try {
      await this.isolation.allowHostEndpoints(endpoints);
    } catch (err) {
      this.fail(err, `the boxes' network`);
    }
    // Called at every reconcile: the helper forgets boxes whose containers are gone. Its failure
    // is not the endpoints' (a box's registration at start reports a broken helper).
    await this.egress.sweep().catch(() => undefined);
  }

  async ociRuntimes(): Promise<string[]> {
    try {
      const info = (await this.docker.info()) as { Runtimes?: Record<string, unknown> };
      return Object.keys(info.Runtimes ?? {}).sort();
    } catch (err) {
      this.fail(err, 'info');
    }
  }

  async boxGateway(): Promise<string | undefined> {
    try {
      return await this.isolation.gateway();
    } catch (err) {
      this.fail(err, `the boxes' network`);
    }
  }

  async close(): Promise<void> {
    await this.isolation.close();
    await this.egress.close();
    this.conn.close();
  }
}

/** A connected TCP socket; refusals and resets as `not_available` port_not_listening. */
function connectTcp(host: string, port: number, signal: AbortSignal | undefined, details: { id: string; port: number }): Promise<Socket> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new SbxError('cancelled', 'dial cancelled', { details }));
    const socket = createConnection({ host, port });
    const onAbort = () => {
      socket.destroy();
      reject(new SbxError('cancelled', 'dial cancelled', { details }));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    socket.once('connect', () => {
      signal?.removeEventListener('abort', onAbort);
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (err) => {
      signal?.removeEventListener('abort', onAbort);
      reject(
        new SbxError(
          'not_available',
          `port ${details.port} of container ${details.id} is not listening (${(err as NodeJS.ErrnoException).code ?? err.message})`,
          {
            details: { ...details, reason: 'port_not_listening' },
            cause: err,
          },
        ),
      );
    });
  });
}

/** Engine event names -> the engine-neutral actions ('die' covers exit, kill, OOM and shutdown). */
/** One CPU reading of a container: its CPU time and the machine's (cumulative ns), when, and the rate it gave. */
interface CpuSample {
  total: number;
  system: number;
  atMs: number;
  cpuPercent: number | null;
}

/** The engine's OCI runtimes: those that are gVisor, all of them, the default; and whether its checkpoint API is on. */
interface EngineRuntimes {
  gvisor: Set<string>;
  all: Set<string>;
  default: string;
  experimental: boolean;
}

/** How old an earlier reading a one-shot stats read may measure its CPU rate from; older: the engine's two-sample read. */
const CPU_SAMPLE_MAX_AGE_MS = 60_000;

const EVENT_ACTIONS: Record<string, ContainerEvent['action']> = { create: 'created', start: 'started', die: 'stopped', destroy: 'removed' };

/**
 * How long before the engine's StartedAt the agent's OOM line may be logged and still be this run's
 * (the engine notes StartedAt after the process started: a fraction of a millisecond here, more
 * under load). A previous run's line counts only when that run ended within this of the restart.
 */
const OOM_LINE_SLACK_NS = 1_000_000_000n;

/**
 * How long a start waits for the box's agent to answer while the box runs. It answers in a few
 * ms, only once the box's command started, so this is what tells a command that could not start
 * from one that runs: a loaded machine (CI's two cores running many tests) took longer than
 * AGENT_START_WAIT_MS, and the start then passed a box whose command was about to fail.
 */
const AGENT_LISTEN_WAIT_MS = 10_000;

/** How long an exec waits for the agent of a running box to listen (it starts in a few ms). */
const AGENT_START_WAIT_MS = 2000;

function pickVerdict(box: AgentBox | undefined): Partial<AgentBox> {
  return {
    ...(box?.refused ? { refused: box.refused } : {}),
    ...(box?.verifiedStart ? { verifiedStart: box.verifiedStart } : {}),
  };
}

/** The engine's log frames as timestamped lines (`timestamps: true` puts the time and a space first). */
async function* frameLines(
  frames: AsyncIterable<{ type: number; payload: Buffer }>,
): AsyncGenerator<{ stream: 'stdout' | 'stderr'; time: string; data: Buffer }> {
  for await (const f of frames) {
    if (f.type !== 1 && f.type !== 2) continue;
    const space = f.payload.indexOf(0x20);
    if (space < 0) continue;
    yield { stream: f.type === 2 ? 'stderr' : 'stdout', time: f.payload.subarray(0, space).toString('latin1'), data: f.payload.subarray(space + 1) };
  }
}
