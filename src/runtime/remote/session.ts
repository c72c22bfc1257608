/**
 * One connection between a Manager and a node, whichever side dialled: mutual TLS where each side
 * trusts exactly the certificate it pinned at join (the peer's self-signed certificate is the
 * only CA, and its fingerprint is checked again), then HTTP/2 with the Manager as the client, so
 * the same Connect calls (`sbx.node.v1.Node`) run over a connection the node opened (reverse
 * mode, behind NAT) as over one the Manager opened (direct mode). HTTP/2 gives the streams,
 * their flow control (backpressure) and PING (liveness); Connect gives deadlines.
 */
import http2 from 'node:http2';
import tls from 'node:tls';
import type { TLSSocket } from 'node:tls';
import type { Transport } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import type { GrpcTransportOptions } from '@connectrpc/connect-node';
import { SbxError } from '../../errors.js';
import { certificateFingerprint } from './identity.js';
import type { TlsIdentity } from './identity.js';

/** The largest message either end of the node wire reads. */
export const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

/** The one call outside the Node service: the node proves its credential to the Manager. Answer: `{ name, credential }` JSON. */
export const HELLO_PATH = '/sbx.node.v1.Trust/Hello';
/** ALPN: HTTP/2 only. */
export const ALPN = ['h2'];

/** OpenSSL's verification failures: the peer is not who was pinned. */
const CERT_ERRORS = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** The certificate one side pinned for the other at join. */
export interface PeerPin {
  cert: string;
  fingerprint: string;
}

/** Whether the peer of a TLS socket presented exactly the pinned certificate. */
export function peerMatches(socket: TLSSocket, fingerprint: string): boolean {
  const cert = socket.getPeerX509Certificate();
  return cert !== undefined && certificateFingerprint(cert.toString()) === fingerprint;
}

/** TLS options of either end: our identity, the peer's pinned certificate as the only CA, no host name check (the pin is the check). */
export function pinnedTls(own: TlsIdentity, peer: PeerPin): tls.SecureContextOptions & { ca: string[] } {
  return { key: own.key, cert: own.cert, ca: [peer.cert] };
}

/**
 * Dials `host:port` and completes a TLS handshake in which the peer presents the pinned
 * certificate (and accepts ours). Fails with `runtime_unavailable` (unreachable, timed out) or
 * `permission_denied` (a certificate other than the pinned one).
 */
export function dialPinned(host: string, port: number, own: TlsIdentity, peer: PeerPin, timeoutMs: number, what: string): Promise<TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({
      host,
      port,
      ...pinnedTls(own, peer),
      ALPNProtocols: ALPN,
      // The CA check above already binds the peer to the pinned key; names do not matter.
      checkServerIdentity: () => undefined,
    });
    const timer = setTimeout(() => fail(new SbxError('runtime_unavailable', `${what}: no TLS connection within ${timeoutMs} ms`)), timeoutMs);
    const fail = (err: Error): void => {
      clearTimeout(timer);
      socket.destroy();
      reject(err);
    };
    socket.once('error', (err: NodeJS.ErrnoException) => {
      // Only a verification failure is the peer's identity; anything else is the network's.
      fail(
        CERT_ERRORS.has(err.code ?? '')
          ? new SbxError('forbidden', `${what} presented a certificate other than the one pinned at join (${err.code})`)
          : new SbxError('runtime_unavailable', `${what} is unreachable: ${err.message}${err.code ? ` (${err.code})` : ''}`),
      );
    });
    socket.once('secureConnect', () => {
      if (!peerMatches(socket, peer.fingerprint) || socket.alpnProtocol !== 'h2') {
        fail(new SbxError('forbidden', `${what} presented a certificate other than the one pinned at join`));
        return;
      }
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(socket);
    });
  });
}

type NodeHttp2ClientSessionManager = NonNullable<GrpcTransportOptions['sessionManager']>;

/** Connect's view of our one HTTP/2 session: requests go on it, nothing reconnects behind our back. */
class FixedSessionManager implements NodeHttp2ClientSessionManager {
  readonly authority = 'https://node';
  /** The calls in flight: a connection that dies fails them at once, not at their deadline. */
  private readonly streams = new Set<http2.ClientHttp2Stream>();

  constructor(private readonly session: http2.ClientHttp2Session) {}

  request(
    method: string,
    path: string,
    headers: http2.OutgoingHttpHeaders,
    options: Omit<http2.ClientSessionRequestOptions, 'signal'>,
  ): Promise<http2.ClientHttp2Stream> {
    if (this.session.closed || this.session.destroyed) return Promise.reject(new SbxError('runtime_unavailable', 'the node connection is closed'));
    const stream = this.session.request({ ...headers, ':method': method, ':path': path }, options);
    this.streams.add(stream);
    stream.once('close', () => this.streams.delete(stream));
    return Promise.resolve(stream);
  }

