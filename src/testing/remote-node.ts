/**
 * Nodes for tests. `startTestNode`: a NodeService on the local engine behind plain HTTP/2 (h2c)
 * on 127.0.0.1 and a RemoteRuntime on it, for the service's own behaviour. `startJoinedNode`: the
 * whole path, a node joined to a Manager's hub and served by `sbx node`'s server over mutual TLS.
 */
import http2 from 'node:http2';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Transport } from '@connectrpc/connect';
import { Http2SessionManager, connectNodeAdapter, createGrpcTransport } from '@connectrpc/connect-node';
import pino from 'pino';
import type { Logger } from 'pino';
import { NodeService } from '../node/service.js';
import { startNode } from '../node/server.js';
import type { RunningNode } from '../node/server.js';
import { identityDir, writeNodeState } from '../node/state.js';
import { NodeHub } from '../runtime/remote/hub.js';
import type { JoinRequest } from '../runtime/remote/trust-store.js';
import type { Manager } from '../sandbox/manager.js';
import { loadOrCreateIdentity } from '../runtime/remote/identity.js';
import { nodeRoutes } from '../node/routes.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { RemoteRuntime } from '../runtime/remote/runtime.js';
import type { Runtime } from '../runtime/types.js';
import { testEnv } from './env.js';
import { waitFor } from './wait.js';

export interface TestNodeOptions {
  /** The node's name (default `test-node-<pid>`). */
  name?: string;
  /** The node's data directory (default a fresh temporary one, removed at close). */
  dataDir?: string;
  /** A transport to the node's base URL instead of plain h2c (the lead's TLS one). */
  transport?: (baseUrl: string) => Transport;
  /** The node's runtime made from its DockerRuntime on the local engine (a test's wrapper: a capability hidden, calls recorded). */
  runtime?: (docker: DockerRuntime) => Runtime;
}

export interface TestNode {
  runtime: RemoteRuntime;
  service: NodeService;
  /** `http://127.0.0.1:<port>` */
  baseUrl: string;
  /** Another client of the same node (its own HTTP/2 session). */
  connect(): RemoteRuntime;
  close(): Promise<void>;
}

