/**
 * VNC in the browser: `GET /v1/boxes/:id/vnc/` is a viewer page (noVNC's RFB client from the
 * `@novnc/novnc` package, served by sbx under `/v1/vnc/assets/`, no CDN) whose WebSocket,
 * `/v1/boxes/:id/vnc/websockify`, is bridged byte for byte to the box's VNC port.
 *
 * Who may use a box's VNC and how a stream to its port is opened are injected (`authorize`,
 * `dial`), so the page and the bridge go through the same port authorization as the HTTP proxy.
 * The routes are `public` to the app's own API-key hook: a browser sends no Authorization header,
 * and `authorize` decides from the request (API key, signed token, cookie).
 *
 * Every URL the page uses is relative to its own, so it works unchanged behind a path prefix.
 */
import { createRequire } from 'node:module';
import { readFile, realpath, stat } from 'node:fs/promises';
import { dirname, extname, join, sep } from 'node:path';
import type { Duplex } from 'node:stream';
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { WebSocket } from 'ws';
import { z } from 'zod';
import { SbxError, invalidArgument } from '../errors.js';
import { VNC_PORT } from '../sandbox/box-spec.js';
import type { StreamRegistry } from './context.js';
import { mapError } from './errors.js';
import { requireOwnOrigin, swapTokenForCookie } from './port-auth.js';
import { PORT_SECURITY } from './openapi.js';
import { COMMON_ERRORS, boxIdParam, noContent, replies } from './schemas.js';

/** How a request was let in: a token that came as `?sbx_token=` is swapped for a cookie by the page. */
export interface VncGrant {
  /** The box the grant is for: a prefix in the path resolved to its id. Everything after uses this id. */
  boxId: string;
  via: 'key' | 'query' | 'cookie';
  /** With a token: when it expires (epoch ms). */
  expiresAt?: number;
}

export interface VncDeps {
  /**
   * Resolves when `req` may reach `port` of box `boxId`; throws SbxError `unauthorized`,
   * `forbidden` or `not_found` (another owner's box looks missing) otherwise.
   */
  authorize(req: FastifyRequest, boxId: string, port: number): Promise<VncGrant>;
  /** A byte stream to `port` of the box. An open stream counts as use of the box (the dialer's job). */
  dial(boxId: string, port: number): Promise<Duplex>;
  /** Whether the box was created with `vnc: true`; not_found for an unknown box. */
  hasVnc(boxId: string): Promise<boolean>;
  /** Open bridges join it, so graceful shutdown waits for them and then ends them (code 1001). */
  streams?: StreamRegistry;
  /** The server's public URL: its origin may open the bridge with the cookie, beside the request's own Host. */
  publicUrl?(): string | undefined;
  /** The `@novnc/novnc` package directory; default: resolved from node_modules. */
  novncDir?: string;
}

/** The WebSocket's close codes, beside 1000 (the VNC server closed) and 1001 (server shutdown). */
export const VNC_CLOSE = {
  /** A text frame: RFB is binary. */
  unsupportedData: 1003,
  /** The stream to the box failed. */
  upstreamError: 1011,
} as const;

const HIGH_WATER = 1024 * 1024;
const LOW_WATER = 256 * 1024;
const DIAL_TIMEOUT_MS = 10_000;
/** How often a socket paused for a full TCP side is probed for a client that went away. */
const PAUSED_PING_MS = 1000;

/** What the assets route serves: the client's modules and the pako inflater they import, as scripts only. */
const ASSET_DIRS = new Set(['core', 'vendor']);
const ASSET_TYPES: Record<string, string> = { '.js': 'text/javascript; charset=utf-8' };

const assetParams = z.object({ '*': z.string().max(1024) }).strict();

