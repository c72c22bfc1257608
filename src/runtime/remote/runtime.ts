/**
 * The Runtime of a remote node (`sbx node`, src/node): every call goes over the node wire
 * (proto/sbx/node/v1/node.proto) on a Connect transport the caller hands it, already connected
 * and authenticated (the TLS, trust and reconnects are the transport's, src/runtime/remote/
 * transport.ts). Unary calls carry a deadline; streams (exec, dial, logs, events, pull, build,
 * heartbeats) do not, and keep flow control end to end. The node's SbxErrors are rethrown as they
 * were thrown there; a lost or refused connection is runtime_unavailable naming the node.
 *
 * Workspaces live on the node (the workspace volume methods, `hostMounts: false`), box ports are
 * on the node's loopback (`publishedPorts: false`: `dialPort` reaches them through the node),
 * and the node relays its boxes' heartbeats (`heartbeats`). Egress policies are the node's runtime's:
 * `capabilities.egress` is what the node's facts said (unknown, so absent, before they came), and
 * `setEgress`/`getEgress` go to the node, which answers not_available when it enforces none.
 *
 * @example
 * const rt = new RemoteRuntime('sbx://node-1:7443', { transport, node: 'node-1' });
 * const id = await rt.create({ image: 'sbx-base:latest' });
 */
import { Duplex, PassThrough, Writable } from 'node:stream';
import type { Readable } from 'node:stream';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { createClient } from '@connectrpc/connect';
import type { Client, Transport } from '@connectrpc/connect';
import { SbxError, isSbxError } from '../../errors.js';
import { collectOutput, execResult } from '../collect-text.js';
import { abortError, watchForKill } from '../kill-watch.js';
import { checkPort } from '../ports.js';
import { validateExec, validateExecStream, validateLogs } from '../spec.js';
import type {
  BoxHeartbeat,
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
  ImageInfo,
  Images,
  LogChunk,
  LogOptions,
  ProcessInfo,
  ProcessSignal,
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
import { splitChunks } from './chunks.js';
import { Node } from './gen/sbx/node/v1/node_pb.js';
import type { BuildRequestSchema, DialRequestSchema, ExecRequestSchema, ExecResponse } from './gen/sbx/node/v1/node_pb.js';
import { Outbox } from './outbox.js';
import type { NodeFacts, NodeVolume } from './node-types.js';
import { fromWireError } from './wire.js';

/** How long a unary call may take by default (a create pulls nothing; a stop adds its own grace). */
export const UNARY_TIMEOUT_MS = 60_000;
/** A checkpoint or restore writes or reads a box's whole memory (and a restore waits for its agent). */
const CHECKPOINT_TIMEOUT_MS = 180_000;

export interface RemoteRuntimeOptions {
  /** A Connect (or gRPC) transport to the node over HTTP/2. */
  transport: Transport;
  /** The node's name, for messages (default: the address). */
  node?: string;
}

type ExecRequestInit = MessageInitShape<typeof ExecRequestSchema>;
type DialRequestInit = MessageInitShape<typeof DialRequestSchema>;
type BuildRequestInit = MessageInitShape<typeof BuildRequestSchema>;

/** One process on the node, as the exec stream shows it. */
interface ExecSession {
  pid: number | undefined;
  signals: boolean;
  stdout: PassThrough;
  stderr: PassThrough;
  stdin: Writable;
  /** The node's exit message; rejects when the stream broke first. */
  exited: Promise<{ code: number; timedOut: boolean }>;
  /** All output was handed over and stdout, stderr ended. */
  drained: Promise<void>;
  send(msg: ExecRequestInit): Promise<void>;
  /** Asks the node to kill the process, then waits for its exit. */
  cancel(): Promise<void>;
  /** One signal to the process itself (when `signals`). */
  signal(name: ProcessSignal): Promise<void>;
}

/** Resolves when `stream` takes writes again, or will never (closed). */
function drainedOrClosed(stream: PassThrough): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.once('drain', done);
    stream.once('close', done);
  });
}

