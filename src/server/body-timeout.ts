/**
 * The body-read timeout: a request whose body stops arriving (a Content-Length larger than what
 * the client sends, then silence) is answered 408 and its connection closed once no byte came for
 * `timeoutMs`, on every route, the raw uploads and envd included. Idle, not total: a large upload
 * that keeps sending is never cut, and time the server itself spends not reading (a box write
 * holding the upload back) does not count against the client.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Logger } from 'pino';

/** How often a body in flight is checked; the timeout fires within a quarter of itself late. */
const CHECKS_PER_TIMEOUT = 4;

/**
 * Bounds the body reads of every request `server` receives.
 *
 * @example
 * boundBodyReads(app.server, 30_000, log);
 */
export function boundBodyReads(server: Server, timeoutMs: number, log: Logger): void {
  if (timeoutMs <= 0) return;
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (req.complete || !hasBody(req)) return;
    const socket = req.socket;
    let seen = socket.bytesRead;
    let lastActive = Date.now();
    const check = setInterval(
      () => {
        const now = Date.now();
        // Bytes came in, or the server holds the body back (its buffer is full): not the client's idleness.
        if (socket.bytesRead !== seen || req.readableLength >= req.readableHighWaterMark) {
          seen = socket.bytesRead;
          lastActive = now;
          return;
        }
        if (now - lastActive < timeoutMs) return;
        stop();
        log.info({ method: req.method, url: req.url?.split('?')[0], ip: socket.remoteAddress, timeoutMs }, 'request body timed out');
        const message = `the request body stopped arriving: no byte for ${timeoutMs} ms (server.bodyTimeout)`;
        const cause = Object.assign(new Error(message), { code: 'SBX_BODY_TIMEOUT' });
        if (res.headersSent) {
          req.destroy(cause);
          return;
        }
        // The envd and e2b API routes, and envd's signed file URLs at the root, answer in envd's shape; everything else in sbx's.
        const body = isE2bPath(req.url ?? '')
          ? { code: 408, message }
          : { error: { code: 'timeout', message, details: { limit: 'bodyTimeoutMs', timeoutMs } } };
        res.once('finish', () => req.destroy(cause));
        res.writeHead(408, { 'content-type': 'application/json', connection: 'close' });
        res.end(JSON.stringify(body));
      },
      Math.max(10, Math.floor(timeoutMs / CHECKS_PER_TIMEOUT)),
    );
    check.unref();
    const stop = () => {
      clearInterval(check);
      req.removeListener('end', stop);
      req.removeListener('close', stop);
      res.removeListener('close', stop);
    };
    req.once('end', stop);
    req.once('close', stop);
    res.once('close', stop);
  });
}

/** The e2b routes: /e2b/… and `/files` at the root (the SDK's signed file URLs; see envd/routes.ts SIGNED_FILES_PATH). */
function isE2bPath(url: string): boolean {
  const path = url.split('?')[0]!;
  return path.startsWith('/e2b/') || path === '/files';
}

function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}
