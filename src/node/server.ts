/**
 * `sbx node`: serves this machine's engine to the Manager it joined. Direct mode listens (mutual
 * TLS: only the pinned Manager certificate gets in); reverse mode dials the Manager's node
 * listener and keeps that connection, redialling when it drops. Either way the Manager speaks
 * HTTP/2 to us over the one TLS connection: first HELLO_PATH (we prove our credential), then the
 * Connect service `sbx.node.v1.Node` (routes.ts over service.ts).
 */
import http2 from 'node:http2';
import type { Http2ServerRequest, Http2ServerResponse, Http2Session } from 'node:http2';
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Logger } from 'pino';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { loadOrCreateIdentity } from '../runtime/remote/identity.js';
import type { TlsIdentity } from '../runtime/remote/identity.js';
import { splitHostPort } from '../runtime/remote/hub.js';
import { ALPN, HELLO_PATH, MAX_MESSAGE_BYTES, dialPinned, peerMatches, pinnedTls } from '../runtime/remote/session.js';
import { identityDir, readNodeState } from './state.js';
import type { NodeState } from './state.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { nodeRoutes } from './routes.js';
import { NodeService } from './service.js';

export interface NodeServerOptions {
  dataDir: string;
  /** The engine this node serves (default `local`). */
  engineAddr?: string;
  log: Logger;
  /** Direct mode: listen here instead of the address given at join (tests: port 0). */
  listen?: string;
  /** How often the node PINGs the Manager's connection to notice it is gone (default 2 s). */
  pingIntervalMs?: number;
}

export interface RunningNode {
  name: string;
  mode: NodeState['mode'];
  /** Direct mode: where it listens. */
  address?: { host: string; port: number };
  /** Resolves once connected to the Manager (reverse) or listening (direct). */
  close(): Promise<void>;
}

/** Replies to the Manager's hello: who we are and the credential we got at join. */
function helloHandler(state: NodeState) {
  return (_req: Http2ServerRequest, res: Http2ServerResponse): void => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ name: state.name, credential: state.credential }));
  };
}

/** Keeps a served HTTP/2 session honest about its peer: PINGs it, and ends it when no answer comes. */
function watchSession(session: Http2Session, intervalMs: number, log: Logger): void {
  const timer = setInterval(() => {
    if (session.destroyed || session.closed) {
      clearInterval(timer);
      return;
    }
    const answered = setTimeout(() => {
      log.warn('the Manager stopped answering; closing its connection');
      session.destroy();
    }, intervalMs * 3);
    try {
      session.ping((err) => {
        clearTimeout(answered);
        if (err) session.destroy();
      });
    } catch {
      // Destroyed between the check and the ping: nothing left to watch.
      clearTimeout(answered);
      clearInterval(timer);
    }
  }, intervalMs);
  timer.unref();
  session.once('close', () => clearInterval(timer));
}

export async function startNode(o: NodeServerOptions): Promise<RunningNode> {
  const state = await readNodeState(o.dataDir);
  const identity = await loadOrCreateIdentity(identityDir(o.dataDir), `sbx-node-${state.name}`);
  const log = o.log.child({ node: state.name });
  const service = new NodeService(new DockerRuntime(o.engineAddr ?? 'local', { agent: true }), { name: state.name, dataDir: o.dataDir });
  // No compression, whatever the Manager asks (see NodeSession): gzip cost ~20 ms of CPU per MiB on each side.
  const connect = connectNodeAdapter({ routes: nodeRoutes(service), acceptCompression: [], readMaxBytes: MAX_MESSAGE_BYTES });
  const hello = helloHandler(state);
  const handler = (req: Http2ServerRequest, res: Http2ServerResponse): void => {
    if (req.url === HELLO_PATH) hello(req, res);
    else connect(req, res);
  };
  const pin = { cert: state.managerCert, fingerprint: state.managerFingerprint };
  const pingMs = o.pingIntervalMs ?? 2000;

  if (state.mode === 'direct') {
    const server = http2.createSecureServer(
      { ...pinnedTls(identity, pin), requestCert: true, rejectUnauthorized: true, ALPNProtocols: ALPN, allowHTTP1: false },
      handler,
    );
    server.on('secureConnection', (socket: TLSSocket) => {
      // The CA check let only the pinned key in; the fingerprint check makes it this certificate.
      if (!peerMatches(socket, pin.fingerprint)) {
        log.warn({ remote: socket.remoteAddress }, "refused a connection that is not from this node's Manager");
        socket.destroy();
      }
    });
    server.on('tlsClientError', (err, socket) => {
      log.warn({ remote: socket.remoteAddress, err: err.message }, "refused a connection that is not from this node's Manager");
      socket.destroy();
    });
    const open = new Set<Http2Session>();
    const sockets = new Set<Socket>();
    server.on('connection', (socket: Socket) => {
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
    });
    server.on('session', (session) => {
      open.add(session);
      session.once('close', () => open.delete(session));
      watchSession(session, pingMs, log);
    });
    const [host, port] = splitHostPort(o.listen ?? state.listen ?? '', { listen: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const a = server.address() as { address: string; port: number };
    log.info({ address: `${a.address}:${a.port}` }, 'node listening for its Manager');
    return {
      name: state.name,
      mode: 'direct',
      address: { host: a.address, port: a.port },
      close: async () => {
        // Stop listening, and end what is open now: sessions and connections still in their
        // handshake (the Manager sees the node go). Nothing is waited for that could hang.
        server.close();
        for (const s of open) s.destroy();
        for (const s of sockets) s.destroy();
        await service.close();
      },
    };
  }

  // Reverse: dial, serve over what we dialled, dial again when it ends.
  const h2 = http2.createServer(handler);
  h2.on('session', (session) => watchSession(session, pingMs, log));
  let stopped = false;
  let current: TLSSocket | undefined;
  let retry: NodeJS.Timeout | undefined;
  const [host, port] = splitHostPort(state.managerNodeAddress ?? '');
  const dial = async (): Promise<void> => {
    if (stopped) return;
    try {
      const socket = await dialPinned(host, port, identity as TlsIdentity, pin, 10_000, `the Manager (${host}:${port})`);
      if (stopped) {
        socket.destroy();
        return;
      }
      current = socket;
      log.info({ manager: `${host}:${port}` }, 'connected to the Manager');
      socket.once('close', () => {
        current = undefined;
        if (!stopped) log.warn('the connection to the Manager closed; dialling again');
        schedule();
      });
      h2.emit('connection', socket);
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'cannot reach the Manager; trying again');
      schedule();
    }
  };
  const schedule = (): void => {
    if (stopped) return;
    clearTimeout(retry);
    retry = setTimeout(() => void dial(), 1000);
  };
  await dial();
  return {
    name: state.name,
    mode: 'reverse',
    close: async () => {
      stopped = true;
      clearTimeout(retry);
      current?.destroy();
      h2.close();
      await service.close();
    },
  };
}
