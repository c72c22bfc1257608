/**
 * Test support for the server's tests: a real server on 127.0.0.1 over a Manager of its own
 * (own name, temp data dir), a small fetch client, and cleanup that removes every box it made.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import type { Logger } from 'pino';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { managerSelector } from '../sandbox/labels.js';
import { Manager } from '../sandbox/index.js';
import type { ManagerConfig } from '../sandbox/index.js';
import { testEnv } from './env.js';
import { serve } from '../server/index.js';
import type { ServeOptions, ServerHandle } from '../server/index.js';

export const IMAGE = testEnv.baseImage;
let seq = 0;

export interface TestServer {
  server: ServerHandle;
  manager: Manager;
  url: string;
  admin: string;
  dataDir: string;
  /** fetch with JSON in and out; `key` defaults to the admin key, null for none. */
  call(
    method: string,
    path: string,
    opts?: { body?: unknown; key?: string | null; headers?: Record<string, string>; raw?: RequestInit['body']; rawPath?: boolean },
  ): Promise<Res>;
  /** Stops the server, removes every container of its Manager, deletes the data dir. */
  dispose(): Promise<void>;
}

export interface Res {
  status: number;
  headers: Headers;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  text: string;
}

export async function startTestServer(
  label: string,
  opts: { config?: ManagerConfig; serve?: Partial<ServeOptions>; logger?: Logger; dataDir?: string; name?: string } = {},
): Promise<TestServer> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), `sbx-server-${label}-`));
  const name = opts.name ?? `srv-${label}-${process.pid}-${++seq}`.slice(0, 32).replace(/-+$/, '');
  const logger = opts.logger ?? pino({ level: 'silent' });
  const manager = new Manager({ name, dataDir, cleanupIntervalMs: 0, logger, pools: [{ name: 'local', addr: testEnv.engineAddr }], ...opts.config });
  await manager.start();
  let printed = '';
  const server = await serve({ manager, dataDir, port: 0, logger, print: (t) => (printed += t), ...opts.serve });
  const admin = server.adminKey ?? /sbxk_\S+/.exec(printed)?.[0] ?? '';
  const call: TestServer['call'] = async (method, path, o = {}) => {
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    const key = o.key === undefined ? admin : o.key;
    if (key !== null) headers['authorization'] = `Bearer ${key}`;
    let body: RequestInit['body'] | undefined = o.raw;
    if (o.body !== undefined) {
      body = typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
      headers['content-type'] ??= 'application/json';
    }
    if (o.rawPath) return rawRequest(server.url, method, path, headers, typeof body === 'string' ? body : undefined);
    const res = await fetch(server.url + path, { method, headers, ...(body !== undefined ? { body, duplex: 'half' } : {}) } as RequestInit);
    const text = await res.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    return { status: res.status, headers: res.headers, json, text };
  };
  return {
    server,
    manager,
    url: server.url,
    admin,
    dataDir,
    call,
    async dispose() {
      await server.close();
      await removeContainersOf(name);
      await manager.close();
      if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** The id in an API key (`sbxk_<id>_<secret>`): envd access tokens and signed URLs are per key. */
export function keyIdOf(key: string): string {
  return /^sbxk_([0-9a-f]{16})_/.exec(key)![1]!;
}

/** Removes every container labelled with this Manager name; returns how many there were. */
export async function removeContainersOf(managerName: string): Promise<number> {
  const engine = new DockerRuntime(testEnv.engineAddr);
  try {
    const list = await engine.list({ labels: managerSelector(managerName) });
    await Promise.all(list.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
    return list.length;
  } finally {
    await engine.close();
  }
}

/** A request whose path is sent as written (fetch would resolve `%2e%2e` before sending). */
export function rawRequest(base: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<Res> {
  return new Promise((resolve, reject) => {
    const u = new URL(base);
    const req = httpRequest({ host: u.hostname, port: u.port, method, path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        let json: unknown;
        try {
          json = text ? JSON.parse(text) : undefined;
        } catch {
          json = undefined;
        }
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          if (typeof v === 'string') h.set(k, v);
          else if (Array.isArray(v)) for (const one of v) h.append(k, one);
        }
        resolve({ status: res.statusCode ?? 0, headers: h, json, text });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}
