/**
 * The Manager's side of its nodes: the trust store (join tokens, pinned certificates, hashed
 * credentials), one link per joined node that keeps a connection up (dialling a direct node;
 * taking a reverse node's connection on the node listener), tells online from offline by HTTP/2
 * PING, and opens each `sbx://` pool's runtime: a NodeSet over the links it names. See docs/nodes.md.
 */
import { setTimeout as delay } from 'node:timers/promises';
import tls from 'node:tls';
import type { Server, TLSSocket } from 'node:tls';
import { join } from 'node:path';
import type { Transport } from '@connectrpc/connect';
import type { Logger } from 'pino';
import { SbxError, invalidArgument, isSbxError } from '../../errors.js';
import type { BoxHeartbeat, NodeRuntimes, Runtime, RuntimeResources } from '../types.js';
import { loadOrCreateIdentity } from './identity.js';
import type { NodeFacts } from './node-types.js';
import type { TlsIdentity } from './identity.js';
import { RemoteRuntime } from './runtime.js';
import { parseNodeAddress } from './address.js';
import { NodeSet } from './node-set.js';
import type { NodeMember } from './node-set.js';
import { ALPN, NodeSession, dialPinned, peerMatches } from './session.js';
import { TrustStore } from './trust-store.js';
import type { JoinRequest, NodeMode, NodeRecord } from './trust-store.js';

export type { NodeFacts };
export type NodeState = 'connecting' | 'online' | 'offline' | 'revoked';

/** A node as `manager.nodes()`, `GET /v1/nodes` and `sbx nodes ls` show it. */
export interface NodeInfo {
  name: string;
  mode: NodeMode;
  address?: string;
  fingerprint: string;
  state: NodeState;
  draining: boolean;
  maxBoxes?: number;
  joinedAt: string;
  /** When the node last answered (ISO 8601). */
  lastSeenAt?: string;
  /** Why it is offline, when it is. */
  error?: string;
  facts?: NodeFacts;
  revokedAt?: string;
}

export interface NodeHubOptions {
  dataDir: string;
  log: Logger;
  /** `host:port` of the listener reverse nodes dial (absent: no reverse nodes). */
  listen?: string;
  /** How often a link PINGs its node (default 2 s). */
  pingIntervalMs?: number;
  /** A node that answers nothing for this long is offline (default 6 s, inside the 10 s the docs promise). */
  offlineAfterMs?: number;
  /** Told when a node comes online (its boxes can be recovered now). */
  onNodeOnline?: (name: string) => void;
  /** Told of each heartbeat a node relays from one of its boxes (unverified: the token is the caller's to check). */
  onHeartbeat?: (node: string, heartbeat: BoxHeartbeat) => void;
}

