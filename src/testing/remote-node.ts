/**
 * A node for tests: a NodeService on the local engine behind a plain HTTP/2 (h2c) server on
 * 127.0.0.1, and a RemoteRuntime talking to it over a Connect gRPC transport. The TLS and trust
 * of `sbx node` (src/node/server.ts) are not in it: `transport` lets a test hand its own.
 */
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Transport } from '@connectrpc/connect';
import { Http2SessionManager, connectNodeAdapter, createGrpcTransport } from '@connectrpc/connect-node';
import { NodeService } from '../node/service.js';
import { nodeRoutes } from '../node/routes.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { RemoteRuntime } from '../runtime/remote/runtime.js';
import { testEnv } from './env.js';

export interface TestNodeOptions {
  /** The node's name (default `test-node-<pid>`). */
  name?: string;
  /** The node's data directory (default a fresh temporary one, removed at close). */
  dataDir?: string;
  /** A transport to the node's base URL instead of plain h2c (the lead's TLS one). */
  transport?: (baseUrl: string) => Transport;
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
  const service = new NodeService(new DockerRuntime(testEnv.engineAddr, { agent: true }), { name, dataDir });
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