/** Starts a node on the local engine and a RemoteRuntime connected to it. */
export async function startTestNode(opts: TestNodeOptions = {}): Promise<TestNode> {
  const name = opts.name ?? `test-node-${process.pid}`;
  const ownDir = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), 'sbx-node-')));
  const docker = new DockerRuntime(testEnv.engineAddr, { agent: true });
  const service = new NodeService(opts.runtime ? opts.runtime(docker) : docker, { name, dataDir });
  const server = http2.createServer(connectNodeAdapter({ routes: nodeRoutes(service) }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const sessions: Http2SessionManager[] = [];
  const runtimes: RemoteRuntime[] = [];
  const connect = () => {
    let transport: Transport;
    if (opts.transport) transport = opts.transport(baseUrl);
    else {
      const sessionManager = new Http2SessionManager(baseUrl);
      sessions.push(sessionManager);
      transport = createGrpcTransport({ baseUrl, sessionManager });
    }
    const rt = new RemoteRuntime(baseUrl, { transport, node: name });
    runtimes.push(rt);
    return rt;
  };
  const runtime = connect();
  return {
    runtime,
    service,
    baseUrl,
    connect,
    async close() {
      await Promise.all(runtimes.map((r) => r.close()));
      for (const s of sessions) s.abort();
      server.close();
      await service.close();
      if (ownDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** A RemoteRuntime for a port where nothing listens (closed at once after it was bound). */
export async function unreachableRemote(): Promise<{ runtime: RemoteRuntime; close(): void }> {
  const server = http2.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  const baseUrl = `http://127.0.0.1:${port}`;
  const sessionManager = new Http2SessionManager(baseUrl);
  const runtime = new RemoteRuntime(baseUrl, { transport: createGrpcTransport({ baseUrl, sessionManager }), node: 'unreachable' });
  return { runtime, close: () => sessionManager.abort() };
}

/** Log lines a test reads back ("refused and logged"): pino JSON objects, in order. */
export class LogLines {
  readonly lines: Record<string, unknown>[] = [];
  readonly logger: Logger = pino({ level: 'info' }, { write: (line: string) => void this.lines.push(JSON.parse(line) as Record<string, unknown>) });

  /** Whether a line's msg contains `text`. */
  has(text: string): boolean {
    return this.lines.some((l) => typeof l['msg'] === 'string' && l['msg'].includes(text));
  }
}

/** A free TCP port on 127.0.0.1 (bound, then released). */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A Manager's node hub for tests, in a fresh data directory (removed by `close`). */
export async function startTestHub(
  opts: { listen?: string; log?: Logger; offlineAfterMs?: number; pingIntervalMs?: number } = {},
): Promise<{ hub: NodeHub; dataDir: string; close(): Promise<void> }> {
  const dataDir = await mkdtemp(join(tmpdir(), 'sbx-hub-'));
  const hub = new NodeHub({
    dataDir,
    log: opts.log ?? pino({ level: 'silent' }),
    ...(opts.listen ? { listen: opts.listen } : {}),
    pingIntervalMs: opts.pingIntervalMs ?? 500,
    offlineAfterMs: opts.offlineAfterMs ?? 3000,
  });
  await hub.start();
  return {
    hub,
    dataDir,
    async close() {
      await hub.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export interface JoinedNode {
  name: string;
  /** The node's data directory (identity, node.json, volumes). */
  dataDir: string;
  /** Direct mode: the address it listens on. */
  address?: string;
  /** `sbx node` running in this process (startNode), until `stop`. */
  running: RunningNode | undefined;
  /** Stops the node service (its boxes stay); `start` brings it back. */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it and removes its data directory. */
  close(): Promise<void>;
}

/** What a node joins: a Manager (createNodeJoinToken/joinNode) or its hub alone. */
interface JoinTarget {
  token(): Promise<string>;
  join(req: JoinRequest): Promise<{ credential: string; managerCert: string; managerFingerprint: string }>;
  state(name: string): string | undefined;
  /** The Manager's node listener, for reverse nodes. */
  listening(): { host: string; port: number } | undefined;
}

/**
 * A node that joined `hub` for real (a join token spent, certificates pinned both ways, its
 * credential kept hashed) and runs `sbx node`'s service (src/node/server.ts) in this process over
 * mutual TLS on 127.0.0.1, direct (the hub dials it) or reverse (it dials the hub's listener).
 * Resolves once the hub has it online.
 */
export async function startJoinedNode(hub: NodeHub, opts: JoinedNodeOptions): Promise<JoinedNode & { runtime(): RemoteRuntime }> {
  const node = await joinNode(
    {
      token: async () => (await hub.createJoinToken()).token,
      join: (req) => hub.join(req),
      state: (name) => hub.link(name)?.state,
      listening: () => hub.listening(),
    },
    opts,
  );
  // The same object (not a copy): a test that swaps `running` is closed with it.
  return Object.assign(node, { runtime: () => hub.link(opts.name)!.runtime });
}

/** The same for a Manager: the node joins through the Manager's own join (as `POST /v1/nodes/join` does). */
export function joinedNodeOf(manager: Manager, opts: JoinedNodeOptions): Promise<JoinedNode> {
  return joinNode(managerTarget(manager), opts);
}

function managerTarget(manager: Manager): JoinTarget {
  return {
    token: async () => (await manager.createNodeJoinToken()).token,
    join: (req) => manager.joinNode(req),
    state: (name) => manager.nodes().find((n) => n.name === name)?.state,
    listening: () => undefined,
  };
}

/**
 * A direct node joined to `manager` that will listen at `address` (another machine's, e.g. a
 * network namespace's), not started: its fresh data directory, for `sbx node --data-dir` run
 * where that address is (the bench's Remote rows). The caller removes the directory.
 */
export function joinedNodeDir(manager: Manager, opts: { name: string; address: string }): Promise<string> {
  return joinOnDisk(managerTarget(manager), { name: opts.name, mode: 'direct', address: opts.address });
}

export interface JoinedNodeOptions {
  name: string;
  mode?: 'direct' | 'reverse';
  log?: Logger;
  engineAddr?: string;
  /** Start `sbx node` and wait until it is online (default true); false: joined only, for a test to tamper with first. */
  start?: boolean;
}

/** Spends a join token of `target` for a node: a fresh data directory with its identity and node.json. */
async function joinOnDisk(target: JoinTarget, opts: { name: string; mode: 'direct' | 'reverse'; address: string | undefined }): Promise<string> {
  const { name, mode, address } = opts;
  const dataDir = await mkdtemp(join(tmpdir(), 'sbx-node-'));
  const identity = await loadOrCreateIdentity(identityDir(dataDir), `sbx-node-${name}`);
  const answer = await target.join({ token: await target.token(), name, mode, cert: identity.cert, ...(address ? { address } : {}) });
  await writeNodeState(dataDir, {
    name,
    mode,
    managerUrl: 'http://127.0.0.1:1',
    ...(address ? { listen: address } : { managerNodeAddress: `127.0.0.1:${target.listening()?.port ?? 0}` }),
    credential: answer.credential,
    managerCert: answer.managerCert,
    managerFingerprint: answer.managerFingerprint,
    joinedAt: new Date().toISOString(),
  });
  return dataDir;
}

async function joinNode(target: JoinTarget, opts: JoinedNodeOptions): Promise<JoinedNode> {
  const mode = opts.mode ?? 'direct';
  const address = mode === 'direct' ? `127.0.0.1:${await freePort()}` : undefined;
  const dataDir = await joinOnDisk(target, { name: opts.name, mode, address });
  const node: JoinedNode = {
    name: opts.name,
    dataDir,
    ...(address ? { address } : {}),
    running: undefined,
    async start() {
      node.running = await startNode({
        dataDir,
        log: opts.log ?? pino({ level: 'silent' }),
        engineAddr: opts.engineAddr ?? testEnv.engineAddr,
        pingIntervalMs: 500,
      });
      await waitFor(() => target.state(opts.name) === 'online', { what: `node ${opts.name} to be online` });
    },
    async stop() {
      await node.running?.close();
      node.running = undefined;
    },
    async close() {
      await node.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  if (opts.start !== false) await node.start();
  return node;
}