export function vncRoutes(app: FastifyInstance, deps: VncDeps): void {
  const r = app.withTypeProvider<ZodTypeProvider>();
  const novnc = novncRoot(deps.novncDir);

  // Relative URLs in the page need the trailing slash; the redirect is relative too (path prefixes).
  r.get(
    '/v1/boxes/:id/vnc',
    {
      config: { auth: 'public' },
      schema: {
        summary: 'Redirects to the VNC viewer page (vnc/)',
        tags: ['vnc'],
        params: boxIdParam,
        response: replies({ 308: noContent('to vnc/') }, [400]),
      },
    },
    async (req, reply) => {
      const query = req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : '';
      return reply.code(308).header('location', `vnc/${query}`).send();
    },
  );

  r.get(
    '/v1/boxes/:id/vnc/',
    {
      config: { auth: 'box' },
      schema: {
        summary: 'The VNC viewer page of a box created with vnc: true (noVNC, served by sbx)',
        tags: ['vnc'],
        params: boxIdParam,
        security: PORT_SECURITY,
        response: replies(
          {
            200: { description: 'the viewer page', content: { 'text/html': { schema: z.string() } } } as unknown as z.ZodType,
            303: noContent('a ?sbx_token= swapped for the cookie: the same URL without it'),
          },
          [...COMMON_ERRORS, 504],
        ),
      },
    },
    async (req, reply) => {
      const { id } = req.params;
      const grant = await allowVnc(deps, req, id);
      // The page's own URL and its websockify share the cookie's path.
      if (grant.via === 'query' && grant.expiresAt !== undefined) {
        return swapTokenForCookie(req, reply, { cookiePath: `/v1/boxes/${id}/vnc/`, expiresAt: grant.expiresAt, url: req.raw.url ?? '' });
      }
      await novnc; // a server without the package says so here, not with a page whose script 404s
      const nonce = randomBytes(16).toString('base64');
      return reply
        .type('text/html; charset=utf-8')
        .header('cache-control', 'no-store')
        .header('x-content-type-options', 'nosniff')
        .header('referrer-policy', 'no-referrer')
        .header(
          'content-security-policy',
          `default-src 'none'; script-src 'self' 'nonce-${nonce}'; connect-src 'self'; img-src 'self' data: blob:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'`,
        )
        .send(viewerPage(id, nonce));
    },
  );

  r.get(
    '/v1/vnc/assets/*',
    {
      config: { auth: 'public' },
      schema: {
        summary: "noVNC's modules for the viewer page (public: library code only)",
        tags: ['vnc'],
        params: assetParams,
        response: replies(
          { 200: { description: 'a script', content: { 'text/javascript': { schema: z.string() } } } as unknown as z.ZodType },
          [400, 404, 500, 503],
        ),
      },
    },
    async (req, reply) => {
      const file = await assetFile(await novnc, req.params['*']);
      return reply
        .type(file.type)
        .header('cache-control', 'public, max-age=3600')
        .header('x-content-type-options', 'nosniff')
        .send(await readFile(file.path));
    },
  );

  const dialed = new WeakMap<FastifyRequest, Duplex>();
  r.get(
    '/v1/boxes/:id/vnc/websockify',
    {
      websocket: true,
      config: { auth: 'box' },
      schema: {
        summary: "The viewer's WebSocket (websockify): binary frames bridged to the box's VNC port (RFB)",
        tags: ['vnc'],
        params: boxIdParam,
        security: PORT_SECURITY,
        response: replies({ 101: noContent('Switching Protocols: binary frames both ways, byte for byte to and from the VNC port') }, [...COMMON_ERRORS, 504]),
      },
      // Authorization, the box's vnc flag and the stream to it before the upgrade: a refusal is a
      // plain HTTP error with its code, never a socket that opens and closes.
      preHandler: async (req) => {
        const { id } = req.params as { id: string };
        const grant = await allowVnc(deps, req, id);
        // The cookie rides along with an upgrade from any page: only the server's own may use it.
        requireOwnOrigin(req, grant.via, deps.publicUrl?.());
        const tcp = await dialWithin(deps, grant.boxId, DIAL_TIMEOUT_MS);
        // The client left during the dial (a box waking up): its 'close' is past, and no upgrade comes.
        if (req.raw.socket.destroyed) {
          tcp.destroy();
          return;
        }
        dialed.set(req, tcp);
        // An upgrade that never completes must not leave the stream open.
        req.raw.socket.once('close', () => {
          if (dialed.delete(req)) tcp.destroy();
        });
      },
    },
    (socket, req) => {
      const tcp = dialed.get(req);
      dialed.delete(req);
      if (!tcp) {
        socket.close(VNC_CLOSE.upstreamError, 'no stream to the box');
        return;
      }
      const done = bridge(socket, tcp);
      deps.streams?.add({ done: done.finished, abort: (reason) => done.abort(reason) });
    },
  );
}

/** The caller may use the box's VNC, and the box has it: unauthorized/forbidden/not_found, else not_available. */
async function allowVnc(deps: VncDeps, req: FastifyRequest, id: string): Promise<VncGrant> {
  const grant = await deps.authorize(req, id, VNC_PORT);
  if (!(await deps.hasVnc(grant.boxId))) {
    throw new SbxError('not_available', `box '${id}' was created without vnc; create it with vnc: true (and a desktop image such as sbx-desktop)`, {
      details: { id, reason: 'vnc_not_enabled' },
    });
  }
  return grant;
}