/** One joined node's connection and state. */
export class NodeLink {
  state: NodeState = 'connecting';
  /**
   * The node's runtime for the link's whole life: its calls go over the connection of the moment
   * and fail at once with runtime_unavailable naming the node while there is none.
   */
  readonly runtime: RemoteRuntime;
  facts: NodeFacts | undefined;
  resources: RuntimeResources | undefined;
  lastSeenAt: number | undefined;
  error: string | undefined;
  private session: NodeSession | undefined;
  private stopped = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private pingTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly record: NodeRecord,
    private readonly hub: NodeHub,
  ) {
    if (record.revokedAt) this.state = 'revoked';
    this.runtime = new RemoteRuntime(`sbx://${record.name}`, { transport: this.currentTransport(), node: record.name });
  }

  /** A transport that is always the online session's: nothing waits on a node that is away. */
  private currentTransport(): Transport {
    const current = (): Transport => {
      if (this.state !== 'online' || !this.session || this.session.isClosed)
        throw new SbxError(
          'runtime_unavailable',
          `node '${this.name}' is ${this.state === 'online' ? 'offline' : this.state}${this.error ? ` (${this.error})` : ''}`,
          {
            details: { node: this.name },
          },
        );
      return this.session.transport;
    };
    return {
      unary: async (method, signal, timeoutMs, header, input, contextValues) => current().unary(method, signal, timeoutMs, header, input, contextValues),
      stream: async (method, signal, timeoutMs, header, input, contextValues) => current().stream(method, signal, timeoutMs, header, input, contextValues),
    };
  }

  get name(): string {
    return this.record.name;
  }

  /** Direct mode: dial now and whenever the connection is lost. Resolves after the first attempt. */
  startDialling(): Promise<void> {
    if (this.record.mode !== 'direct' || this.stopped || this.state === 'revoked') return Promise.resolve();
    return this.dial();
  }

  private async dial(): Promise<void> {
    // Connected meanwhile (a retry raced a connection that came up): nothing to dial.
    if (this.session && !this.session.isClosed) return;
    try {
      const [host, port] = splitHostPort(this.record.address ?? '');
      const socket = await dialPinned(host, port, this.hub.identity(), this.record, this.hub.offlineAfterMs, `node '${this.name}' (${this.record.address})`);
      await this.adopt(socket);
    } catch (err) {
      // Our own second dial refused: the connection in use stays.
      if (isSbxError(err, 'conflict')) return;
      this.hub.log.debug({ node: this.name, err: (err as Error).message }, 'could not connect to the node; dialling again');
      this.markOffline((err as Error).message);
      this.retry();
    }
  }

  private retry(): void {
    if (this.stopped || this.record.mode !== 'direct' || this.state === 'revoked') return;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.dial(), Math.min(this.hub.pingIntervalMs, 1000));
    this.retryTimer.unref();
  }

  /**
   * Takes an authenticated TLS socket (either direction): the node must say hello with the
   * credential it got at join; the link is then online. A second connection while one is live
   * is refused (a node cannot be taken over by another holding the same key).
   */
  async adopt(socket: TLSSocket): Promise<void> {
    if (this.stopped || this.state === 'revoked') {
      socket.destroy();
      throw new SbxError('forbidden', `node '${this.name}' is revoked`);
    }
    if (this.session && !this.session.isClosed) {
      socket.destroy();
      this.hub.log.warn({ node: this.name, remote: socket.remoteAddress }, 'refused a second connection for a node that is connected');
      throw new SbxError('conflict', `node '${this.name}' is connected already`);
    }
    const session = new NodeSession(socket);
    this.session = session;
    try {
      const hello = await session.hello(this.hub.offlineAfterMs);
      if (hello.name !== this.name || !this.hub.trust.verify(this.name, hello.credential)) {
        this.hub.log.warn({ node: this.name, claimed: hello.name, remote: socket.remoteAddress }, 'refused a node whose credential does not match');
        throw new SbxError('unauthorized', `node '${this.name}' presented a wrong credential`);
      }
      // Asked on this session itself: the link is not online before it has them.
      const probe = new RemoteRuntime(`sbx://${this.name}`, { transport: session.transport, node: this.name });
      const [facts, resources] = await Promise.all([probe.facts(), probe.resources()]);
      if (this.session !== session || session.isClosed) throw new SbxError('runtime_unavailable', `node '${this.name}' went away while connecting`);
      this.facts = facts;
      this.resources = resources;
      // What this node can do, for the pools over it (NodeSet.capabilities): a node upgraded meanwhile may say more.
      this.runtime.learn(facts);
      this.lastSeenAt = Date.now();
      this.error = undefined;
      const was = this.state;
      this.state = 'online';
      this.hub.log.info({ node: this.name, mode: this.record.mode }, 'node online');
      this.startPing(session);
      void session.closed.then(() => {
        if (this.session !== session) return;
        this.markOffline('connection closed');
        this.retry();
      });
      this.relayHeartbeats(session);
      this.hub.membersChanged();
      if (was !== 'online') this.hub.nodeOnline(this.name);
    } catch (err) {
      session.close();
      if (this.session === session) this.session = undefined;
      throw err;
    }
  }

  /** Passes the heartbeats the node relays from its boxes to the hub until the session ends. */
  private relayHeartbeats(session: NodeSession): void {
    const ac = new AbortController();
    void session.closed.then(() => ac.abort());
    void (async () => {
      // For as long as this session lives: a subscription the node ended is taken up again.
      while (!ac.signal.aborted) {
        try {
          for await (const hb of this.runtime.heartbeats(ac.signal)) this.hub.heartbeat(this.name, hb);
        } catch (err) {
          if (!ac.signal.aborted) this.hub.log.warn({ node: this.name, err: (err as Error).message }, 'heartbeat relay ended; subscribing again');
        }
        if (!ac.signal.aborted) await delay(this.hub.pingIntervalMs, undefined, { signal: ac.signal }).catch(() => undefined);
      }
    })();
  }

  private startPing(session: NodeSession): void {
    clearInterval(this.pingTimer);
    this.pingTimer = setInterval(() => {
      session.ping(this.hub.offlineAfterMs).then(
        () => {
          if (this.session === session) this.lastSeenAt = Date.now();
        },
        (err: Error) => {
          if (this.session !== session) return;
          this.hub.log.warn({ node: this.name, err: err.message }, 'node stopped answering');
          session.close();
        },
      );
    }, this.hub.pingIntervalMs);
    this.pingTimer.unref();
  }

  private markOffline(reason: string): void {
    clearInterval(this.pingTimer);
    this.session?.close();
    this.session = undefined;
    this.error = reason;
    if (this.state === 'revoked') return;
    const was = this.state;
    this.state = 'offline';
    this.hub.membersChanged();
    if (was === 'online') {
      this.hub.log.warn({ node: this.name, reason }, 'node offline');
    }
  }

  /** What a pool spanning this node sees of it (NodeSet): a revoked node is offline for good, its boxes kept as last known. */
  member(): NodeMember {
    return {
      name: this.name,
      runtime: this.runtime,
      state: this.state === 'revoked' ? 'offline' : this.state,
      draining: this.record.draining,
      ...(this.record.maxBoxes ? { maxBoxes: this.record.maxBoxes } : {}),
      ...(this.resources ? { resources: this.resources } : {}),
    };
  }

  revoke(): void {
    this.state = 'revoked';
    this.close();
  }

  close(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.pingTimer);
    this.session?.close();
    this.session = undefined;
  }

  info(): NodeInfo {
    const r = this.record;
    return {
      name: r.name,
      mode: r.mode,
      ...(r.address ? { address: r.address } : {}),
      fingerprint: r.fingerprint,
      state: this.state,
      draining: r.draining,
      ...(r.maxBoxes ? { maxBoxes: r.maxBoxes } : {}),
      joinedAt: r.joinedAt,
      ...(this.lastSeenAt ? { lastSeenAt: new Date(this.lastSeenAt).toISOString() } : {}),
      ...(this.error && this.state !== 'online' ? { error: this.error } : {}),
      ...(this.facts ? { facts: this.facts } : {}),
      ...(r.revokedAt ? { revokedAt: r.revokedAt } : {}),
    };
  }
}

