/**
 * No client bytes can crash or hang the server: broken bodies (gzip that is not gzip, truncated
 * multipart, truncated tar, a client that goes away mid-body), garbage and oversized WebSocket
 * frames, sockets and FIFOs read through the file APIs, lone surrogates in labels and a body that
 * never arrives. Every case runs against a real `sbx serve` and asserts a clear 4xx (or close
 * code) with a stable error code, then that the same server still answers /healthz.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { existsSync, readdirSync } from 'node:fs';
import { connect } from 'node:net';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { envdAccessToken } from './e2b/access-token.js';
import { ENVD_PREFIX } from './e2b/envd/routes.js';
import { testEnv } from '../testing/env.js';
import { keyIdOf, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

const BODY_TIMEOUT_MS = 1500;

let t: TestServer;
let boxId: string;
let envdHeaders: Record<string, string>;
/** A box served by the engine's exec (no agent): its slower start let a bad gzip body fail before anyone listened. */
let engineExecHeaders: Record<string, string>;
let wsId: string;
let wsNode: string;

before(async () => {
  t = await startTestServer('bytes', {
    serve: { bodyTimeoutMs: BODY_TIMEOUT_MS },
    config: {
      pools: [
        { name: 'local', addr: testEnv.engineAddr },
        { name: 'engine-exec', addr: testEnv.engineAddr, agent: false },
      ],
    },
  });
  const [box, plain] = await Promise.all([t.manager.create({ image: testEnv.e2bImage }), t.manager.create({ image: testEnv.e2bImage, pool: 'engine-exec' })]);
  boxId = box.id;
  envdHeaders = { 'e2b-sandbox-id': boxId, 'x-access-token': await envdAccessToken(t.manager, boxId, keyIdOf(t.admin)) };
  engineExecHeaders = { 'e2b-sandbox-id': plain.id, 'x-access-token': await envdAccessToken(t.manager, plain.id, keyIdOf(t.admin)) };
  const ws = await t.call('POST', '/v1/workspaces', { body: { name: 'bytes' } });
  assert.equal(ws.status, 201, ws.text);
  wsId = ws.json.id;
  wsNode = ws.json.node;
});
after(async () => {
  await t.dispose();
});

async function assertAlive(): Promise<void> {
  const h = await t.call('GET', '/healthz', { key: null });
  assert.equal(h.status, 200, 'the server must still answer /healthz');
}

/** The server's half of the next connection this test opens, to wait for its close. */
function nextServerSocket(): Promise<Socket> {
  return new Promise((resolve) => t.server.app.server.once('connection', resolve));
}

interface RawAnswer {
  status: number;
  head: string;
  body: string;
}

/**
 * Sends `head` and `body` on a raw socket and reads until the server closes it (or, with
 * `destroyAfterWrite`, goes away itself and waits for the server's side to close).
 */
async function raw(head: string, body: Buffer | string, opts: { destroyAfterWrite?: boolean } = {}): Promise<RawAnswer> {
  const u = new URL(t.url);
  const serverSide = nextServerSocket();
  const sock = connect(Number(u.port), u.hostname);
  await once(sock, 'connect');
  const chunks: Buffer[] = [];
  sock.on('data', (c: Buffer) => chunks.push(c));
  sock.on('error', () => undefined);
  sock.write(head.replace(/\n/g, '\r\n') + '\r\n');
  sock.write(body);
  if (opts.destroyAfterWrite) {
    await new Promise((r) => setImmediate(r));
    sock.destroy();
    // Not once(): the server's socket reports the cut body as an 'error' before it closes.
    const s = await serverSide;
    if (!s.destroyed) await new Promise((r) => s.once('close', r));
    return { status: 0, head: '', body: '' };
  }
  await once(sock, 'close');
  const text = Buffer.concat(chunks).toString();
  const [h = '', b = ''] = text.split('\r\n\r\n');
  return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(h)?.[1] ?? 0), head: h, body: b };
}

function headers(method: string, path: string, h: Record<string, string>): string {
  return [`${method} ${path} HTTP/1.1`, `host: 127.0.0.1`, 'connection: close', ...Object.entries(h).map(([k, v]) => `${k}: ${v}`), ''].join('\n');
}

/** Checks `done` until it holds; the test's own timeout bounds the wait. */
async function until(done: () => Promise<boolean>): Promise<void> {
  while (!(await done())) await new Promise((r) => setTimeout(r, 50));
}

const auth = () => ({ authorization: `Bearer ${t.admin}` });