export class RemoteRuntime implements Runtime {
  readonly address: string;
  readonly images: Images;
  readonly capabilities: RuntimeCapabilities = { hostMounts: false, publishedPorts: false };
  private readonly client: Client<typeof Node>;
  /** For messages: the node's name and address. */
  private readonly label: string;
  /** Aborts every call and stream in flight at close. */
  private readonly closing = new AbortController();

  constructor(address: string, opts: RemoteRuntimeOptions) {
    this.address = address;
    this.label = opts.node && opts.node !== address ? `${opts.node} (${address})` : address;
    this.client = createClient(Node, opts.transport);
    this.images = new RemoteImages(this);
  }

  /** A signal for one call: the caller's, and this runtime's close. */
  private signal(caller?: AbortSignal): AbortSignal {
    return caller ? AbortSignal.any([caller, this.closing.signal]) : this.closing.signal;
  }

  /** @internal the node's error as the SbxError it was, or the connection's as runtime_unavailable. */
  fail(err: unknown, what: string, signal?: AbortSignal): SbxError {
    return fromWireError(err, this.label, what, signal);
  }

  /** @internal one unary call by name (node.proto's Invoke), with a deadline. */
  async call<T>(method: string, args: unknown[], timeoutMs = UNARY_TIMEOUT_MS): Promise<T> {
    try {
      const r = await this.client.invoke({ method, argsJson: JSON.stringify(args) }, { timeoutMs, signal: this.closing.signal });
      return (r.resultJson ? JSON.parse(r.resultJson) : undefined) as T;
    } catch (err) {
      throw this.fail(err, method);
    }
  }

  /** @internal the node wire's client. */
  get rpc(): Client<typeof Node> {
    return this.client;
  }

  /** @internal */
  get closeSignal(): AbortSignal {
    return this.closing.signal;
  }

  ping(): Promise<void> {
    return this.call('ping', []);
  }

  version(): Promise<RuntimeVersion> {
    return this.call('version', []);
  }

  /** The node's facts: engine, OS and architecture, size, OCI runtimes, free disk, egress (learnt as capabilities). */
  async facts(): Promise<NodeFacts> {
    const facts = await this.call<NodeFacts>('facts', []);
    this.learn(facts);
    return facts;
  }

  /** @internal What the node's facts say of its capabilities (the hub asks for them on each connection). */
  learn(facts: NodeFacts): void {
    this.capabilities.egress = facts.egress === true;
    this.capabilities.checkpoint = facts.checkpoint === true;
  }

  create(spec: ContainerSpec): Promise<string> {
    return this.call('create', [spec]);
  }

  start(id: string): Promise<void> {
    return this.call('start', [id]);
  }

  stop(id: string, opts?: { timeoutMs?: number }): Promise<void> {
    return this.call('stop', [id, opts], UNARY_TIMEOUT_MS + (opts?.timeoutMs ?? 0));
  }

  pause(id: string): Promise<void> {
    return this.call('pause', [id]);
  }

  unpause(id: string): Promise<void> {
    return this.call('unpause', [id]);
  }

  commit(id: string, ref: string, opts?: { labels?: Record<string, string> }): Promise<void> {
    return this.call('commit', [id, ref, opts]);
  }

  remove(id: string, opts?: { force?: boolean }): Promise<void> {
    return this.call('remove', [id, opts]);
  }

  inspect(id: string): Promise<ContainerInfo> {
    return this.call('inspect', [id]);
  }

  list(opts?: ContainerListOptions): Promise<ContainerSummary[]> {
    return this.call('list', [opts]);
  }

  processes(id: string): Promise<ProcessInfo[]> {
    return this.call('processes', [id]);
  }

  resources(): Promise<RuntimeResources> {
    return this.call('resources', []);
  }

  stats(id: string): Promise<ContainerStats> {
    return this.call('stats', [id]);
  }

  setBoxEnv(id: string, env: Record<string, string>): Promise<boolean> {
    return this.call('setBoxEnv', [id, env]);
  }

  boxTool(id: string): Promise<string | null> {
    return this.call('boxTool', [id]);
  }