/** `host:port` (IPv6 in brackets) → [host, port]; port 0 (any free one) only where `listen` says it is an address to listen on. */
export function splitHostPort(address: string, opts: { listen?: boolean } = {}): [string, number] {
  const m = /^\[?([^\]]+?)\]?:(\d{1,5})$/.exec(address);
  const port = Number(m?.[2]);
  if (!m || !((port > 0 || (opts.listen && port === 0)) && port < 65536)) throw invalidArgument('address', `'${address}' is not host:port`);
  return [m[1]!, port];
}

/**
 * All of a Manager's nodes.
 *
 * @example
 * const hub = new NodeHub({ dataDir, log, listen: '0.0.0.0:7444' });
 * await hub.start();
 * const { token } = await hub.createJoinToken();
 */
export class NodeHub implements NodeRuntimes {
  readonly trust: TrustStore;
  readonly log: Logger;
  readonly pingIntervalMs: number;
  readonly offlineAfterMs: number;
  private readonly links = new Map<string, NodeLink>();
  /** The pools' runtimes over nodes, told when a node comes or goes. */
  private readonly sets = new Set<NodeSet>();
  private own: TlsIdentity | undefined;
  private server: Server | undefined;
  private listenAddress: { host: string; port: number } | undefined;
  private started: Promise<void> | undefined;

  constructor(private readonly o: NodeHubOptions) {
    this.trust = new TrustStore(o.dataDir);
    this.log = o.log;
    this.pingIntervalMs = o.pingIntervalMs ?? 2000;
    this.offlineAfterMs = o.offlineAfterMs ?? 6000;
  }

  /** Whether this Manager keeps nodes or join tokens on disk (it has nodes to meet at start). */
  hasJoined(): boolean {
    return this.trust.exists();
  }

  identity(): TlsIdentity {
    if (!this.own) throw new SbxError('internal', 'the node hub is not started');
    return this.own;
  }

  /** Loads the trust store and the Manager's identity, opens the reverse listener, dials every direct node. Idempotent. */
  start(): Promise<void> {
    this.started ??= (async () => {
      await this.trust.load();
      this.own = await loadOrCreateIdentity(join(this.o.dataDir, 'nodes', 'identity'), 'sbx-manager');
      if (this.o.listen) await this.listen(this.o.listen);
      // A Manager that starts meets its direct nodes first, so that recovery finds their boxes
      // (each attempt ends in its own way; one node never keeps the others from starting).
      await Promise.allSettled(this.trust.list().map((r) => this.linkFor(r).startDialling()));
    })();
    // A start that failed (an unreadable store, a port taken) may be tried again.
    this.started.catch(() => (this.started = undefined));
    return this.started;
  }

  /** The listener reverse nodes dial, once open. */
  listening(): { host: string; port: number } | undefined {
    return this.listenAddress;
  }

  private async listen(address: string): Promise<void> {
    const [host, port] = splitHostPort(address, { listen: true });
    const server = tls.createServer({
      key: this.identity().key,
      cert: this.identity().cert,
      ca: this.reverseCas(),
      requestCert: true,
      rejectUnauthorized: true,
      ALPNProtocols: ALPN,
    });
    server.on('secureConnection', (socket: TLSSocket) => this.acceptReverse(socket));
    // A handshake that fails (an unknown certificate) is the client's problem, never the listener's.
    server.on('tlsClientError', (err, socket) => {
      this.log.warn({ remote: socket.remoteAddress, err: err.message }, 'refused a node connection');
      socket.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err) => this.log.error({ err }, 'node listener error'));
    this.server = server;
    const a = server.address() as { address: string; port: number };
    this.listenAddress = { host: a.address, port: a.port };
  }