  /**
   * Fails every call in flight with `err`. A stream the session takes down with it ends
   * without an error, which Connect would only notice at the call's deadline.
   */
  failAll(err: Error): void {
    for (const stream of this.streams) stream.destroy(err);
    this.streams.clear();
  }

  notifyResponseByteRead(): void {
    // Liveness is the link's PING loop, not per-stream reads.
  }
}

/**
 * The Manager's HTTP/2 session over an authenticated TLS socket (either direction) and the
 * Connect transport on it. `closed` resolves when the connection ends for any reason.
 */
export class NodeSession {
  readonly session: http2.ClientHttp2Session;
  readonly transport: Transport;
  readonly closed: Promise<void>;
  private readonly manager: FixedSessionManager;

  constructor(socket: TLSSocket) {
    this.session = http2.connect('https://node', { createConnection: () => socket });
    const manager = new FixedSessionManager(this.session);
    this.manager = manager;
    // However the connection ends (our close, the peer, the socket), the calls on it fail now.
    const lost = () => manager.failAll(new SbxError('runtime_unavailable', 'the connection to the node was lost'));
    this.session.once('goaway', lost);
    socket.once('close', lost);
    this.closed = new Promise((resolve) => {
      this.session.once('close', () => resolve());
      socket.once('close', () => resolve());
    });
    // Errors end the session; `closed` tells the link. Unhandled, they would end the process.
    this.session.on('error', () => this.session.destroy());
    socket.on('error', () => socket.destroy());
    this.transport = createGrpcTransport({
      baseUrl: 'https://node',
      sessionManager: manager,
      // Connect asks for gzip by default. Gunzipping exec output and file reads cost this process
      // ~20 ms of CPU per MiB (a 1 MiB workspace read: 53 ms remote against 15 ms local); the node
      // wire is a LAN link or a tunnel, and exec output is often compressed or random already.
      acceptCompression: [],
      // No message of the wire is larger (byte streams go in 256 KiB pieces): a node cannot make
      // the Manager hold gigabytes for one reply.
      readMaxBytes: MAX_MESSAGE_BYTES,
    });
  }

  get isClosed(): boolean {
    return this.session.closed || this.session.destroyed;
  }

  /** The node's name and credential (HELLO_PATH), within `timeoutMs`. */
  hello(timeoutMs: number): Promise<{ name: string; credential: string }> {
    return new Promise((resolve, reject) => {
      const req = this.session.request({ ':method': 'POST', ':path': HELLO_PATH });
      const timer = setTimeout(() => {
        req.close(http2.constants.NGHTTP2_CANCEL);
        reject(new SbxError('runtime_unavailable', `the node did not say hello within ${timeoutMs} ms`));
      }, timeoutMs);
      const chunks: Buffer[] = [];
      let size = 0;
      req.on('data', (c: Buffer) => {
        size += c.length;
        if (size > 16 * 1024) req.close(http2.constants.NGHTTP2_CANCEL);
        else chunks.push(c);
      });
      req.on('error', (err) => {
        clearTimeout(timer);
        reject(new SbxError('runtime_unavailable', `hello: ${err.message}`));
      });
      req.on('end', () => {
        clearTimeout(timer);
        try {
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
          const o = body as { name?: unknown; credential?: unknown };
          if (typeof o.name !== 'string' || typeof o.credential !== 'string') throw new Error('bad hello');
          resolve({ name: o.name, credential: o.credential });
        } catch {
          reject(new SbxError('forbidden', 'the node answered hello with something else than its name and credential'));
        }
      });
      req.end();
    });
  }

  /** One HTTP/2 PING; its round trip in ms, or runtime_unavailable when none came back within `timeoutMs`. */
  ping(timeoutMs: number): Promise<number> {
    return new Promise((resolve, reject) => {
      if (this.isClosed) {
        reject(new SbxError('runtime_unavailable', 'PING: the session is closed'));
        return;
      }
      const timer = setTimeout(() => reject(new SbxError('runtime_unavailable', `no PING answer within ${timeoutMs} ms`)), timeoutMs);
      try {
        this.session.ping((err, duration) => {
          clearTimeout(timer);
          if (err) reject(new SbxError('runtime_unavailable', `PING: ${err.message}`));
          else resolve(duration);
        });
      } catch (err) {
        clearTimeout(timer);
        reject(new SbxError('runtime_unavailable', `PING: ${(err as Error).message}`));
      }
    });
  }

  close(): void {
    this.manager.failAll(new SbxError('runtime_unavailable', 'the connection to the node was closed'));
    this.session.destroy();
  }
}
