/**
 * The node's heartbeat relay: boxes on a node cannot reach their Manager, so their agents post
 * heartbeats (agent/heartbeat.go: `POST /v1/boxes/:id/heartbeat`, Bearer box token, body
 * `{active, processCount}`) to a small HTTP listener on the node's box network gateway, which the
 * node hands boxes as `SBX_API_URL`. It takes exactly that request, relays it to whoever listens
 * (the Manager's `Heartbeats` stream) and answers 204; anything else is a 4xx, never a crash.
 * The token is not checked here: the Manager checks it, as it does a heartbeat posted to it.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BoxHeartbeat } from '../runtime/types.js';

/** A heartbeat body is about 40 bytes; anything past this is not one. */
const MAX_BODY_BYTES = 1024;
/** A box that opens a connection and sends nothing is cut after this long. */
const REQUEST_TIMEOUT_MS = 5000;
const PATH = /^\/v1\/boxes\/([A-Za-z0-9][A-Za-z0-9_.-]{0,127})\/heartbeat$/;
const BEARER = /^Bearer ([\x21-\x7e]{1,512})$/;

export class HeartbeatRelay {
  private readonly server: Server;
  private readonly listeners = new Set<(hb: BoxHeartbeat) => void>();

  constructor() {
    this.server = createServer({ requestTimeout: REQUEST_TIMEOUT_MS, headersTimeout: REQUEST_TIMEOUT_MS }, (req, res) => this.handle(req, res));
    this.server.on('clientError', (_err, socket) => socket.destroy());
  }

  /** Listens on `host` (a free port); the URL boxes are given. */
  async listen(host: string): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(0, host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    const { port } = this.server.address() as AddressInfo;
    return `http://${host}:${port}`;
  }

  get port(): number {
    return (this.server.address() as AddressInfo | null)?.port ?? 0;
  }

  /** Calls `fn` with every heartbeat from now on; returns the unsubscribe. */
  subscribe(fn: (hb: BoxHeartbeat) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  async close(): Promise<void> {
    this.listeners.clear();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeAllConnections();
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const answer = (status: number, text = '') => {
      res.writeHead(status, { 'content-type': 'text/plain', connection: 'close' });
      res.end(text);
    };
    const path = PATH.exec(req.url ?? '');
    if (!path) return answer(404, 'not found\n');
    if (req.method !== 'POST') return answer(405, 'POST only\n');
    const token = BEARER.exec(req.headers.authorization ?? '')?.[1];
    if (!token) return answer(401, 'a box token is required\n');
    if (Number(req.headers['content-length'] ?? 0) > MAX_BODY_BYTES) return answer(413, 'too large\n');
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        answer(413, 'too large\n');
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('error', () => undefined);
    req.on('end', () => {
      if (size > MAX_BODY_BYTES) return;
      const body = parseBody(Buffer.concat(chunks).toString('utf8'));
      if (!body) return answer(400, 'body: {"active": boolean, "processCount": number}\n');
      const hb: BoxHeartbeat = { boxId: path[1]!, token, ...body };
      for (const fn of this.listeners) fn(hb);
      answer(204);
    });
  }
}

function parseBody(text: string): { active: boolean; processCount: number } | undefined {
  try {
    const v = JSON.parse(text) as { active?: unknown; processCount?: unknown };
    if (typeof v !== 'object' || v === null) return undefined;
    const active = v.active ?? true;
    const processCount = v.processCount ?? 0;
    if (typeof active !== 'boolean' || typeof processCount !== 'number' || !Number.isInteger(processCount) || processCount < 0 || processCount > 1e6) {
      return undefined;
    }
    return { active, processCount };
  } catch {
    return undefined;
  }
}
