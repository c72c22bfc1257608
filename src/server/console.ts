/**
 * The web console's files: `GET /console/` is its page (`/` and `/console` lead there),
 * `GET /console/assets/<name>-<hash>.<ext>` its scripts and styles, built by `console/build.ts` into `.build/console/` (shipped in the package; no CDN, no
 * network at run time). Read into memory once, served gzip-compressed to browsers that take it.
 *
 * The page is public (it holds no data: every datum comes from the API under the session, see
 * sessions.ts). It lives under its own path, the path of the session token's cookie, which a box's
 * page (under /v1/boxes/…) therefore cannot read. It is strict: a CSP that runs only this server's scripts, no framing, and a
 * Cross-Origin-Opener-Policy that keeps the page its own (a box page it opens cannot reach it).
 */
import { readFile, readdir } from 'node:fs/promises';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SbxError } from '../errors.js';
import { CONSOLE_PATH } from './sessions.js';

/** Where the build writes the console, from src/server/ and from dist/server/ alike. */
export const CONSOLE_DIR = fileURLToPath(new URL('../../.build/console/', import.meta.url));

export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  // 'unsafe-inline' for <style> elements only (never scripts, never style="" attributes): xterm.js 6
  // (the Terminal tab) writes its theme, cell dimensions and scrollbar colours into <style> elements
  // it creates at run time, and has no option to avoid them or to give them a nonce; without it the
  // terminal draws with wrong metrics. Styles set from script (element.style) are not governed.
  "style-src 'self'",
  "style-src-elem 'self' 'unsafe-inline'",
  "style-src-attr 'none'",
  "img-src 'self' data: blob:",
  "font-src 'self'",
  "connect-src 'self'",
  // The box's desktop is the VNC viewer page of this server, in a frame.
  "frame-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
};

interface ConsoleFile {
  body: Buffer;
  gzip: Buffer | undefined;
  type: string;
}

/** Every file of a built console by its path under it (`index.html`, `assets/app-1a2b3c.js`). */
export async function loadConsole(dir = CONSOLE_DIR): Promise<Map<string, ConsoleFile>> {
  const files = new Map<string, ConsoleFile>();
  const names = [...(await readdir(dir)).filter((n) => n === 'index.html'), ...(await readdir(join(dir, 'assets'))).map((n) => `assets/${n}`)];
  for (const name of names) {
    if (name.endsWith('.gz')) continue;
    const type = TYPES[extname(name)];
    if (!type) continue;
    const gz = names.includes(`${name}.gz`) ? await readFile(join(dir, `${name}.gz`)) : undefined;
    files.set(name, { body: await readFile(join(dir, name)), gzip: gz, type });
  }
  if (!files.has('index.html')) throw new Error(`no index.html in ${dir}`);
  return files;
}

function send(req: FastifyRequest, reply: FastifyReply, file: ConsoleFile): FastifyReply {
  reply.type(file.type).header('x-content-type-options', 'nosniff').header('vary', 'accept-encoding');
  if (file.gzip && /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''))) return reply.header('content-encoding', 'gzip').send(file.gzip);
  return reply.send(file.body);
}

export function consoleRoutes(app: FastifyInstance, dir = CONSOLE_DIR): void {
  let loaded: Promise<Map<string, ConsoleFile>> | undefined;
  const files = async (): Promise<Map<string, ConsoleFile>> => {
    loaded ??= loadConsole(dir);
    try {
      return await loaded;
    } catch (err) {
      loaded = undefined; // built later (npm run build:console): the next request finds it
      throw new SbxError('not_available', `the web console is not built here (${dir}): run \`npm run build:console\``, { cause: err });
    }
  };

  // Relative: the console is found behind a path prefix too.
  app.get('/', { config: { auth: 'public' }, schema: { hide: true } }, async (_req, reply) => reply.code(302).header('location', 'console/').send());
  app.get('/console', { config: { auth: 'public' }, schema: { hide: true } }, async (_req, reply) => reply.code(302).header('location', 'console/').send());

  app.get(CONSOLE_PATH, { config: { auth: 'public' }, schema: { hide: true } }, async (req, reply) => {
    const page = (await files()).get('index.html')!;
    reply
      .header('content-security-policy', CONSOLE_CSP)
      .header('cross-origin-opener-policy', 'same-origin')
      .header('x-frame-options', 'DENY')
      .header('referrer-policy', 'same-origin')
      .header('cache-control', 'no-store');
    return send(req, reply, page);
  });

  app.get(`${CONSOLE_PATH}assets/*`, { config: { auth: 'public' }, schema: { hide: true } }, async (req, reply) => {
    const name = `assets/${(req.params as { '*': string })['*']}`;
    const file = (await files()).get(name);
    if (!file) throw new SbxError('not_found', `no console file ${name}`);
    // Names carry their content's hash: a new build is new names.
    reply.header('cache-control', 'public, max-age=31536000, immutable');
    return send(req, reply, file);
  });
}