async function dialWithin(deps: VncDeps, id: string, timeoutMs: number): Promise<Duplex> {
  let timer: NodeJS.Timeout | undefined;
  const dialing = deps.dial(id, VNC_PORT);
  try {
    return await Promise.race([
      dialing,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new SbxError('timeout', `box '${id}': no stream to its VNC port within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
  } catch (err) {
    void dialing.then((s) => s.destroy()).catch(() => undefined);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

export interface Bridge {
  /** Settles once both sides are closed. */
  finished: Promise<void>;
  /** Ends both sides, telling the client why (1001). */
  abort(reason: SbxError): void;
}

/**
 * Copies bytes both ways until either side ends, then closes the other: the VNC server ending is
 * a normal close (1000), a failing stream 1011, a text frame 1003. Backpressure both ways: the TCP
 * side is paused while more than HIGH_WATER bytes wait for the WebSocket, and the WebSocket is
 * paused while the TCP side's buffer is full.
 */
export function bridge(ws: WebSocket, tcp: Duplex): Bridge {
  let closed = false;
  let pending = 0;
  let tcpPaused = false;
  let resolveFinished!: () => void;
  const finished = new Promise<void>((resolve) => (resolveFinished = resolve));

  const close = (code: number, reason: string) => {
    if (closed) return;
    closed = true;
    clearInterval(watchdog);
    // A socket paused for a full TCP side would never read the client's close frame.
    ws.resume();
    if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close(code, reason.slice(0, 120));
    tcp.destroy();
    resolveFinished();
  };

  tcp.on('data', (chunk: Buffer) => {
    if (ws.readyState !== ws.OPEN) return;
    pending += chunk.length;
    ws.send(chunk, { binary: true }, () => {
      pending -= chunk.length;
      if (tcpPaused && pending <= LOW_WATER) {
        tcpPaused = false;
        tcp.resume();
      }
    });
    if (!tcpPaused && pending > HIGH_WATER) {
      tcpPaused = true;
      tcp.pause();
    }
  });
  tcp.on('end', () => close(1000, 'the VNC server closed the connection'));
  tcp.on('close', () => close(1000, 'the VNC server closed the connection'));
  tcp.on('error', (err) => close(VNC_CLOSE.upstreamError, `the stream to the box failed: ${err.message}`));
  tcp.on('drain', () => ws.resume());

  ws.on('message', (data: Buffer, isBinary: boolean) => {
    if (closed) return;
    if (!isBinary) return close(VNC_CLOSE.unsupportedData, 'send binary frames (RFB)');
    if (!tcp.write(data)) ws.pause();
  });
  ws.on('close', () => close(1000, 'client closed'));
  ws.on('error', () => close(VNC_CLOSE.upstreamError, 'websocket error'));
  // While paused nothing is read, so a client that vanished is seen only by a write: a ping.
  const watchdog = setInterval(() => {
    if (ws.isPaused && ws.readyState === ws.OPEN) ws.ping();
  }, PAUSED_PING_MS);

  return {
    finished,
    abort: (reason) => close(1001, mapError(reason).body.error.code),
  };
}

/** The noVNC package's directory (real path), or a rejection saying it is not installed. */
function novncRoot(given: string | undefined): Promise<string> {
  const root = (async () => {
    let dir = given;
    if (!dir) {
      try {
        // Its only export is core/rfb.js; the package root is two levels up.
        dir = dirname(dirname(createRequire(import.meta.url).resolve('@novnc/novnc')));
      } catch (cause) {
        throw new SbxError('not_available', 'the VNC viewer needs the npm package @novnc/novnc, which is not installed', { cause });
      }
    }
    try {
      return await realpath(dir);
    } catch (cause) {
      throw new SbxError('not_available', `the VNC viewer's noVNC directory ${dir} is missing`, { cause });
    }
  })();
  root.catch(() => undefined); // reported on each request, not as an unhandled rejection
  return root;
}

/**
 * The file an asset path names inside `root`: `..`, `.`, empty segments, backslashes and NULs
 * are refused (invalid_argument), and anything outside core/ and vendor/, not a script, missing,
 * or resolving (through a symlink) outside the package is not_found.
 */
export async function assetFile(root: string, rel: string): Promise<{ path: string; type: string }> {
  const parts = rel.split('/');
  if (parts.some((p) => p === '' || p === '.' || p === '..' || p.includes('\\') || p.includes('\0'))) {
    throw invalidArgument('path', 'an asset path is plain names separated by /, without . or .. segments');
  }
  const missing = () => new SbxError('not_found', `no VNC asset ${rel}`, { details: { path: rel } });
  const type = ASSET_TYPES[extname(rel)];
  if (!type || !ASSET_DIRS.has(parts[0]!)) throw missing();
  let real: string;
  try {
    real = await realpath(join(root, ...parts));
    if (!real.startsWith(root + sep) || !(await stat(real)).isFile()) throw missing();
  } catch (err) {
    if (err instanceof SbxError) throw err;
    throw missing();
  }
  return { path: real, type };
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/**
 * The viewer: noVNC's RFB on a full-window canvas. `document.body.dataset.vnc` and the title say
 * the state (connecting, connected, disconnected, failed), for people and for tests. A password
 * can come in the fragment (`#password=…`, never sent to a server), else it is asked for. It
 * retries before the first connect (a page opened right after create waits for the desktop) and
 * after a connection that was cut.
 */
function viewerPage(id: string, nonce: string): string {
  const box = escapeHtml(id);
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${box} · sbx VNC</title>
<link rel="icon" href="data:,">
<style>
html, body { margin: 0; height: 100%; background: #101010; color: #ddd; font: 13px system-ui, sans-serif; overflow: hidden; }
#screen { position: absolute; inset: 0; }
#status { position: absolute; top: 0; right: 0; z-index: 1; padding: 2px 8px; background: rgba(0, 0, 0, 0.6); }
</style>
</head>
<body data-vnc="connecting">
<div id="status">connecting…</div>
<div id="screen"></div>
<script nonce="${nonce}">
'use strict';
const box = ${JSON.stringify(id)};
const statusEl = document.getElementById('status');
const set = (state, text) => {
  document.body.dataset.vnc = state;
  statusEl.textContent = text;
  document.title = box + ' · ' + text + ' · sbx VNC';
};
const url = new URL('websockify', location.href);
url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
url.hash = '';
const fragment = new URLSearchParams(location.hash.slice(1));
const password = fragment.get('password');
const MAX_TRIES = 30;
const RELOADS = 'sbx-vnc-reloads';
let tries = 0;

function connect(RFB) {
  tries++;
  const rfb = new RFB(document.getElementById('screen'), url.href, {
    shared: true,
    ...(password !== null ? { credentials: { password } } : {}),
  });
  rfb.scaleViewport = true;
  rfb.viewOnly = fragment.get('view') === 'only';
  rfb.addEventListener('connect', () => {
    tries = 0;
    set('connected', 'connected');
  });
  rfb.addEventListener('credentialsrequired', () => {
    const p = window.prompt('VNC password for ' + box);
    if (p === null) rfb.disconnect();
    else rfb.sendCredentials({ password: p });
  });
  rfb.addEventListener('securityfailure', (e) => set('failed', 'VNC authentication failed: ' + (e.detail.reason || e.detail.status)));
  rfb.addEventListener('disconnect', (e) => {
    if (document.body.dataset.vnc === 'failed') return;
    // Not there yet (a page opened right after create) or cut: try again, a second apart.
    if ((document.body.dataset.vnc !== 'connected' || !e.detail.clean) && tries < MAX_TRIES) {
      set('connecting', document.body.dataset.vnc === 'connected' ? 'reconnecting…' : 'waiting for the desktop…');
      setTimeout(() => connect(RFB), 1000);
      return;
    }
    set(e.detail.clean ? 'disconnected' : 'failed', e.detail.clean ? 'disconnected' : 'connection lost');
  });
  window.sbxVnc = rfb;
}

// A module request that fails stays failed for this document (chromium aborts requests with
// ERR_NETWORK_CHANGED whenever an interface changes, as containers start beside it), so the
// page loads itself again, a few times, instead of staying blank.
import('../../../vnc/assets/core/rfb.js').then(
  (m) => {
    sessionStorage.removeItem(RELOADS);
    connect(m.default);
  },
  (err) => {
    const n = Number(sessionStorage.getItem(RELOADS) || 0);
    if (n >= 5) {
      sessionStorage.removeItem(RELOADS);
      set('failed', 'the viewer did not load: ' + err.message);
      return;
    }
    sessionStorage.setItem(RELOADS, String(n + 1));
    set('connecting', 'loading the viewer again…');
    setTimeout(() => location.reload(), 250 * (n + 1));
  },
);
</script>
</body>
</html>
`;
}
