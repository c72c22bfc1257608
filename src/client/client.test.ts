/**
 * What only the SDK has: the network between it and the server. Unreachable servers, dropped
 * connections (GETs retried, creates and execs never), bad keys, env defaults. Against a real
 * server and engine, with a small TCP proxy in front that can drop requests and counts them.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer } from 'node:net';
import type { AddressInfo, Server, Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { SbxError as LibrarySbxError } from '../index.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';
import { testEnv } from '../testing/env.js';
import { Sbx, SbxError } from './index.js';

let t: TestServer;

before(async () => {
  t = await startTestServer('sdk-net');
});
after(async () => {
  await t?.dispose();
});

/** A port nothing listens on: bound once, then closed. */
async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/**
 * Forwards to the real server, or, while `dropping`, resets each connection as a request's
 * first bytes arrive (kept-alive connections included) and counts the request.
 */
class DroppingProxy {
  dropping = false;
  /** Drop only this many requests, then forward again (undefined: all while dropping). */
  dropBudget: number | undefined;
  dropped = 0;
  readonly requests: string[] = [];
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(private readonly target: URL) {
    this.server = createServer((client) => this.onConnection(client));
  }

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return `http://127.0.0.1:${this.port}`;
  }

  private onConnection(client: Socket): void {
    this.sockets.add(client);
    client.on('close', () => this.sockets.delete(client));
    client.on('error', () => undefined);
    let upstream: Socket | undefined;
    client.on('data', (chunk: Buffer) => {
      if (this.dropping && (this.dropBudget === undefined || this.dropBudget > 0)) {
        if (this.dropBudget !== undefined) this.dropBudget--;
        this.dropped++;
        this.requests.push(chunk.toString('latin1').split('\r\n')[0] ?? '');
        upstream?.destroy();
        client.resetAndDestroy();
        return;
      }
      if (!upstream) {
        upstream = new (client.constructor as typeof Socket)();
        upstream.on('error', () => client.destroy());
        upstream.on('close', () => client.destroy());
        upstream.connect(Number(this.target.port), this.target.hostname);
        upstream.on('data', (d: Buffer) => client.write(d));
        this.sockets.add(upstream);
      }
      upstream.write(chunk);
    });
  }

  reset(): void {
    this.requests.length = 0;
    this.dropped = 0;
    this.dropBudget = undefined;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

async function rejectsWith(p: Promise<unknown>, code: string): Promise<SbxError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof SbxError, `an SbxError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return err;
  }
  assert.fail(`expected ${code}, it resolved`);
}

describe('SDK: the network', () => {
  test('an unreachable server is runtime_unavailable naming the URL, for calls, streams and pulls', async () => {
    const url = `http://127.0.0.1:${await deadPort()}`;
    const sbx = new Sbx({ url, apiKey: t.admin, retries: 1, retryDelayMs: 10 });
    for (const call of [() => sbx.get('sb-000000000000'), () => sbx.list(), () => sbx.create({ image: IMAGE })]) {
      const err = await rejectsWith(call(), 'runtime_unavailable');
      assert.ok(err.message.includes(url), err.message);
      assert.equal(err.details?.['url'], url);
      assert.equal(err.details?.['errno'], 'ECONNREFUSED');
      assert.match(err.message, /sbx serve/);
    }
    const pull = (async () => {
      for await (const _ of sbx.pullImage('local', IMAGE)) {
        /* drain */
      }
    })();
    assert.ok((await rejectsWith(pull, 'runtime_unavailable')).message.includes(url));
    const { Transport } = await import('./http.js');
    const { openStream } = await import('./stream.js');
    const stream = openStream(new Transport({ url, apiKey: t.admin, retries: 0, retryDelayMs: 0 }), 'sb-000000000000', ['true']);
    const err = await rejectsWith(stream, 'runtime_unavailable');
    assert.equal(err.details?.['url'], url);
  });

  test('dropped connections: a GET is retried with backoff until it gets through; a create, an exec and a remove never are', async () => {
    const proxy = new DroppingProxy(new URL(t.url));
    const sbx = new Sbx({ url: await proxy.start(), apiKey: t.admin, retries: 3, retryDelayMs: 20 });
    try {
      const box = await sbx.create({ image: IMAGE });
      const ws = await sbx.workspaces.create({ name: 'net' });
      const files = await sbx.workspaces.fs(ws.id);

      proxy.dropping = true;
      proxy.dropBudget = 2;
      const started = Date.now();
      assert.equal((await sbx.get(box.id)).id, box.id, 'the third try got through');
      assert.deepEqual(proxy.requests, [`GET /v1/boxes/${box.id} HTTP/1.1`, `GET /v1/boxes/${box.id} HTTP/1.1`]);
      assert.ok(Date.now() - started >= 20 + 40, 'it backed off between tries (20 ms, then 40 ms)');

      proxy.reset();
      const gone = await rejectsWith(sbx.list(), 'runtime_unavailable');
      assert.equal(proxy.dropped, 4, 'one try and three retries');
      assert.match(gone.message, /4 tries/);

      for (const [what, call, line] of [
        ['create', () => sbx.create({ image: IMAGE }), 'POST /v1/boxes HTTP/1.1'],
        ['exec', () => box.exec(['touch', '/tmp/ran']), `POST /v1/boxes/${box.id}/exec HTTP/1.1`],
        ['remove', () => box.remove(), `DELETE /v1/boxes/${box.id} HTTP/1.1`],
        ['workspace create', () => sbx.workspaces.create({ name: 'never' }), 'POST /v1/workspaces HTTP/1.1'],
        ['writeFile', () => files.writeFile('f.txt', 'x'), `PUT /v1/workspaces/${ws.id}/files/f.txt HTTP/1.1`],
      ] as const) {
        proxy.reset();
        await rejectsWith(call(), 'runtime_unavailable');
        assert.deepEqual(proxy.requests, [line], `${what}: sent once`);
      }

      proxy.dropping = false;
      assert.equal((await box.exec(['sh', '-c', 'test -e /tmp/ran && echo ran || echo never'])).stdout, 'never\n');
      assert.equal(await files.exists('f.txt'), false);
      await box.remove();
      await sbx.workspaces.delete(ws.id);
    } finally {
      await proxy.close();
    }
  });

  test('a stream whose output and exit arrive in the same read as the upgrade answer loses neither', async () => {
    // A fast command on a fast box: the server's 101, a stdout frame, the exit frame and the close
    // can reach the client in one TCP segment. A raw server sends exactly that, in one write.
    const wsFrame = (payload: Buffer, opcode = 2) => Buffer.concat([Buffer.from([0x80 | opcode, payload.length]), payload]);
    const server = createServer((sock) => {
      sock.once('data', (req: Buffer) => {
        const key = /sec-websocket-key: (\S+)/i.exec(req.toString())![1]!;
        const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
        const head = `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`;
        sock.write(
          Buffer.concat([
            Buffer.from(head),
            wsFrame(Buffer.concat([Buffer.from([1]), Buffer.from('fast\n')])),
            wsFrame(Buffer.concat([Buffer.from([3]), Buffer.from(JSON.stringify({ exit: 0 }))])),
            wsFrame(Buffer.from([0x03, 0xe8]), 8),
          ]),
        );
        sock.on('data', () => undefined);
        setTimeout(() => sock.end(), 50);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { openStream } = await import('./stream.js');
      const { Transport } = await import('./http.js');
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      for (let i = 0; i < 5; i++) {
        const st = await openStream(new Transport({ url, apiKey: 'k', retries: 0, retryDelayMs: 0 }), 'sb-000000000000', ['true']);
        const out: Buffer[] = [];
        st.stdout.on('data', (c: Buffer) => out.push(c));
        const ended = new Promise((resolve) => st.stdout.once('end', resolve));
        assert.equal(await st.wait(), 0, `run ${i}: the exit frame arrived`);
        await ended;
        assert.equal(Buffer.concat(out).toString(), 'fast\n', `run ${i}: the output arrived`);
      }
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  test('a bad or missing key is unauthorized, on HTTP calls and on the WebSocket exec', async () => {
    const good = new Sbx({ url: t.url, apiKey: t.admin });
    const box = await good.create({ image: IMAGE });
    try {
      for (const apiKey of ['sbxk_0000000000000000_' + 'A'.repeat(43), '']) {
        const bad = new Sbx({ url: t.url, apiKey });
        await rejectsWith(bad.list(), 'unauthorized');
        await rejectsWith(bad.get(box.id), 'unauthorized');
        await rejectsWith(bad.create({ image: IMAGE }), 'unauthorized');
      }
      // A box object obtained with a good key, used with a bad one: the stream's upgrade is refused.
      const { Transport } = await import('./http.js');
      const { openStream } = await import('./stream.js');
      const transport = new Transport({ url: t.url, apiKey: 'garbage', retries: 0, retryDelayMs: 0 });
      await rejectsWith(openStream(transport, box.id, ['true']), 'unauthorized');
      const bad = await rejectsWith(box.stream(['true'], { timeoutMs: -1 }), 'invalid_argument');
      assert.equal(bad.details?.['field'], 'timeoutMs', 'the option, as the library names it');
      assert.equal(bad.details?.['in'], 'query', 'where the server found it');
      await rejectsWith(
        good.get('sb-000000000000').then((b) => b.stream(['true'])),
        'not_found',
      );
    } finally {
      await box.remove();
    }
  });

  test('server errors keep their code and details; SbxError is the library’s own class', async () => {
    const sbx = new Sbx({ url: t.url, apiKey: t.admin });
    const err = await rejectsWith(sbx.create({ image: IMAGE, memory: -1 }), 'invalid_argument');
    assert.ok(err instanceof LibrarySbxError, 'instanceof the SbxError that sbx exports');
    assert.equal(SbxError, LibrarySbxError);
    assert.equal(err.details?.['field'], 'memory');
    assert.equal(err.details?.['in'], 'body');
    assert.match(err.message, /^memory: /, 'the field as the caller passed it, not a wire path');
    const box = await sbx.create({ image: IMAGE });
    try {
      const inUse = await rejectsWith(sbx.removePool('local'), 'pool_in_use');
      assert.match(inUse.message, /pass \{ force: true \}$/, 'the option as an SDK caller passes it');
      assert.equal(inUse.details?.['hint'], 'pass { force: true }');
    } finally {
      await box.remove();
    }
    const user = await sbx.keys.create({ name: 'bob', role: 'user' });
    assert.match(user.key, /^sbxk_/);
    assert.ok((await sbx.keys.list()).some((k) => k.id === user.id && k.role === 'user'));
    const bob = new Sbx({ url: t.url, apiKey: user.key });
    const forbidden = await rejectsWith(bob.pools(), 'forbidden');
    assert.match(forbidden.message, /admin/);
    await rejectsWith(bob.create({ image: IMAGE, owner: 'carol' }), 'forbidden');
    await sbx.keys.revoke(user.id);
    await rejectsWith(bob.list(), 'unauthorized');
    await rejectsWith(sbx.removePool('nope'), 'pool_not_found');
  });

  test('images.pull: the short form with the server’s first pool; progress as it comes, errors as SbxError', async () => {
    const sbx = new Sbx({ url: t.url, apiKey: t.admin });
    const statuses: string[] = [];
    for await (const e of sbx.images.pull(testEnv.pullImage)) statuses.push(e.status);
    assert.ok(statuses.length > 0 && statuses.every((x) => typeof x === 'string'), statuses.join(' | '));
    assert.equal(await sbx.images.exists(testEnv.pullImage), true);
    assert.equal(await sbx.images.exists('127.0.0.1:5000/sbx/no-such-image:latest'), false);
    const bad = (async () => {
      for await (const _ of sbx.images.pull('NOT A REF')) {
        /* drain */
      }
    })();
    assert.equal((await rejectsWith(bad, 'invalid_argument')).details?.['field'], 'ref');
    const controller = new AbortController();
    controller.abort();
    const aborted = (async () => {
      for await (const _ of sbx.images.pull(testEnv.pullImage, { signal: controller.signal })) {
        /* drain */
      }
    })();
    await rejectsWith(aborted, 'cancelled');
  });

  test('defaults from SBX_URL and SBX_API_KEY; a bad url is invalid_argument', async () => {
    const saved = { url: process.env['SBX_URL'], key: process.env['SBX_API_KEY'] };
    process.env['SBX_URL'] = t.url;
    process.env['SBX_API_KEY'] = t.admin;
    try {
      const sbx = new Sbx();
      assert.equal(sbx.url, t.url);
      assert.ok(Array.isArray(await sbx.list()));
    } finally {
      for (const [k, v] of [
        ['SBX_URL', saved.url],
        ['SBX_API_KEY', saved.key],
      ] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    assert.throws(
      () => new Sbx({ url: 'not a url' }),
      (e: unknown) => e instanceof SbxError && e.code === 'invalid_argument' && e.details?.['field'] === 'url',
    );
    assert.throws(
      () => new Sbx({ url: 'ftp://x' }),
      (e: unknown) => e instanceof SbxError && e.code === 'invalid_argument',
    );
  });
});
