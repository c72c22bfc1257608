/**
 * The bounds of envd's routes against a real sbx server and engine: a Connect message's size
 * (declared, or inflated from gzip), an unauthenticated upload's body (not read on), the body
 * timeout of signed file URLs (envd's error shape), metadata keys a plain object would lose; and
 * (on the in-memory runtime) the signed-URL search: issued tokens first, at most one full
 * search at a time server-wide.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import pino from 'pino';
import { isSbxError } from '../../../errors.js';
import { Manager } from '../../../sandbox/manager.js';
import { testEnv } from '../../../testing/env.js';
import { MemoryRuntime } from '../../../testing/memory-runtime.js';
import { keyIdOf, rawRequest, startTestServer, type TestServer } from '../../../testing/server.js';
import { KeyStore } from '../../keys.js';
import { envdAccessToken, fileUrlSignature, issueEnvdAccessToken, lastSignatureSearchHashes, sandboxOfSignature } from '../access-token.js';
import { ENVD_PREFIX, ENVD_READ_MAX_BYTES } from './routes.js';

/** Long enough for any box write of the tests to start; the body-timeout test waits for it once. */
const BODY_TIMEOUT_MS = 1500;

let srv: TestServer;
let boxId: string;
let token: string;

before(async () => {
  srv = await startTestServer('envdlim', { serve: { bodyTimeoutMs: BODY_TIMEOUT_MS } });
  boxId = (await srv.manager.create({ image: testEnv.e2bImage })).id;
  token = await envdAccessToken(srv.manager, boxId, keyIdOf(srv.admin));
});

after(async () => {
  await srv.dispose();
});

const envdHeaders = (): Record<string, string> => ({ 'e2b-sandbox-id': boxId, 'x-access-token': token });