describe('envd /files', () => {
  test('a body that claims gzip but is not: 400, and the server lives (engine exec and agent boxes)', async () => {
    for (const h of [engineExecHeaders, envdHeaders]) {
      const r = await t.call('POST', `${ENVD_PREFIX}/files?path=/tmp/x`, {
        key: null,
        headers: { ...h, 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
        raw: 'this is not gzip at all, not even close',
      });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.code, 400);
      assert.match(r.json.message, /gzip/);
      await assertAlive();
    }
  });

  test('a truncated multipart body: 400, not 500 "Unexpected end of form"', async () => {
    const boundary = 'XbOuNdArY';
    const body = `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="/tmp/part.txt"\r\ncontent-type: application/octet-stream\r\n\r\nhalf a fi`;
    const r = await t.call('POST', `${ENVD_PREFIX}/files`, {
      key: null,
      headers: { ...envdHeaders, 'content-type': `multipart/form-data; boundary=${boundary}` },
      raw: body,
    });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.message, /multipart|form/i);
    await assertAlive();
  });

  test('a client that goes away mid-body (multipart and gzip) leaves the server serving', async () => {
    const boundary = 'XbOuNdArY';
    await raw(
      headers('POST', `${ENVD_PREFIX}/files`, { ...envdHeaders, 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': '100000' }),
      `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="/tmp/gone.txt"\r\n\r\npartial`,
      { destroyAfterWrite: true },
    );
    await raw(
      headers('POST', `${ENVD_PREFIX}/files?path=/tmp/gone.gz`, { ...envdHeaders, 'content-encoding': 'gzip', 'content-length': '100000' }),
      Buffer.from([0x1f, 0x8b, 0x08, 0x00]),
      { destroyAfterWrite: true },
    );
    await assertAlive();
  });
});

describe('envd Connect RPCs', () => {
  test('a garbage body to a unary RPC is a 4xx, a cut stream envelope an invalid_argument end message, and the server lives', async () => {
    const unary = await t.call('POST', `${ENVD_PREFIX}/filesystem.Filesystem/Stat`, {
      key: null,
      headers: { ...envdHeaders, 'content-type': 'application/json' },
      raw: '{"path": ',
    });
    assert.ok(unary.status >= 400 && unary.status < 500, `${unary.status} ${unary.text}`);
    assert.equal(unary.json.code, 'invalid_argument', unary.text);
    // A Connect stream whose envelope says 1 MiB and then ends: the stream's end message carries the error.
    const envelope = Buffer.alloc(5);
    envelope.writeUInt32BE(1024 * 1024, 1);
    const stream = await t.call('POST', `${ENVD_PREFIX}/process.Process/Start`, {
      key: null,
      headers: { ...envdHeaders, 'content-type': 'application/connect+json' },
      raw: Buffer.concat([envelope, Buffer.from('{"proc')]),
    });
    assert.equal(stream.status, 200, 'a Connect stream answers its error in the end-stream message');
    assert.match(stream.text, /"code":"invalid_argument".*incomplete envelope/);
    await assertAlive();
  });
});

describe('box and workspace file uploads', () => {
  test('a truncated tar into a workspace: 400 invalid_argument (field tar)', async () => {
    // A valid 512-byte header for a 1000-byte file, then 10 bytes of it and the end.
    const header = Buffer.alloc(512);
    header.write('f.txt', 0);
    header.write('0000644\0', 100);
    header.write('0000000\0', 108);
    header.write('0000000\0', 116);
    header.write('00000001750\0', 124);
    header.write('00000000000\0', 136);
    header.write('        ', 148);
    header.write('0', 156);
    header.write('ustar\0' + '00', 257);
    let sum = 0;
    for (const b of header) sum += b;
    header.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
    const r = await t.call('PUT', `/v1/workspaces/${wsId}/tar/x`, {
      raw: Buffer.concat([header, Buffer.from('0123456789')]),
      headers: { 'content-type': 'application/x-tar' },
    });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'invalid_argument');
    await assertAlive();
  });

  test(
    'clients that go away mid-upload (box file, workspace file, workspace tar) leave the server serving, and the write ends',
    { timeout: 60_000 },
    async () => {
      for (const path of [`/v1/boxes/${boxId}/files/tmp/gone.bin`, `/v1/workspaces/${wsId}/files/gone.bin`, `/v1/workspaces/${wsId}/tar/gone`]) {
        await raw(headers('PUT', path, { ...auth(), 'content-type': 'application/octet-stream', 'content-length': '1000000' }), Buffer.alloc(70_000, 1), {
          destroyAfterWrite: true,
        });
      }
      await assertAlive();
      // The workspace write gave up: its temp file is removed (a write left waiting would hold it,
      // its file handle and its quota reservation for ever).
      await until(async () => {
        const list = await t.call('GET', `/v1/workspaces/${wsId}/files?list=true`);
        return !list.json.entries.some((e: { name: string }) => e.name.startsWith('.sbx-tmp-'));
      });
      // So did the tar import: its staging tree is removed (one left waiting held it and three file handles).
      const staging = join(t.dataDir, 'workspaces', wsNode, wsId, 'staging');
      await until(async () => !existsSync(staging) || readdirSync(staging).length === 0);
    },
  );
});