  /** The pinned certificates of the reverse nodes that may connect (not revoked). */
  private reverseCas(): string[] {
    const certs = this.trust
      .list()
      .filter((r) => r.mode === 'reverse' && !r.revokedAt)
      .map((r) => r.cert);
    // OpenSSL needs some CA to ask for client certificates; our own stands in when no node joined yet.
    return certs.length > 0 ? certs : [this.identity().cert];
  }

  private refreshReverseCas(): void {
    this.server?.setSecureContext({ key: this.identity().key, cert: this.identity().cert, ca: this.reverseCas() });
  }

  private acceptReverse(socket: TLSSocket): void {
    socket.on('error', () => socket.destroy());
    const record = this.trust.list().find((r) => r.mode === 'reverse' && !r.revokedAt && peerMatches(socket, r.fingerprint));
    if (!record) {
      this.log.warn({ remote: socket.remoteAddress }, 'refused a node connection: no joined reverse node has that certificate');
      socket.destroy();
      return;
    }
    this.linkFor(record)
      .adopt(socket)
      .catch((err: Error) => this.log.warn({ node: record.name, err: err.message }, 'refused a node connection'));
  }

  private linkFor(record: NodeRecord): NodeLink {
    let link = this.links.get(record.name);
    if (!link) {
      link = new NodeLink(record, this);
      this.links.set(record.name, link);
    }
    return link;
  }

  /** The link of a joined node (undefined for a name that never joined). */
  link(name: string): NodeLink | undefined {
    const r = this.trust.get(name);
    return r ? this.linkFor(r) : undefined;
  }

  /** The link of the direct node that joined with this address. */
  linkByAddress(address: string): NodeLink | undefined {
    const r = this.trust.list().find((n) => n.address === address);
    return r ? this.linkFor(r) : undefined;
  }

  /**
   * The runtime of a pool on nodes (`sbx://a,b`): one NodeSet over the named nodes (a name, or the
   * address a direct node joined with). A node named before it joined takes no boxes until it does.
   */
  runtimeFor(addr: string): Runtime {
    const refs = parseNodeAddress(addr);
    const set = new NodeSet(addr, {
      workspaceVolumes: true,
      members: () => refs.flatMap((ref) => (this.trust.get(ref) ? this.link(ref) : this.linkByAddress(ref))?.member() ?? []),
    });
    this.sets.add(set);
    return set;
  }

  /** @internal a node came or went: streams of the pools waiting on members look again. */
  membersChanged(): void {
    for (const s of this.sets) s.membersChanged();
  }

  /** @internal NodeLink tells the hub's listeners. */
  nodeOnline(name: string): void {
    this.o.onNodeOnline?.(name);
  }

  /** @internal */
  heartbeat(node: string, hb: BoxHeartbeat): void {
    this.o.onHeartbeat?.(node, hb);
  }

  nodes(): NodeInfo[] {
    return this.trust.list().map((r) => this.linkFor(r).info());
  }

  async createJoinToken(ttlMs?: number): Promise<{ token: string; expiresAt: string }> {
    await this.start();
    return this.trust.createJoinToken(ttlMs);
  }

  /** Admits a node (TrustStore.join) and starts its link; answers what the node keeps. */
  async join(req: JoinRequest): Promise<{ name: string; credential: string; managerCert: string; managerFingerprint: string; listenPort?: number }> {
    await this.start();
    const { record, credential } = await this.trust.join(req);
    this.log.info({ node: record.name, mode: record.mode, address: record.address }, 'node joined');
    if (record.mode === 'reverse') this.refreshReverseCas();
    else void this.linkFor(record).startDialling();
    return {
      name: record.name,
      credential,
      managerCert: this.identity().cert,
      managerFingerprint: this.identity().fingerprint,
      ...(this.listenAddress ? { listenPort: this.listenAddress.port } : {}),
    };
  }

  async setDraining(name: string, draining: boolean): Promise<NodeInfo> {
    await this.start();
    await this.trust.setDraining(name, draining);
    return this.link(name)!.info();
  }

  async revoke(name: string): Promise<NodeInfo> {
    await this.start();
    // Cut first: a store that cannot be written must not leave a revoked node connected.
    this.link(name)?.revoke();
    await this.trust.revoke(name);
    const link = this.link(name)!;
    this.refreshReverseCas();
    this.log.warn({ node: name }, 'node revoked');
    return link.info();
  }

  async close(): Promise<void> {
    for (const l of this.links.values()) l.close();
    this.links.clear();
    this.sets.clear();
    const server = this.server;
    this.server = undefined;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
