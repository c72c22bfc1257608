import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import { SbxError } from '../../errors.js';
import { parseRuntimeAddress } from './address.js';
import type { RuntimeAddress } from './address.js';
import { validateExec, validateExecStream, validateSpec } from '../spec.js';
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
  ProcessInfo,
  PublishedPort,
  Runtime,
  RuntimeCapabilities,
  RuntimeOptions,
  RuntimeResources,
  RuntimeVersion,
} from '../types.js';
import { DockerConnection } from './connection.js';
import { toCreateOptions } from './container-config.js';
import { toSbxError } from './errors.js';
import { runBuffered, runStreaming } from './exec.js';
import { DockerImages } from './images.js';
import { jsonLines } from './json-lines.js';

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

  constructor(addr: string | RuntimeAddress, options: RuntimeOptions = {}) {
    const parsed = typeof addr === 'string' ? parseRuntimeAddress(addr) : addr;
    this.address = parsed.raw;
    // Bind mounts name paths on the engine's machine: only a local socket means this machine.
    this.capabilities = { hostMounts: parsed.transport === 'unix' };
    this.conn = new DockerConnection(parsed, options);
    this.images = new DockerImages(this.conn);
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
    const valid = validateSpec(spec);
    try {
      const container = await this.docker.createContainer(toCreateOptions(valid));
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
      await this.docker.getContainer(id).start();
    } catch (err) {
      if (statusOf(err) === 304) return;
      this.fail(err, `container ${id}`);
    }
  }

  async stop(id: string, opts: { timeoutMs?: number } = {}): Promise<void> {
    // The Engine API counts the grace period in whole seconds.
    const t = Math.max(0, Math.ceil((opts.timeoutMs ?? 2000) / 1000));
    try {
      await this.docker.getContainer(id).stop({ t });
    } catch (err) {
      if (statusOf(err) === 304) return;
      this.fail(err, `container ${id}`);
    }
  }

  async remove(id: string, opts: { force?: boolean } = {}): Promise<void> {
    try {
      await this.docker.getContainer(id).remove({ force: opts.force ?? false, v: true });
    } catch (err) {
      this.fail(err, `container ${id}`);
    }
  }

  async inspect(id: string): Promise<ContainerInfo> {
    let c: Docker.ContainerInspectInfo;
    try {
      c = await this.docker.getContainer(id).inspect();
    } catch (err) {
      this.fail(err, `container ${id}`);
    }
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
      exitCode: c.State.Running || !started ? null : c.State.ExitCode,
      oomKilled: c.State.OOMKilled,
      labels: c.Config.Labels ?? {},
      ports,
      createdAt: new Date(c.Created).toISOString(),
      startedAt: started,
    };
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
    let top: { Titles: string[]; Processes: string[][] };
    try {
      top = (await this.docker.getContainer(id).top({ ps_args: '-o pid,user,args' })) as typeof top;
    } catch (err) {
      // Some engines (e.g. without procps on the host) reject ps_args; plain `top` still works.
      if (statusOf(err) !== 500) this.fail(err, `container ${id}`);
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

  async resources(): Promise<RuntimeResources> {
    try {
      const info = (await this.docker.info()) as { NCPU?: number; MemTotal?: number };
      return { cpus: info.NCPU ?? 0, memoryBytes: info.MemTotal ?? 0 };
    } catch (err) {
      this.fail(err, 'info');
    }
  }

  async stats(id: string): Promise<ContainerStats> {
    let s: Docker.ContainerStats;
    try {
      s = (await this.docker.getContainer(id).stats({ stream: false })) as Docker.ContainerStats;
    } catch (err) {
      this.fail(err, `container ${id}`);
    }
    const cpuDelta = s.cpu_stats.cpu_usage.total_usage - (s.precpu_stats?.cpu_usage?.total_usage ?? 0);
    const sysDelta = (s.cpu_stats.system_cpu_usage ?? 0) - (s.precpu_stats?.system_cpu_usage ?? 0);
    const cores = s.cpu_stats.online_cpus ?? s.cpu_stats.cpu_usage.percpu_usage?.length ?? 1;
    const cache = (s.memory_stats.stats as Record<string, number> | undefined)?.['inactive_file'] ?? 0;
    return {
      cpuPercent: sysDelta > 0 && cpuDelta > 0 ? (cpuDelta / sysDelta) * cores * 100 : 0,
      memoryBytes: Math.max(0, (s.memory_stats.usage ?? 0) - cache),
      memoryLimitBytes: s.memory_stats.limit ?? 0,
      pids: (s as unknown as { pids_stats?: { current?: number } }).pids_stats?.current ?? 0,
    };
  }

  async exec(id: string, cmd: string[], opts?: ExecOptions): Promise<ExecResult> {
    return runBuffered(this.conn, id, cmd, validateExec(cmd, opts));
  }

  async execStream(id: string, cmd: string[], opts?: ExecStreamOptions): Promise<ExecStream> {
    return runStreaming(this.conn, id, cmd, validateExecStream(cmd, opts));
  }

  async close(): Promise<void> {
    this.conn.close();
  }
}

/** Engine event names -> the engine-neutral actions ('die' covers exit, kill, OOM and shutdown). */
const EVENT_ACTIONS: Record<string, ContainerEvent['action']> = { create: 'created', start: 'started', die: 'stopped', destroy: 'removed' };

function statusOf(err: unknown): number | undefined {
  return (err as { statusCode?: number } | undefined)?.statusCode;
}