  /** Checked by the node (the shape, the box's ownership); not_available from a node that enforces no egress. */
  setEgress(id: string, egress: EgressSpec): Promise<void> {
    return this.call('setEgress', [id, egress]);
  }

  getEgress(id: string): Promise<EgressSpec | undefined> {
    return this.call('getEgress', [id]);
  }

  /** The node's runtime checkpoints (capabilities.checkpoint, learnt from its facts); its box's OCI runtime decides. */
  checkpoint(id: string, name: string): Promise<void> {
    return this.call('checkpoint', [id, name], CHECKPOINT_TIMEOUT_MS);
  }

  restoreCheckpoint(id: string, name: string): Promise<void> {
    return this.call('restoreCheckpoint', [id, name], CHECKPOINT_TIMEOUT_MS);
  }

  checkpoints(id: string): Promise<string[]> {
    return this.call('checkpoints', [id]);
  }

  removeCheckpoint(id: string, name: string): Promise<void> {
    return this.call('removeCheckpoint', [id, name]);
  }

  createWorkspaceVolume(hostPath: string, opts?: WorkspaceVolumeOptions): Promise<string> {
    return this.call('createWorkspaceVolume', [hostPath, opts]);
  }

  removeWorkspaceVolume(hostPath: string): Promise<void> {
    return this.call('removeWorkspaceVolume', [hostPath]);
  }

  startWorkspaceHelper(hostPath: string, opts: WorkspaceHelperOptions): Promise<WorkspaceHelper> {
    return this.call('startWorkspaceHelper', [hostPath, opts]);
  }

  /** The workspace volumes the node holds, with their labels: which workspaces live on this node. */
  listVolumes(): Promise<NodeVolume[]> {
    return this.call('listVolumes', []);
  }

  async *events(opts: { labels?: Record<string, string>; signal: AbortSignal }): AsyncGenerator<ContainerEvent> {
    if (opts.signal.aborted) return;
    const signal = this.signal(opts.signal);
    try {
      for await (const r of this.client.events({ labels: opts.labels ?? {} }, { signal })) {
        const e = r.event;
        if (e) yield { id: e.id, action: e.action as ContainerEvent['action'], labels: { ...e.labels }, at: e.at };
      }
    } catch (err) {
      if (opts.signal.aborted) return;
      throw this.fail(err, 'events', signal);
    }
    if (!opts.signal.aborted)
      throw new SbxError('runtime_unavailable', `events from node ${this.label} ended: the node went away`, { details: { node: this.label } });
  }

