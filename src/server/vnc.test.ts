/**
 * VNC end to end: an sbx-desktop box made through the Manager with `vnc: true`, the real app
 * (buildApp, its VNC routes on stand-in deps) on 127.0.0.1, and a headless chromium that opens the viewer page,
 * connects through the bridge and shows the desktop (checked by pixels, kept as
 * .build/artifacts/vnc.png). The bridge's own behaviour (backpressure, close codes, shutdown) is
 * tested against a local TCP server standing in for the VNC server.
 *
 * The authorization and the dialer are the test's own (a cookie; the box's published port): the
 * real ones are injected by the server.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import type { AddressInfo, Server, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Duplex } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import Docker from 'dockerode';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import pino from 'pino';
import { WebSocket } from 'ws';
import { SbxError, isSbxError } from '../errors.js';
import { Manager } from '../sandbox/index.js';
import type { Box } from '../sandbox/index.js';
import { openTestRuntime, waitForImage } from '../testing/boxes.js';
import { browserMissing, openPage } from '../testing/browser.js';
import { testEnv } from '../testing/env.js';
import { waitFor, within } from '../testing/wait.js';
import { buildApp } from './app.js';
import { FailureLimiter } from './auth.js';
import { StreamRegistry } from './context.js';
import type { ServerContext } from './context.js';
import { KeyStore } from './keys.js';
import { ServerMetrics } from './metrics.js';
import { rawRequest, removeContainersOf } from '../testing/server.js';
import { assetFile } from './vnc.js';
import type { VncDeps } from './vnc.js';

const MiB = 1024 * 1024;
/** images/sbx-desktop/desktop.sh's root colour. */
const ROOT_RGB = [0x2a, 0x6f, 0x97] as const;
const ARTIFACT = resolve('.build/artifacts/vnc.png');

const secret = randomBytes(12).toString('hex');
const COOKIE = 'sbx_vnc_test';
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-vnc-'));
const name = `vnc-${process.pid}`;
const docker = new Docker();
let manager: Manager;
let app: FastifyInstance;
let ctx: ServerContext;
let base: string;
let desk: Box;
let plain: Box;
let createToReadyMs = 0;
/** A test may point the VNC port of a box at a stand-in server. */
const dialOverride = new Map<string, () => Promise<Duplex>>();

function cookieOf(req: FastifyRequest): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [k, v] = part.trim().split('=');
    if (k === COOKIE) return v;
  }
  return undefined;
}

/** The client socket of the last request authorize saw (a test waits for it to be gone). */
let lastAuthorizedSocket: Socket | undefined;

const vncDeps: VncDeps = {
  async authorize(req, boxId) {
    lastAuthorizedSocket = req.raw.socket as Socket;
    const given = cookieOf(req);
    if (given === undefined) throw new SbxError('unauthorized', 'no credential');
    if (given !== secret) throw new SbxError('forbidden', 'wrong credential');
    await manager.get(boxId);
    return { boxId, via: 'cookie' };
  },
  async dial(boxId, port) {
    const fake = dialOverride.get(boxId);
    if (fake) return fake();
    return dialPublished(await manager.get(boxId), port);
  },
  async hasVnc(boxId) {
    return (await (await manager.get(boxId)).info()).vnc;
  },
};

async function publishedPort(box: Box, port: number): Promise<number> {
  const p = (await box.info()).ports.find((x) => x.containerPort === port && x.hostIp === '127.0.0.1');
  if (!p) throw new SbxError('not_available', `port ${port} of ${box.id} is not published on 127.0.0.1`);
  return p.hostPort;
}

async function dialPublished(box: Box, port: number): Promise<Duplex> {
  const hostPort = await publishedPort(box, port);
  return new Promise((resolveSocket, reject) => {
    const s = connect(hostPort, '127.0.0.1');
    s.once('connect', () => resolveSocket(s));
    s.once('error', reject);
  });
}

/** The first bytes a TCP connection reads within `ms`, or '' (the engine's proxy accepts before the box listens). */
function firstBytes(port: number, ms: number): Promise<string> {
  return new Promise((res) => {
    const s = connect(port, '127.0.0.1');
    const done = (v: string) => {
      clearTimeout(t);
      s.destroy();
      res(v);
    };
    const t = setTimeout(() => done(''), ms);
    s.once('data', (d: Buffer) => done(d.toString('latin1')));
    s.once('error', () => done(''));
    s.once('close', () => done(''));
  });
}

