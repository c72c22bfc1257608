/**
 * The gRPC heartbeat finds its box by one lookup, never by a scan of every box: each box beats,
 * so a scan per beat would cost the server N² a heartbeat period. A fake Manager whose list()
 * fails the call shows it; the real heartbeat on a real box is grpc.test.ts's.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { SbxError } from '../errors.js';
import type { Manager } from '../sandbox/index.js';
import { FailureLimiter } from './auth.js';
import { heartbeatService, startGrpc } from './grpc.js';
import type { GrpcServerHandle, HeartbeatRequest } from './grpc.js';
import { ServerMetrics } from './metrics.js';

/** Tokens here are `token-<box id>`; the fake knows the boxes `sb-a` and `sb-b`. */
const boxes = new Set(['sb-a', 'sb-b']);
const lookups: string[] = [];
const beats: string[] = [];
const fakeManager = {
  secrets: {
    verifyBoxToken: async (token: string) => {
      if (!token.startsWith('token-')) throw new SbxError('unauthorized', 'box token rejected');
      return token.slice('token-'.length);
    },
  },
  get: async (id: string) => {
    lookups.push(id);
    if (!boxes.has(id)) throw new SbxError('not_found', `box '${id}' not found`);
    return { id };
  },
  list: async () => {
    throw new Error('the heartbeat scanned every box');
  },
  heartbeat: async (id: string) => {
    beats.push(id);
  },
} as unknown as Manager;

const metrics = new ServerMetrics({ boxes: async () => [], pools: async () => [], cleanupStats: () => undefined, warm: async () => [] });
let server: GrpcServerHandle;
type HeartbeatClient = grpc.Client & {
  Heartbeat(req: HeartbeatRequest, metadata: grpc.Metadata, done: (err: grpc.ServiceError | null) => void): grpc.ClientUnaryCall;
};
let client: HeartbeatClient;

function beat(token: string, sandboxId: string): Promise<grpc.status> {
  const metadata = new grpc.Metadata();
  metadata.set('authorization', `Bearer ${token}`);
  const req: HeartbeatRequest = { sandboxId, active: true, processCount: 1 };
  return new Promise((resolve) => {
    client.Heartbeat(req, metadata, (err: grpc.ServiceError | null) => resolve(err ? err.code : grpc.status.OK));
  });
}

before(async () => {
  server = await startGrpc({ host: '127.0.0.1', port: 0, manager: fakeManager, metrics, limiter: new FailureLimiter(1000, 60_000) });
  const Client = grpc.makeGenericClientConstructor(heartbeatService, 'Sandbox');
  client = new Client(server.address, grpc.credentials.createInsecure()) as unknown as HeartbeatClient;
});
after(async () => {
  client.close();
  await server.close();
});

describe('gRPC heartbeat lookup', () => {
  test("a box's own beat is one lookup of its id and reaches the Manager", async () => {
    lookups.length = 0;
    assert.equal(await beat('token-sb-a', 'sb-a'), grpc.status.OK);
    assert.deepEqual(lookups, ['sb-a']);
    assert.deepEqual(beats, ['sb-a']);
  });

  test('a beat for a box that does not exist is NOT_FOUND, found by a lookup', async () => {
    lookups.length = 0;
    assert.equal(await beat('token-sb-a', 'sb-gone'), grpc.status.NOT_FOUND);
    assert.deepEqual(lookups, ['sb-gone']);
  });

  test('a beat for another box is PERMISSION_DENIED and records nothing', async () => {
    beats.length = 0;
    assert.equal(await beat('token-sb-a', 'sb-b'), grpc.status.PERMISSION_DENIED);
    assert.deepEqual(beats, []);
  });
});
