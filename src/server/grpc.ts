/**
 * The seed's Heartbeat RPC over gRPC (`sbx.v1.Sandbox/Heartbeat`, see heartbeat.proto), for
 * boxes that speak gRPC. Off unless configured. The three-field messages are encoded by hand,
 * so nothing is loaded from disk at run time; the test checks the codec against the .proto.
 */
import * as grpc from '@grpc/grpc-js';
import { SbxError } from '../errors.js';
import type { Manager } from '../sandbox/index.js';
import { authenticateBox } from './auth.js';
import { lookupBox } from './context.js';
import type { FailureLimiter } from './auth.js';
import type { ServerMetrics } from './metrics.js';

export interface HeartbeatRequest {
  sandboxId: string;
  active: boolean;
  processCount: number;
}

export const HEARTBEAT_PATH = '/sbx.v1.Sandbox/Heartbeat';

function readVarint(buf: Buffer, pos: number): [bigint, number] {
  let result = 0n;
  let shift = 0n;
  for (let i = 0; i < 10; i++) {
    if (pos >= buf.length) throw new Error('truncated varint');
    const b = buf[pos++]!;
    result |= BigInt(b & 0x7f) << shift;
    if ((b & 0x80) === 0) return [result, pos];
    shift += 7n;
  }
  throw new Error('varint too long');
}

function writeVarint(value: bigint, out: number[]): void {
  let v = BigInt.asUintN(64, value);
  while (v >= 0x80n) {
    out.push(Number((v & 0x7fn) | 0x80n));
    v >>= 7n;
  }
  out.push(Number(v));
}

export function decodeHeartbeatRequest(buf: Buffer): HeartbeatRequest {
  const msg: HeartbeatRequest = { sandboxId: '', active: false, processCount: 0 };
  let pos = 0;
  while (pos < buf.length) {
    const [tag, next] = readVarint(buf, pos);
    pos = next;
    const field = Number(tag >> 3n);
    const wire = Number(tag & 7n);
    if (wire === 0) {
      const [v, after] = readVarint(buf, pos);
      pos = after;
      if (field === 2) msg.active = v !== 0n;
      else if (field === 3) msg.processCount = Number(BigInt.asIntN(32, v));
    } else if (wire === 2) {
      const [len, after] = readVarint(buf, pos);
      const end = after + Number(len);
      if (end > buf.length) throw new Error('truncated field');
      if (field === 1) msg.sandboxId = buf.subarray(after, end).toString('utf8');
      pos = end;
    } else if (wire === 1) pos += 8;
    else if (wire === 5) pos += 4;
    else throw new Error(`unsupported wire type ${wire}`);
  }
  return msg;
}

export function encodeHeartbeatRequest(msg: HeartbeatRequest): Buffer {
  const out: number[] = [];
  if (msg.sandboxId) {
    const id = Buffer.from(msg.sandboxId);
    out.push(0x0a);
    writeVarint(BigInt(id.length), out);
    out.push(...id);
  }
  if (msg.active) out.push(0x10, 1);
  if (msg.processCount) {
    out.push(0x18);
    writeVarint(BigInt(msg.processCount), out);
  }
  return Buffer.from(out);
}

export const heartbeatService: grpc.ServiceDefinition = {
  Heartbeat: {
    path: HEARTBEAT_PATH,
    requestStream: false,
    responseStream: false,
    requestSerialize: (m: HeartbeatRequest) => encodeHeartbeatRequest(m),
    requestDeserialize: (b: Buffer) => decodeHeartbeatRequest(b),
    responseSerialize: () => Buffer.alloc(0),
    responseDeserialize: () => ({}),
    originalName: 'heartbeat',
  } as grpc.MethodDefinition<HeartbeatRequest, Record<string, never>>,
};

export interface GrpcServerHandle {
  /** host:port actually bound. */
  address: string;
  port: number;
  close(): Promise<void>;
}

function status(code: grpc.status, details: string): grpc.ServiceError {
  return Object.assign(new Error(details), { code, details, metadata: new grpc.Metadata() }) as grpc.ServiceError;
}

/**
 * The client address of each call, as fastify's `req.ip` spells it (the socket's remoteAddress,
 * no port), so one address has one failure count over HTTP and gRPC. Taken from the connection
 * grpc-js exposes to interceptors rather than parsed out of getPeer(): getPeer() is
 * `<address>:<port>` with an IPv6 address unbracketed, and `::1:5123` is itself a valid address.
 * Keyed by the call's metadata object, which grpc-js hands on to the handler as `call.metadata`.
 */
const peerAddresses = new WeakMap<grpc.Metadata, string>();

const recordPeer: grpc.ServerInterceptor = (_method, call) =>
  new grpc.ServerInterceptingCall(call, {
    start: (next) =>
      next({
        onReceiveMetadata: (metadata, nextMetadata) => {
          peerAddresses.set(metadata, call.getConnectionInfo().remoteAddress ?? 'unknown');
          nextMetadata(metadata);
        },
      }),
  });

export async function startGrpc(opts: {
  host: string;
  port: number;
  manager: Manager;
  metrics: ServerMetrics;
  /** The server's one auth-failure limiter (the HTTP routes use the same). */
  limiter: FailureLimiter;
}): Promise<GrpcServerHandle> {
  const server = new grpc.Server({ 'grpc.max_receive_message_length': 64 * 1024, interceptors: [recordPeer] });
  server.addService(heartbeatService, {
    Heartbeat: (call: grpc.ServerUnaryCall<HeartbeatRequest, unknown>, callback: grpc.sendUnaryData<Record<string, never>>) => {
      (async () => {
        const header = call.metadata.get('authorization')[0];
        let boxId: string;
        try {
          boxId = await authenticateBox(typeof header === 'string' ? header : undefined, peerAddresses.get(call.metadata) ?? 'unknown', {
            verifyBoxToken: (t) => opts.manager.secrets.verifyBoxToken(t),
            limiter: opts.limiter,
          });
        } catch (err) {
          opts.metrics.authFailures.inc();
          // Over the address's failure limit: gRPC's "resource exhausted" is HTTP's 429.
          if (err instanceof SbxError && err.code === 'limit_exceeded') return callback(status(grpc.status.RESOURCE_EXHAUSTED, err.message));
          return callback(status(grpc.status.UNAUTHENTICATED, err instanceof SbxError ? err.message : 'box token rejected'));
        }
        const req = call.request;
        // One lookup per beat: every box beats, so a scan of all boxes here would cost N² a period.
        if (!(await lookupBox(opts.manager, req.sandboxId))) return callback(status(grpc.status.NOT_FOUND, `sandbox '${req.sandboxId}' not found`));
        if (req.sandboxId !== boxId) return callback(status(grpc.status.PERMISSION_DENIED, 'this box token speaks for another box'));
        try {
          await opts.manager.heartbeat(req.sandboxId, { active: req.active, processCount: Math.max(0, req.processCount) });
        } catch (err) {
          if (err instanceof SbxError && err.code === 'not_found') return callback(status(grpc.status.NOT_FOUND, err.message));
          return callback(status(grpc.status.INTERNAL, 'heartbeat failed'));
        }
        opts.metrics.heartbeats.inc({ transport: 'grpc' });
        callback(null, {});
      })().catch(() => callback(status(grpc.status.INTERNAL, 'heartbeat failed'))); // never an unhandled rejection
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${opts.port}`, grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  return {
    address: `${opts.host}:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, 2000);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}