async function waitForRfb(box: Box, timeoutMs: number): Promise<string> {
  const port = await publishedPort(box, 5900);
  const until = Date.now() + timeoutMs;
  for (;;) {
    const banner = await firstBytes(port, 500);
    if (banner.startsWith('RFB ')) return banner;
    if (Date.now() > until) throw new Error(`no RFB banner on 127.0.0.1:${port} within ${timeoutMs} ms (last: ${JSON.stringify(banner)})`);
    await sleep(50);
  }
}

function wsOpen(path: string, opts: { cookie?: string } = {}): Promise<WebSocket> {
  const ws = new WebSocket(base.replace(/^http/, 'ws') + path, { headers: opts.cookie === undefined ? {} : { cookie: `${COOKIE}=${opts.cookie}` } });
  return new Promise((res, rej) => {
    ws.once('open', () => res(ws));
    ws.once('error', rej);
    ws.once('unexpected-response', (_req, response) => {
      let body = '';
      response.on('data', (c: Buffer) => (body += c.toString()));
      response.on('end', () => rej(Object.assign(new Error(`HTTP ${response.statusCode}`), { status: response.statusCode, body: JSON.parse(body || '{}') })));
    });
  });
}

function closed(ws: WebSocket): Promise<{ code: number; reason: string }> {
  return new Promise((res) => ws.once('close', (code, reason) => res({ code, reason: reason.toString() })));
}

/** A stand-in VNC server on 127.0.0.1 that hands each connection to `onConn`. */
async function fakeServer(onConn: (s: Socket) => void): Promise<{ server: Server; dial: () => Promise<Duplex> }> {
  const server = createServer(onConn);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    server,
    dial: () =>
      new Promise((res, rej) => {
        const s = connect(port, '127.0.0.1');
        s.once('connect', () => res(s));
        s.once('error', rej);
      }),
  };
}

const get = (path: string, cookie?: string) => rawRequest(base, 'GET', path, cookie === undefined ? {} : { cookie: `${COOKIE}=${cookie}` });