/** A raw request with a Buffer body; the answer's status, headers and body. */
function post(path: string, headers: Record<string, string>, body: Buffer): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const u = new URL(srv.url);
    const req = httpRequest({ host: u.hostname, port: u.port, method: 'POST', path, headers: { ...headers, 'content-length': String(body.length) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function assertHealthy(): Promise<void> {
  const health = await rawRequest(srv.url, 'GET', `${ENVD_PREFIX}/health`, envdHeaders());
  assert.equal(health.status, 204, 'the server still serves envd');
}

describe('Connect message size', () => {
  test('a gzip bomb (a unary message inflating past readMaxBytes) is resource_exhausted, not inflated whole', async () => {
    // 20 KiB of gzip inflating to readMaxBytes + 1 MiB of zeros.
    const bomb = gzipSync(Buffer.alloc(ENVD_READ_MAX_BYTES + 1024 * 1024));
    const res = await post(
      `${ENVD_PREFIX}/filesystem.Filesystem/Stat`,
      { ...envdHeaders(), 'content-type': 'application/proto', 'content-encoding': 'gzip', 'connect-protocol-version': '1' },
      bomb,
    );
    const body = JSON.parse(res.body.toString()) as { code: string; message: string };
    assert.equal(body.code, 'resource_exhausted', res.body.toString());
    assert.match(body.message, /readMaxBytes/);
    await assertHealthy();
  });

  test('a streamed message whose length header is past readMaxBytes is refused before its bytes are awaited', async () => {
    const envelope = Buffer.alloc(5 + 16);
    envelope.writeUInt8(0, 0);
    envelope.writeUInt32BE(0x40000000, 1); // 1 GiB declared, 16 bytes sent
    const res = await post(
      `${ENVD_PREFIX}/process.Process/Start`,
      { ...envdHeaders(), 'content-type': 'application/connect+proto', 'connect-protocol-version': '1' },
      envelope,
    );
    assert.match(res.body.toString(), /resource_exhausted/, res.body.toString());
    await assertHealthy();
  });
});

describe('unauthenticated bodies', () => {
  test('a refused POST /files is answered at once, and its connection cut once the body goes on past what a request may drop', async () => {
    const u = new URL(srv.url);
    const chunk = Buffer.alloc(64 * 1024, 1);
    // Enough that the kernel buffers cannot swallow it: a server that reads on takes it all.
    const maxBytes = 256 * 1024 * 1024;
    const outcome = await new Promise<{ status: number; connection: unknown; cut: boolean }>((resolve) => {
      let status = 0;
      let connection: unknown;
      let sent = 0;
      let done = false;
      const finish = (cut: boolean) => {
        if (done) return;
        done = true;
        resolve({ status, connection, cut });
      };
      const req = httpRequest(
        {
          host: u.hostname,
          port: u.port,
          method: 'POST',
          path: '/files?path=/tmp/x&signature=v1_forged',
          headers: { 'content-type': 'application/octet-stream', 'transfer-encoding': 'chunked' },
        },
        (res) => {
          status = res.statusCode ?? 0;
          connection = res.headers.connection;
          res.resume();
        },
      );
      req.on('error', () => finish(true));
      req.on('close', () => finish(sent < maxBytes));
      const pump = () => {
        while (!done && sent < maxBytes) {
          sent += chunk.length;
          if (!req.write(chunk)) return void req.once('drain', pump);
        }
        if (!done && sent >= maxBytes) {
          // All of it was taken: the server read the unauthenticated body to its end.
          req.destroy();
          finish(false);
        }
      };
      pump();
    });
    assert.equal(outcome.status, 401);
    assert.ok(outcome.cut, 'the server stopped reading the body before the client finished it');
  });
});

describe('signed file URLs at the root', () => {
  test('a body that stops arriving is 408 in envd’s shape {code, message}', async () => {
    const q = { path: '/tmp/slow.bin', operation: 'write' as const, user: '' };
    const signature = fileUrlSignature(q, token);
    // base64 with + and /: encoded, as the SDK's URL building does (a bare + would read as a space).
    const u = new URL(srv.url);
    const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(
        {
          host: u.hostname,
          port: u.port,
          method: 'POST',
          path: `/files?path=${encodeURIComponent(q.path)}&signature=${encodeURIComponent(signature)}`,
          headers: { 'content-type': 'application/octet-stream', 'content-length': '1000' },
        },
        (r) => {
          const chunks: Buffer[] = [];
          r.on('data', (c: Buffer) => chunks.push(c));
          r.on('end', () => resolve({ status: r.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
          r.on('error', reject);
        },
      );
      req.on('error', reject);
      req.write('only ten b'); // then nothing: the rest of the 1000 bytes never comes
    });
    assert.equal(res.status, 408, res.body);
    const body = JSON.parse(res.body) as Record<string, unknown>;
    assert.equal(body['code'], 408, res.body);
    assert.match(String(body['message']), /stopped arriving/);
  });
});

describe('slow and crowded bodies', () => {
  test('a refused request whose body trickles in has its connection cut, not held', async () => {
    const u = new URL(srv.url);
    const closed = await new Promise<{ status: number }>((resolve) => {
      let status = 0;
      const req = httpRequest(
        {
          host: u.hostname,
          port: u.port,
          method: 'POST',
          path: '/files?path=/tmp/x&signature=v1_forged',
          headers: { 'content-type': 'application/octet-stream', 'content-length': '60000' },
        },
        (res) => {
          status = res.statusCode ?? 0;
          res.resume();
        },
      );
      // One byte now and then, under every byte limit: only a deadline ends it.
      const trickle = setInterval(() => req.write('x'), 200);
      req.on('close', () => {
        clearInterval(trickle);
        resolve({ status });
      });
      req.on('error', () => undefined);
      req.write('x');
    });
    assert.equal(closed.status, 401);
  });

  test('a form with more fields than a form may hold is refused (400), not held', async () => {
    const form = new FormData();
    for (let i = 0; i < 20; i++) form.append('file', `field ${i}`);
    const res = await fetch(`${srv.url}${ENVD_PREFIX}/files?path=/tmp/fields.txt`, { method: 'POST', headers: envdHeaders(), body: form });
    assert.equal(res.status, 400, await res.clone().text());
    assert.match(await res.text(), /more than 16 fields/);
  });
});

describe('file metadata keys', () => {
  test('x-metadata-__proto__ is refused with 400 naming the key, not dropped', async () => {
    const res = await post(
      `${ENVD_PREFIX}/files?path=/tmp/meta.txt`,
      { ...envdHeaders(), 'content-type': 'application/octet-stream', 'x-metadata-__proto__': 'v', 'x-metadata-kept': 'k' },
      Buffer.from('x'),
    );
    assert.equal(res.status, 400, res.body.toString());
    assert.match(res.body.toString(), /__proto__/);
  });
});

describe('the signed-URL search (in-memory runtime)', () => {
  let manager: Manager;
  let keys: KeyStore;
  let keyIds: string[];
  let ids: string[];
  before(async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'sbx-envdlim-'));
    const rt = new MemoryRuntime({ address: `mem-envdlim-${process.pid}` });
    manager = new Manager({
      name: 'envdlim-mem',
      dataDir,
      cleanupIntervalMs: 0,
      tokenSecret: 'a-test-secret-of-16+',
      pools: [{ name: 'local', runtime: rt, idleTimeoutMs: 0 }],
      logger: pino({ level: 'silent' }),
    });
    await manager.start();
    keys = new KeyStore(dataDir);
    keyIds = [];
    for (let i = 0; i < 3; i++) keyIds.push((await keys.create({ name: `k${i}`, role: 'admin' })).id);
    ids = [];
    for (let i = 0; i < 20; i++) ids.push((await manager.create({ image: testEnv.baseImage })).id);
  });
  after(async () => {
    await manager.close();
  });

  const signed = (t: string, path: string) => {
    const q = { path, operation: 'read' as const, user: '' };
    return { ...q, signature: fileUrlSignature(q, t) };
  };

  test('a URL signed by a token the API handed out is found among the issued tokens, not by trying every key × box', async () => {
    const t = await issueEnvdAccessToken(manager, ids[3]!, keyIds[2]!);
    assert.equal(await sandboxOfSignature(manager, keys, signed(t, '/issued')), ids[3]);
    assert.equal(lastSignatureSearchHashes, 1, 'one hash: the most recently issued token');
  });

  test('a token never handed out by this server (a URL signed before a restart) is still found, and is one check the next time', async () => {
    const t = await envdAccessToken(manager, ids[7]!, keyIds[1]!);
    assert.equal(await sandboxOfSignature(manager, keys, signed(t, '/old')), ids[7]);
    assert.ok(lastSignatureSearchHashes > 1);
    assert.equal(await sandboxOfSignature(manager, keys, signed(t, '/old')), ids[7]);
    assert.equal(lastSignatureSearchHashes, 0);
  });

  test('one full search runs at a time server-wide, four wait, the next is refused limit_exceeded with a retry time', async () => {
    const attempts = [1, 2, 3, 4, 5, 6].map((i) =>
      sandboxOfSignature(manager, keys, { path: `/f${i}`, operation: 'read', user: '', signature: `v1_forged${i}` }),
    );
    const results = await Promise.allSettled(attempts);
    const codes = results.map((r) => (r.status === 'rejected' && isSbxError(r.reason) ? r.reason.code : r.status));
    assert.deepEqual(codes, ['unauthorized', 'unauthorized', 'unauthorized', 'unauthorized', 'unauthorized', 'limit_exceeded']);
    const refused = (results[5] as PromiseRejectedResult).reason as { details?: Record<string, unknown> };
    assert.equal(typeof refused.details?.['retryAfterMs'], 'number');
  });
});