  async *heartbeats(signal: AbortSignal): AsyncGenerator<BoxHeartbeat> {
    if (signal.aborted) return;
    const s = this.signal(signal);
    try {
      for await (const r of this.client.heartbeats({}, { signal: s })) {
        if (r.msg.case === 'heartbeat') {
          const h = r.msg.value;
          yield { boxId: h.boxId, token: h.token, active: h.active, processCount: h.processCount };
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      throw this.fail(err, 'heartbeats', s);
    }
    if (!signal.aborted)
      throw new SbxError('runtime_unavailable', `heartbeats from node ${this.label} ended: the node went away`, { details: { node: this.label } });
  }

  async logs(id: string, opts?: LogOptions): Promise<AsyncIterable<LogChunk>> {
    const valid = validateLogs(opts);
    if (valid.signal?.aborted) return (async function* () {})();
    const ac = new AbortController();
    const signal = AbortSignal.any([ac.signal, this.signal(valid.signal)]);
    const request = {
      id,
      follow: valid.follow ?? false,
      ...(valid.tail !== undefined ? { tail: valid.tail } : {}),
      ...(valid.since !== undefined ? { since: valid.since } : {}),
      ...(valid.sinceMs !== undefined ? { sinceMs: BigInt(valid.sinceMs) } : {}),
    };
    const it = this.client.logs(request, { signal })[Symbol.asyncIterator]();
    try {
      await it.next(); // `ready`: the node's engine answered
    } catch (err) {
      ac.abort();
      if (valid.signal?.aborted) return (async function* () {})();
      throw this.fail(err, `logs of container ${id}`, signal);
    }
    const fail = (err: unknown) => this.fail(err, `logs of container ${id}`, signal);
    return (async function* () {
      try {
        for (let n = await it.next(); !n.done; n = await it.next()) {
          if (n.value.msg.case === 'chunk') {
            const c = n.value.msg.value;
            yield { stream: c.stream === 'stderr' ? 'stderr' : 'stdout', data: c.data, time: c.time } as LogChunk;
          }
        }
      } catch (err) {
        if (valid.signal?.aborted) return;
        throw fail(err);
      } finally {
        ac.abort();
      }
    })();
  }

  /**
   * Opens one process on the node: resolves once it runs (a command that cannot start rejects
   * with the node's error). `timeoutMs` goes to the node, whose timer kills inside the box.
   */
  private async openExec(id: string, cmd: string[], opts: ExecStreamOptions, input?: Uint8Array): Promise<ExecSession> {
    const outbox = new Outbox<ExecRequestInit>();
    const ac = new AbortController();
    const signal = AbortSignal.any([ac.signal, this.closing.signal]);
    void outbox.push({
      msg: {
        case: 'start',
        value: {
          id,
          cmd,
          ...(opts.workDir !== undefined ? { workDir: opts.workDir } : {}),
          env: opts.env ?? {},
          ...(opts.user !== undefined ? { user: opts.user } : {}),
          timeoutMs: opts.timeoutMs ?? 0,
          tty: opts.tty ?? false,
          ...(opts.size ? { size: opts.size } : {}),
        },
      },
    });
    if (input) {
      // A buffered exec's whole stdin and its end go right behind the start, not a round trip
      // later (views of the caller's bytes, taken as the stream's flow control allows).
      if (input.length > 0) for (const part of splitChunks(input)) void outbox.push({ msg: { case: 'stdin', value: part } });
      void outbox.push({ msg: { case: 'stdinEof', value: {} } });
    }
    const it = this.client.exec(outbox, { signal })[Symbol.asyncIterator]();
    let first: IteratorResult<ExecResponse>;
    try {
      first = await it.next();
    } catch (err) {
      outbox.close();
      ac.abort();
      throw this.fail(err, `exec in container ${id}`, signal);
    }
    if (first.done || first.value.msg.case !== 'started') {
      outbox.close();
      ac.abort();
      throw new SbxError('runtime_unavailable', `node ${this.label} ended an exec in container ${id} before it started`, { details: { node: this.label } });
    }
    const started = first.value.msg.value;
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    const fail = (err: unknown) => this.fail(err, `exec in container ${id}`, signal);
    let exitWith!: (e: { code: number; timedOut: boolean }) => void;
    let exitFail!: (err: unknown) => void;
    const exited = new Promise<{ code: number; timedOut: boolean }>((resolve, reject) => {
      exitWith = resolve;
      exitFail = reject;
    });
    exited.catch(() => undefined);
    const drained = (async () => {
      try {
        for (let n = await it.next(); !n.done; n = await it.next()) {
          const m = n.value.msg;
          if (m.case === 'stdout' || m.case === 'stderr') {
            const to = m.case === 'stdout' ? stdout : stderr;
            // Flow control: the next message is read once this one was taken.
            // A reader that went away (destroyed) takes no more: its output is dropped, never waited for.
            if (to.destroyed) continue;
            if (!to.write(m.value)) await drainedOrClosed(to);
          } else if (m.case === 'exit') {
            exitWith({ code: m.value.code, timedOut: m.value.timedOut });
          }
        }
        exitFail(
          new SbxError('runtime_unavailable', `node ${this.label} ended an exec in container ${id} without its exit`, { details: { node: this.label } }),
        );
      } catch (err) {
        exitFail(fail(err));
      } finally {
        outbox.close();
        ac.abort();
        stdout.end();
        stderr.end();
      }
    })();
    const send = (msg: ExecRequestInit) => outbox.push(msg);
    const stdin = new Writable({
      write(chunk: Buffer, _enc, cb) {
        void (async () => {
          for (const part of splitChunks(chunk)) await send({ msg: { case: 'stdin', value: part } });
        })().then(() => cb(), cb);
      },
      final(cb) {
        void send({ msg: { case: 'stdinEof', value: {} } });
        cb();
      },
    });
    return {
      pid: started.pid,
      signals: started.signals,
      stdout,
      stderr,
      stdin,
      exited,
      drained,
      send,
      // Out of band: a kill never waits behind stdin the process does not read.
      cancel: async () => {
        await this.call('execCancel', [started.handle]).catch((err: unknown) => {
          if (!isSbxError(err, 'not_found')) throw err;
        });
        await exited.catch(() => undefined);
      },
      signal: (name: ProcessSignal) => this.call<void>('execSignal', [started.handle, name]),
    };
  }

  async exec(id: string, cmd: string[], opts?: ExecOptions): Promise<ExecResult> {
    const valid = validateExec(cmd, opts);
    const t0 = performance.now();
    if (valid.signal?.aborted) throw abortError(valid.signal);
    const session = await this.openExec(
      id,
      cmd,
      {
        ...(valid.workDir !== undefined ? { workDir: valid.workDir } : {}),
        ...(valid.env ? { env: valid.env } : {}),
        ...(valid.user !== undefined ? { user: valid.user } : {}),
        ...(valid.timeoutMs ? { timeoutMs: valid.timeoutMs } : {}),
      },
      valid.stdin === undefined ? new Uint8Array(0) : typeof valid.stdin === 'string' ? Buffer.from(valid.stdin) : valid.stdin,
    );
    const stdout = collectOutput(session.stdout, valid);
    const stderr = collectOutput(session.stderr, valid);
    const killed = watchForKill({ kill: () => session.cancel() }, valid.signal ? { signal: valid.signal } : {});
    try {
      const exit = await session.exited;
      await session.drained;
      if (killed.reason === 'aborted') throw abortError(valid.signal);
      return execResult({ exitCode: exit.code, timedOut: exit.timedOut, durationMs: Math.round(performance.now() - t0) }, stdout, stderr);
    } finally {
      killed.stop();
    }
  }

  async execStream(id: string, cmd: string[], opts?: ExecStreamOptions): Promise<ExecStream> {
    const valid = validateExecStream(cmd, opts);
    const { signal: callerSignal, ...rest } = valid;
    const session = await this.openExec(id, cmd, rest);
    const killed = watchForKill({ kill: () => session.cancel() }, callerSignal ? { signal: callerSignal } : {});
    let exit: Promise<number> | undefined;
    const stream: ExecStream = {
      ...(session.pid !== undefined ? { pid: session.pid } : {}),
      stdout: session.stdout,
      stderr: session.stderr,
      stdin: session.stdin,
      wait() {
        exit ??= session.exited.then(async (e) => {
          killed.stop();
          await session.drained;
          return e.code;
        });
        return exit;
      },
      async cancel() {
        await killed.kill('cancelled');
      },
      async resize(size) {
        await session.send({ msg: { case: 'resize', value: size } });
      },
    };
    if (session.signals) {
      stream.signal = (name: ProcessSignal) => session.signal(name);
    }
    return stream;
  }

  /** A connection to a port of a box, which the node routes (the caller never names an address there). */
  async dialPort(id: string, containerPort: number, opts: { signal?: AbortSignal } = {}): Promise<Duplex> {
    checkPort(containerPort);
    const outbox = new Outbox<DialRequestInit>();
    const ac = new AbortController();
    const signal = AbortSignal.any([ac.signal, this.closing.signal]);
    // The caller's signal stops the dial only; once connected, the connection is the Duplex's.
    const stopDial = () => ac.abort();
    if (opts.signal?.aborted) throw new SbxError('cancelled', 'dial cancelled', { details: { id, port: containerPort } });
    opts.signal?.addEventListener('abort', stopDial, { once: true });
    void outbox.push({ msg: { case: 'open', value: { id, port: containerPort } } });
    const it = this.client.dial(outbox, { signal })[Symbol.asyncIterator]();
    try {
      const first = await it.next();
      if (first.done || first.value.msg.case !== 'opened') throw new SbxError('runtime_unavailable', `node ${this.label} ended a dial before it connected`);
    } catch (err) {
      outbox.close();
      ac.abort();
      if (opts.signal?.aborted) throw new SbxError('cancelled', 'dial cancelled', { details: { id, port: containerPort } });
      throw this.fail(err, `dial port ${containerPort} of container ${id}`, signal);
    } finally {
      opts.signal?.removeEventListener('abort', stopDial);
    }
    let wantMore: (() => void) | undefined;
    const duplex = new Duplex({
      write(chunk: Buffer, _enc, cb) {
        void (async () => {
          for (const part of splitChunks(chunk)) await outbox.push({ msg: { case: 'data', value: part } });
        })().then(() => cb(), cb);
      },
      final(cb) {
        void outbox.push({ msg: { case: 'eof', value: {} } });
        outbox.end();
        cb();
      },
      read() {
        wantMore?.();
      },
      destroy(err, cb) {
        outbox.close();
        ac.abort();
        cb(err);
      },
    });
    const fail = (err: unknown) => this.fail(err, `connection to port ${containerPort} of container ${id}`, signal);
    void (async () => {
      try {
        for (let n = await it.next(); !n.done; n = await it.next()) {
          const m = n.value.msg;
          if (m.case === 'data') {
            if (!duplex.push(Buffer.from(m.value.buffer, m.value.byteOffset, m.value.byteLength))) await new Promise<void>((r) => (wantMore = r));
            wantMore = undefined;
          } else if (m.case === 'eof') duplex.push(null);
        }
        duplex.push(null);
      } catch (err) {
        if (!duplex.destroyed) duplex.destroy(fail(err));
      }
    })();
    return duplex;
  }

  /** Ends every call and stream in flight (the transport is its owner's to close). */
  async close(): Promise<void> {
    this.closing.abort();
  }
}

/** The node's images: exists, list, remove by name; pull and build as streams. */
class RemoteImages implements Images {
  constructor(private readonly rt: RemoteRuntime) {}

  exists(ref: string): Promise<boolean> {
    return this.rt.call('imageExists', [ref]);
  }

  list(): Promise<ImageInfo[]> {
    return this.rt.call('imageList', []);
  }

  remove(ref: string, opts?: { force?: boolean }): Promise<void> {
    return this.rt.call('imageRemove', [ref, opts]);
  }

  async *pull(ref: string, opts: { auth?: RegistryAuth; signal?: AbortSignal } = {}): AsyncGenerator<PullProgress> {
    const signal = opts.signal ? AbortSignal.any([opts.signal, this.rt.closeSignal]) : this.rt.closeSignal;
    try {
      for await (const p of this.rt.rpc.pull({ ref, ...(opts.auth ? { auth: opts.auth } : {}) }, { signal })) {
        yield {
          ...(p.id !== undefined ? { id: p.id } : {}),
          status: p.status,
          ...(p.current !== undefined ? { current: p.current } : {}),
          ...(p.total !== undefined ? { total: p.total } : {}),
        };
      }
    } catch (err) {
      throw this.rt.fail(err, `pull ${ref}`, signal);
    }
  }

  async *build(context: Readable, tag: string, opts: { labels?: Record<string, string> } = {}): AsyncGenerator<string> {
    const outbox = new Outbox<BuildRequestInit>();
    void outbox.push({ msg: { case: 'start', value: { tag, labels: opts.labels ?? {} } } });
    const feed = (async () => {
      for await (const chunk of context) for (const part of splitChunks(chunk as Buffer)) await outbox.push({ msg: { case: 'chunk', value: part } });
      await outbox.push({ msg: { case: 'end', value: {} } });
    })();
    feed.catch(() => outbox.close());
    const signal = this.rt.closeSignal;
    try {
      for await (const r of this.rt.rpc.build(outbox, { signal })) yield r.line;
      await feed;
    } catch (err) {
      throw this.rt.fail(err, `build ${tag}`, signal);
    } finally {
      outbox.close();
    }
  }
}