before(async () => {
  const rt = openTestRuntime();
  try {
    await waitForImage(rt, testEnv.desktopImage, 5 * 60_000);
  } finally {
    await rt.close();
  }
  manager = new Manager({ name, dataDir, cleanupIntervalMs: 0, logger: pino({ level: 'silent' }), pools: [{ name: 'local', addr: testEnv.engineAddr }] });
  await manager.start();
  const keys = new KeyStore(dataDir);
  await keys.load();
  const metrics = new ServerMetrics({ boxes: async () => [], pools: async () => [], cleanupStats: () => undefined, warm: async () => [] });
  ctx = {
    manager,
    keys,
    metrics,
    streams: new StreamRegistry(),
    log: pino({ level: 'silent' }),
    shuttingDown: () => false,
    publicUrl: () => base,
    proxyDomain: undefined,
  };
  app = await buildApp(ctx, { bodyLimitBytes: MiB, limiter: new FailureLimiter(1000, 60_000), vnc: { ...vncDeps, streams: ctx.streams } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

  const t0 = performance.now();
  [desk, plain] = await Promise.all([
    manager.create({ image: testEnv.desktopImage, id: 'desk', vnc: true }),
    manager.create({ image: testEnv.baseImage, id: 'plain' }),
  ]);
  await waitForRfb(desk, 30_000);
  createToReadyMs = performance.now() - t0;
});

after(async () => {
  await app?.close();
  await removeContainersOf(name);
  await manager?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('VNC boxes (real engine)', () => {
  test('vnc: true publishes 5900 on 127.0.0.1 and sets a 256 MiB /dev/shm, with no capability a plain box lacks', async (t) => {
    t.diagnostic(`create to VNC ready (RFB banner on the published port): ${Math.round(createToReadyMs)} ms`);
    const [d, p] = await Promise.all([docker.getContainer(desk.containerId).inspect(), docker.getContainer(plain.containerId).inspect()]);
    assert.deepEqual(
      d.HostConfig.PortBindings?.['5900/tcp']?.map((b: { HostIp: string }) => b.HostIp),
      ['127.0.0.1'],
    );
    assert.equal(d.HostConfig.ShmSize, 256 * MiB);
    assert.equal(p.HostConfig.ShmSize, 64 * MiB, "a plain box keeps the engine's default");
    assert.deepEqual(d.HostConfig.CapAdd, p.HostConfig.CapAdd, 'the same capabilities as a box without vnc');
    assert.ok(!(d.HostConfig.CapAdd ?? []).includes('SYS_ADMIN'));
    assert.deepEqual(d.HostConfig.CapDrop, ['ALL']);
    assert.ok(d.HostConfig.SecurityOpt?.includes('no-new-privileges'));
    assert.equal(p.HostConfig.PortBindings?.['5900/tcp'], undefined);
    const shm = await desk.exec(['df', '-k', '/dev/shm']);
    assert.match(shm.stdout, /\s262144\s/, shm.stdout);
  });

  test('the desktop runs as uid 1000 and its VNC server listens on all interfaces of the box', async () => {
    const ps = await desk.exec(['ps', '-o', 'user,args']);
    for (const prog of ['Xvfb', 'twm', 'xclock', 'xterm', 'x11vnc']) {
      const line = ps.stdout.split('\n').find((l) => l.includes(prog) && !l.includes('ps -o'));
      assert.ok(line, `${prog} runs:\n${ps.stdout}`);
      assert.match(line, /^\s*(sandbox|1000)\s/, line);
    }
    // 0.0.0.0:5900 (hex 170C) in state LISTEN (0A).
    const tcp = await desk.exec(['cat', '/proc/net/tcp']);
    assert.match(tcp.stdout, /^\s*\d+: 00000000:170C 00000000:0000 0A /m, tcp.stdout);
    assert.equal(await waitForRfb(desk, 5000), 'RFB 003.008\n');
  });

  test('chromium opens the viewer page, connects through the bridge and shows the desktop', async (t) => {
    const missing = await browserMissing();
    if (missing) {
      if (process.env['SBX_REQUIRE_BROWSER']) assert.fail(`SBX_REQUIRE_BROWSER is set but ${missing}`);
      t.skip(`no browser: ${missing}`);
      return;
    }
    const [r, g, b] = ROOT_RGB;
    const run = await openPage({
      url: `${base}/v1/boxes/desk/vnc`,
      cookies: [{ name: COOKIE, value: secret, url: base }],
      // Connected, and a first frame drawn: the bottom-right corner shows the root colour.
      waitFor: `document.body.dataset.vnc === 'connected' && (() => {
        const c = document.querySelector('#screen canvas');
        if (!c || c.width < 100) return false;
        const d = c.getContext('2d').getImageData(c.width - 4, c.height - 4, 1, 1).data;
        return d[0] === ${r} && d[1] === ${g} && d[2] === ${b};
      })()`,
      timeoutMs: 30_000,
      screenshot: ARTIFACT,
      inspect: (page) =>
        page.evaluate<{ width: number; height: number; root: number; white: number; black: number; colours: number }>(`(() => {
          const c = document.querySelector('#screen canvas');
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let root = 0, white = 0, black = 0;
          const colours = new Set();
          for (let i = 0; i < d.length; i += 4) {
            if (d[i] === ${r} && d[i + 1] === ${g} && d[i + 2] === ${b}) root++;
            else if (d[i] > 240 && d[i + 1] > 240 && d[i + 2] > 240) white++;
            else if (d[i] < 16 && d[i + 1] < 16 && d[i + 2] < 16) black++;
            if (colours.size < 1000) colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
          }
          return { width: c.width, height: c.height, root, white, black, colours: colours.size };
        })()`),
    });
    const px = run.result.width * run.result.height;
    t.diagnostic(`viewer page: load ${Math.round(run.loadMs)} ms, connected with a first frame ${Math.round(run.readyMs)} ms after navigation`);
    t.diagnostic(
      `canvas ${run.result.width}x${run.result.height}: root ${run.result.root}, white ${run.result.white}, black ${run.result.black}, colours ${run.result.colours}`,
    );
    assert.equal(run.status, 200);
    assert.deepEqual([run.result.width, run.result.height], [1280, 800], "the desktop's geometry");
    assert.ok(run.result.root / px > 0.5, 'most of the screen is the root colour');
    assert.ok(run.result.white / px > 0.03, 'the terminal and the clock face are there (white)');
    assert.ok(run.result.colours >= 3, 'not one flat colour');
    assert.deepEqual(run.consoleErrors, [], 'no console errors');
  });

  test('the page and the bridge refuse a request without authorization (401) or with a wrong one (403)', async () => {
    const page = await get('/v1/boxes/desk/vnc/');
    assert.equal(page.status, 401);
    assert.equal(page.json.error.code, 'unauthorized');
    assert.equal((await get('/v1/boxes/desk/vnc/', 'nope')).json.error.code, 'forbidden');
    await assert.rejects(wsOpen('/v1/boxes/desk/vnc/websockify'), (e: { status: number; body: { error: { code: string } } }) => {
      assert.equal(e.status, 401);
      assert.equal(e.body.error.code, 'unauthorized');
      return true;
    });
    await assert.rejects(wsOpen('/v1/boxes/desk/vnc/websockify', { cookie: 'nope' }), (e: { status: number }) => e.status === 403);
  });

  test('a box created without vnc: the page and the bridge answer not_available (503); an unknown box not_found', async () => {
    const page = await get('/v1/boxes/plain/vnc/', secret);
    assert.equal(page.status, 503);
    assert.equal(page.json.error.code, 'not_available');
    assert.match(page.json.error.message, /vnc: true/);
    await assert.rejects(wsOpen('/v1/boxes/plain/vnc/websockify', { cookie: secret }), (e: { status: number; body: { error: { code: string } } }) => {
      assert.equal(e.status, 503);
      assert.equal(e.body.error.code, 'not_available');
      return true;
    });
    assert.equal((await get('/v1/boxes/nobox/vnc/', secret)).json.error.code, 'not_found');
  });

  test('the viewer page: same-origin relative URLs only, no CDN, a CSP, and vnc without the slash redirects to vnc/', async () => {
    const page = await get('/v1/boxes/desk/vnc/', secret);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    assert.match(page.headers.get('content-security-policy') ?? '', /connect-src 'self'/);
    assert.ok(!/https?:\/\//.test(page.text), 'no absolute URL in the page');
    assert.match(page.text, /import\('\.\.\/\.\.\/\.\.\/vnc\/assets\/core\/rfb\.js'\)/);
    assert.match(page.text, /new URL\('websockify', location\.href\)/);
    const redirect = await get('/v1/boxes/desk/vnc?x=1');
    assert.equal(redirect.status, 308);
    assert.equal(redirect.headers.get('location'), 'vnc/?x=1');
  });

  test("the assets route serves noVNC's modules as JavaScript and refuses .. segments (400) and anything else (404)", async () => {
    const rfb = await get('/v1/vnc/assets/core/rfb.js');
    assert.equal(rfb.status, 200);
    assert.equal(rfb.headers.get('content-type'), 'text/javascript; charset=utf-8');
    assert.match(rfb.text, /export default class RFB/);
    assert.equal((await get('/v1/vnc/assets/vendor/pako/lib/zlib/inflate.js')).status, 200);
    for (const path of [
      '../package.json',
      'core/../../package.json',
      '%2e%2e/%2e%2e/%2e%2e/etc/passwd',
      'core/%2e%2e/%2e%2e/package.json',
      'core//rfb.js',
      'core/rfb.js%00',
    ]) {
      const res = await get(`/v1/vnc/assets/${path}`);
      assert.equal(res.status, 400, path);
      assert.equal(res.json.error.code, 'invalid_argument', path);
    }
    for (const path of ['package.json', 'core/nothing.js', 'docs/LICENSE.MPL-2.0', 'core']) {
      const res = await get(`/v1/vnc/assets/${path}`);
      assert.equal(res.status, 404, path);
      assert.equal(res.json.error.code, 'not_found', path);
    }
  });

  test('assetFile: a symlink inside the package that leads out of it is not_found', async () => {
    const root = mkdtempSync(join(tmpdir(), 'sbx-novnc-'));
    try {
      mkdirSync(join(root, 'core'));
      writeFileSync(join(root, 'core', 'ok.js'), 'export {};');
      writeFileSync(join(tmpdir(), `sbx-outside-${process.pid}.js`), 'secret');
      symlinkSync(join(tmpdir(), `sbx-outside-${process.pid}.js`), join(root, 'core', 'out.js'));
      assert.equal((await assetFile(root, 'core/ok.js')).path, join(root, 'core', 'ok.js'));
      await assert.rejects(assetFile(root, 'core/out.js'), (e) => isSbxError(e, 'not_found'));
    } finally {
      rmSync(root, { recursive: true, force: true });
      rmSync(join(tmpdir(), `sbx-outside-${process.pid}.js`), { force: true });
    }
  });

  test('the bridge carries RFB both ways: the handshake through a Node client reaches the security types', async () => {
    const ws = await wsOpen('/v1/boxes/desk/vnc/websockify', { cookie: secret });
    const frames: Buffer[] = [];
    const next = () =>
      new Promise<Buffer>((res) => {
        const f = frames.shift();
        if (f) return res(f);
        ws.once('message', (d: Buffer) => res((frames.shift(), d)));
      });
    ws.on('message', (d: Buffer) => frames.push(d));
    assert.equal((await next()).toString(), 'RFB 003.008\n');
    ws.send(Buffer.from('RFB 003.008\n'));
    const types = await next();
    assert.ok(types[0]! >= 1, 'at least one security type');
    assert.ok([...types.subarray(1, 1 + types[0]!)].includes(1), 'None (x11vnc -nopw)');
    const end = closed(ws);
    ws.close(1000);
    assert.equal((await end).code, 1000);
  });

  test('backpressure both ways: a reader that stops reading stops the writer, and every byte arrives in order', async () => {
    const total = 48 * MiB;
    let written = 0;
    let serverSocket!: Socket;
    const received = createHash('sha256');
    const expected = createHash('sha256');
    const fake = await fakeServer((s) => {
      serverSocket = s;
      const chunk = randomBytes(64 * 1024);
      const pump = () => {
        while (written < total) {
          expected.update(chunk);
          written += chunk.length;
          if (!s.write(chunk)) return void s.once('drain', pump);
        }
      };
      pump();
    });
    dialOverride.set('desk', fake.dial);
    try {
      const ws = await wsOpen('/v1/boxes/desk/vnc/websockify', { cookie: secret });
      ws.pause();
      await sleep(1000);
      const whilePaused = written;
      assert.ok(whilePaused < 16 * MiB, `the VNC side stopped writing while the client read nothing (${whilePaused} bytes written)`);
      let got = 0;
      const all = new Promise<void>((res) =>
        ws.on('message', (d: Buffer) => {
          received.update(d);
          got += d.length;
          if (got === total) res();
        }),
      );
      ws.resume();
      await all;
      assert.equal(received.digest('hex'), expected.digest('hex'));

      // The other way: the VNC side stops reading, the client's socket fills and stops draining.
      // Many messages, as RFB sends them: one message is always read whole, however large.
      serverSocket.pause();
      const msg = randomBytes(64 * 1024);
      const count = 512;
      const big = { length: msg.length * count };
      for (let i = 0; i < count; i++) ws.send(msg);
      await sleep(1000);
      assert.ok(ws.bufferedAmount > 8 * MiB, `the client is held back while the VNC side reads nothing (${ws.bufferedAmount} bytes still buffered)`);
      let back = 0;
      const drained = new Promise<void>((res) =>
        serverSocket.on('data', (d: Buffer) => {
          back += d.length;
          if (back === big.length) res();
        }),
      );
      serverSocket.resume();
      await drained;
      const end = closed(ws);
      ws.close();
      await end;
    } finally {
      dialOverride.delete('desk');
      fake.server.close();
    }
  });

  test('a viewer that leaves during the dial (a box waking up) leaves no stream open to the VNC port', async () => {
    let serverSide!: (s: Socket) => void;
    const accepted = new Promise<Socket>((r) => (serverSide = r));
    const fake = await fakeServer((s) => {
      s.on('error', () => undefined);
      s.resume(); // its 'end', then 'close', once the other side goes
      s.write('RFB 003.008\n'); // the greeting a VNC server sends first, which nobody reads
      serverSide(s);
    });
    // The dial ends only once the viewer's connection is gone, as a slow wake would.
    dialOverride.set('desk', async () => {
      await waitFor(() => lastAuthorizedSocket?.destroyed === true, { what: "the viewer's connection to be gone" });
      return fake.dial();
    });
    try {
      lastAuthorizedSocket = undefined;
      const u = new URL(base);
      const sock = connect({ host: u.hostname, port: Number(u.port) });
      await new Promise((r) => sock.once('connect', r));
      sock.on('error', () => undefined);
      sock.write(
        `GET /v1/boxes/desk/vnc/websockify HTTP/1.1\r\nhost: ${u.host}\r\ncookie: ${COOKIE}=${secret}\r\nconnection: Upgrade\r\nupgrade: websocket\r\n` +
          `sec-websocket-version: 13\r\nsec-websocket-key: ${randomBytes(16).toString('base64')}\r\n\r\n`,
      );
      await waitFor(() => lastAuthorizedSocket !== undefined, { what: 'the request to be authorized' });
      sock.resetAndDestroy(); // a reset, as a load balancer or a killed viewer sends
      const conn = await within(accepted, 'the dial to reach the VNC port');
      await within(new Promise((r) => conn.once('close', r)), 'the stream to the VNC port to be closed');
    } finally {
      dialOverride.delete('desk');
      fake.server.close();
    }
  });

  test('close codes: the VNC server closing is 1000, a text frame 1003, server shutdown 1001 with its code', async () => {
    const fake = await fakeServer((s) => {
      s.on('data', (d: Buffer) => {
        if (d.toString() === 'bye') s.end();
      });
      s.on('error', () => undefined);
    });
    dialOverride.set('desk', fake.dial);
    try {
      let ws = await wsOpen('/v1/boxes/desk/vnc/websockify', { cookie: secret });
      let end = closed(ws);
      ws.send(Buffer.from('bye'));
      assert.equal((await end).code, 1000);

      ws = await wsOpen('/v1/boxes/desk/vnc/websockify', { cookie: secret });
      end = closed(ws);
      ws.send('text');
      assert.equal((await end).code, 1003);

      ws = await wsOpen('/v1/boxes/desk/vnc/websockify', { cookie: secret });
      end = closed(ws);
      await waitFor(() => ctx.streams.all().length > 0, { what: 'the bridge to register its stream' });
      const open = ctx.streams.all();
      assert.equal(open.length, 1, 'the bridge is registered for graceful shutdown');
      open[0]!.abort(new SbxError('not_available', 'shutting down'));
      assert.deepEqual(await end, { code: 1001, reason: 'not_available' });
      await open[0]!.done;
    } finally {
      dialOverride.delete('desk');
      fake.server.close();
    }
  });

  test('a client that goes away closes the stream to the box', async () => {
    let resolveGone!: () => void;
    const gone = new Promise<void>((res) => (resolveGone = res));
    let resolveDialled!: () => void;
    const dialled = new Promise<void>((res) => (resolveDialled = res));
    const fake = await fakeServer((s) => {
      resolveDialled();
      s.on('close', () => resolveGone());
      s.on('error', () => undefined);
    });
    dialOverride.set('desk', fake.dial);
    try {
      const ws = await wsOpen('/v1/boxes/desk/vnc/websockify', { cookie: secret });
      await within(dialled, 'the bridge to dial the VNC side');
      ws.terminate();
      await within(gone, 'the bridge to close the stream to the box');
    } finally {
      dialOverride.delete('desk');
      fake.server.close();
    }
  });

  test('SIGTERM stops the desktop box at once with exit 0', async () => {
    await desk.stop();
    const c = await docker.getContainer(desk.containerId).inspect();
    // 0, not 137: the desktop ended on SIGTERM, before the stop timeout's SIGKILL (which no
    // elapsed-time bound can tell apart from a slow engine).
    assert.equal(c.State.ExitCode, 0);
    assert.equal(c.State.OOMKilled, false);
  });
});