describe('reading what is not a regular file', () => {
  test('a unix socket and a FIFO in a box: 400 invalid_argument "not a regular file", no hang', async () => {
    // A bound unix socket stays in the filesystem after its process exits (the image's python3).
    const bindSocket = `python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('/tmp/unix.sock')" && test -S /tmp/unix.sock`;
    const mk = await t.call('POST', `/v1/boxes/${boxId}/exec`, { body: { cmd: ['sh', '-c', `mkfifo /tmp/fifo && ${bindSocket}`], user: '0' } });
    assert.equal(mk.status, 200, mk.text);
    assert.equal(mk.json.exitCode, 0, mk.text);
    for (const path of ['/tmp/unix.sock', '/tmp/fifo']) {
      const r = await t.call('GET', `/v1/boxes/${boxId}/files${path}?user=root`);
      assert.equal(r.status, 400, `${path}: ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_argument');
      assert.match(r.json.error.message, /not a regular file/);
    }
    await assertAlive();
  });
});

describe('JSON bodies', () => {
  test('a lone surrogate in a label value or the mount path: 400 invalid_argument naming the field', async () => {
    for (const labels of ['{"a":"\\ud800"}', '{"a":"x\\udc00y"}']) {
      const r = await t.call('POST', '/v1/boxes', { body: `{"image":${JSON.stringify(testEnv.baseImage)},"labels":${labels}}` });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.code, 'invalid_argument');
      assert.match(r.json.error.details?.field ?? '', /labels/);
    }
    // mountPath becomes a label too (sbx.mount-path).
    const m = await t.call('POST', '/v1/boxes', { body: `{"image":${JSON.stringify(testEnv.baseImage)},"mountPath":"/w\\udfff"}` });
    assert.equal(m.status, 400, m.text);
    assert.match(m.json.error.details?.field ?? '', /mountPath/);
  });

  test('a body shorter than its Content-Length is answered 408 and closed after the body timeout', { timeout: 60_000 }, async () => {
    const started = Date.now();
    const r = await raw(headers('POST', '/v1/boxes', { ...auth(), 'content-type': 'application/json', 'content-length': '100' }), '{"image":');
    assert.equal(r.status, 408, r.head);
    assert.match(r.body, /timeout/);
    assert.ok(Date.now() - started >= BODY_TIMEOUT_MS - 100, 'not before the timeout');
    // A raw upload route (fastify does not read the body) and envd are bounded the same way.
    for (const [path, h] of [
      [`/v1/workspaces/${wsId}/files/slow.bin`, auth()],
      [`${ENVD_PREFIX}/files?path=/tmp/slow`, envdHeaders],
    ] as const) {
      const up = await raw(
        headers(path.startsWith('/v1') ? 'PUT' : 'POST', path, { ...h, 'content-type': 'application/octet-stream', 'content-length': '100' }),
        'short',
      );
      assert.equal(up.status, 408, `${path}: ${up.head}`);
    }
    await assertAlive();
  });
});

describe('WebSocket routes', () => {
  const wsUrl = () => t.url.replace(/^http/, 'ws') + `/v1/boxes/${boxId}/exec/ws?cmd=cat`;

  async function opened(): Promise<{ ws: WebSocket; closed: Promise<number> }> {
    const ws = new WebSocket(wsUrl(), { headers: auth() });
    ws.on('error', () => undefined);
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    await once(ws, 'open');
    return { ws, closed };
  }

  test('a message over maxPayload closes with 1009 (message too big)', async () => {
    const { ws, closed } = await opened();
    ws.send(Buffer.alloc(17 * 1024 * 1024, 0x61));
    assert.equal(await closed, 1009);
    await assertAlive();
  });

  test('a first control frame that is not JSON closes with 1008 and invalid_argument', async () => {
    const ws = new WebSocket(wsUrl().replace('?cmd=cat', ''), { headers: auth() });
    ws.on('error', () => undefined);
    const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    await once(ws, 'open');
    ws.send(Buffer.concat([Buffer.from([3]), Buffer.from('{"exec": {{{')]));
    assert.deepEqual(await closed, { code: 1008, reason: 'invalid_argument' });
    await assertAlive();
  });

  test('garbage frames close the socket (1002 protocol error) and the server lives', async () => {
    const { ws, closed } = await opened();
    // An unmasked frame with a reserved opcode: a protocol violation from a client.
    (ws as unknown as { _socket: Socket })._socket.write(Buffer.from([0x83, 0x05, 1, 2, 3, 4, 5]));
    assert.ok([1002, 1006].includes(await closed));
    await assertAlive();
  });
});
