/**
 * Transport rows: the same operation through the HTTP API (and the WebSocket exec) against the
 * library, as ratios in one run (subject p50 / library p50). Goal of issue #9: HTTP exec adds
 * at most 2 ms p50 over the library.
 *
 * The HTTP rows ask for the exec's answer as frames, as the SDK does (the output as it is); the
 * HTTP JSON rows take the plain JSON answer. JSON is the cost there: the ExecOutput1M row prints
 * 1 MiB of NUL bytes, which JSON writes as `\u0000`, 6 MiB on the wire, and the client's
 * decode + JSON.parse of that take ~30 ms here. The WebSocket exec sends the bytes as they are.
 * The HTTP rows' client is fetch (undici), ~0.6 ms a request more than node:http here; the SDK
 * rows go through the SDK itself (frames over node:http), what a TypeScript program pays.
 *
 * Run alone: `npx tsx bench/rows/transport.ts [--quick] [--only NAME]`. In bench/run.ts: add
 * TRANSPORT_ROW_NAMES to the selectable names, then
 * `results.push(...(await runTransportRows(run.ctx, { managerName: `${run.managerName}-tr`, dataDir: join(run.tmp, 'transport'), runId: run.runId, only: picked })))`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import WebSocket from 'ws';
import { Sbx } from '../../src/client/client.js';
import type { Box as RemoteBox } from '../../src/client/box.js';
import { EXEC_FRAMES_TYPE, ExecFramesReader } from '../../src/client/exec-frames.js';
import { serve } from '../../src/server/index.js';
import type { ServerHandle } from '../../src/server/index.js';
import { BASE_IMAGE, BENCH_LABEL } from '../core/identity.js';
import type { RowResult } from '../core/result.js';
import type { AnyRow } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import type { RunContext } from '../core/run-rows.js';
import { sweep } from '../core/sweep.js';
import { EngineClient } from '../engine/client.js';
import { PoolSubject } from '../subjects/pool.js';
import type { BoxRef, ExecOutcome, Subject } from '../subjects/subject.js';
import { latencyRows } from './boxes.js';

/** The library rows that have a transport twin, per transport (the row is `<transport> <name>`). */
const TWINS: ReadonlyArray<[string, string[]]> = [
  ['HTTP', ['Exec', 'ExecOutput1M', 'Create']],
  ['HTTP JSON', ['Exec', 'ExecOutput1M']],
  ['HTTP node:http', ['Exec']],
  ['WS', ['Exec', 'ExecOutput1M']],
  ['SDK', ['Exec', 'ExecOutput1M']],
];

/** Every row this file makes, for bench/run.ts's `--only`. */
export const TRANSPORT_ROW_NAMES: readonly string[] = TWINS.flatMap(([prefix, names]) =>
  latencyRows.filter((r) => names.includes(r.name)).map((r) => `${prefix} ${r.name}`),
);

/** Boxes over the HTTP API with fetch (keep-alive), as a remote client would drive them. */
export class HttpSubject implements Subject {
  readonly name: string = 'http';
  constructor(
    protected readonly url: string,
    protected readonly key: string,
    private readonly runId: string,
  ) {}

  protected async call(method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> | undefined }> {
    const res = await fetch(this.url + path, {
      method,
      headers: { authorization: `Bearer ${this.key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    const json = text ? (JSON.parse(text) as Record<string, unknown>) : undefined;
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 200)}`);
    return { status: res.status, json };
  }

  async create(): Promise<BoxRef> {
    const r = await this.call('POST', '/v1/boxes', { image: BASE_IMAGE, labels: { [BENCH_LABEL]: this.runId } });
    return { id: String(r.json!['id']) };
  }
  /** Asks for the answer as frames, as the SDK does. */
  async exec(box: BoxRef, cmd: string[]): Promise<ExecOutcome> {
    const res = await fetch(`${this.url}/v1/boxes/${box.id}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${this.key}`, 'content-type': 'application/json', accept: EXEC_FRAMES_TYPE },
      body: JSON.stringify({ cmd }),
    });
    if (res.status >= 300) throw new Error(`exec: ${res.status} ${(await res.text()).slice(0, 200)}`);
    const reader = new ExecFramesReader();
    // Whole, not chunk by chunk: a web stream's iteration costs more than the copy here.
    reader.write(Buffer.from(await res.arrayBuffer()));
    const r = reader.end();
    return { exitCode: r.exitCode, stdoutBytes: r.stdout.length };
  }
  async info(box: BoxRef): Promise<void> {
    await this.call('GET', `/v1/boxes/${box.id}`);
  }
  async stop(box: BoxRef): Promise<void> {
    await this.call('POST', `/v1/boxes/${box.id}/stop`);
  }
  async start(box: BoxRef): Promise<void> {
    await this.call('POST', `/v1/boxes/${box.id}/start`);
  }
  async remove(box: BoxRef): Promise<void> {
    await this.call('DELETE', `/v1/boxes/${box.id}`);
  }
  async close(): Promise<void> {}
}

/** The exec's plain JSON answer (no Accept), as a client that knows only JSON reads it. */
export class JsonHttpSubject extends HttpSubject {
  override readonly name: string = 'http-json';
  override async exec(box: BoxRef, cmd: string[]): Promise<ExecOutcome> {
    const r = await this.call('POST', `/v1/boxes/${box.id}/exec`, { cmd });
    return { exitCode: Number(r.json!['exitCode']), stdoutBytes: String(r.json!['stdout']).length };
  }
}

/**
 * The same HTTP calls with node:http on one keep-alive socket instead of fetch: how much of the
 * HTTP rows' added time is the client's (undici's fetch costs ~0.5-1 ms a request more here).
 */
export class NodeHttpSubject extends JsonHttpSubject {
  override readonly name: string = 'node-http';
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

  protected override call(method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> | undefined }> {
    const payload = body !== undefined ? JSON.stringify(body) : undefined;
    const u = new URL(this.url);
    return new Promise((resolve, reject) => {
      const req = http.request(
        {
          host: u.hostname,
          port: u.port,
          method,
          path,
          agent: this.agent,
          headers: {
            authorization: `Bearer ${this.key}`,
            ...(payload !== undefined ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            const status = res.statusCode ?? 0;
            if (status >= 300) return reject(new Error(`${method} ${path}: ${status} ${text.slice(0, 200)}`));
            resolve({ status, json: text ? (JSON.parse(text) as Record<string, unknown>) : undefined });
          });
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(payload);
    });
  }

  override async close(): Promise<void> {
    this.agent.destroy();
  }
}

/** Exec over the WebSocket exec (one socket per exec, as `sbx exec` would); the rest over HTTP. */
export class WsSubject extends HttpSubject {
  override readonly name = 'ws';
  override exec(box: BoxRef, cmd: string[]): Promise<ExecOutcome> {
    const query = cmd.map((c) => `cmd=${encodeURIComponent(c)}`).join('&');
    const ws = new WebSocket(`${this.url.replace(/^http/, 'ws')}/v1/boxes/${box.id}/exec/ws?${query}`, { headers: { authorization: `Bearer ${this.key}` } });
    return new Promise((resolve, reject) => {
      let stdoutBytes = 0;
      let exitCode: number | undefined;
      ws.on('message', (data: Buffer) => {
        if (data[0] === 1) stdoutBytes += data.length - 1;
        else if (data[0] === 3) {
          const msg = JSON.parse(data.subarray(1).toString()) as { exit?: number; error?: { message: string } };
          if (msg.error) reject(new Error(msg.error.message));
          if (msg.exit !== undefined) exitCode = msg.exit;
        }
      });
      ws.once('close', () => (exitCode === undefined ? reject(new Error('closed without exit')) : resolve({ exitCode, stdoutBytes })));
      ws.once('error', reject);
    });
  }
}

/**
 * Exec through the SDK (src/client: `box.exec`, frames over node:http on the global keep-alive
 * agent), as a TypeScript program drives a remote server; the rest over HTTP. The fetch rows are
 * what any other client pays; this is what the SDK's users pay.
 */
export class SdkSubject extends HttpSubject {
  override readonly name = 'sdk';
  private readonly sbx: Sbx;
  /** The SDK's box per id, made at its first exec (a GET of its info), as a program holds it. */
  private readonly boxes = new Map<string, Promise<RemoteBox>>();
  constructor(url: string, key: string, runId: string) {
    super(url, key, runId);
    this.sbx = new Sbx({ url, apiKey: key });
  }
  override async exec(box: BoxRef, cmd: string[]): Promise<ExecOutcome> {
    let remote = this.boxes.get(box.id);
    if (!remote) this.boxes.set(box.id, (remote = this.sbx.get(box.id)));
    const r = await (await remote).exec(cmd);
    return { exitCode: r.exitCode, stdoutBytes: r.stdout.length };
  }
  override async remove(box: BoxRef): Promise<void> {
    this.boxes.delete(box.id);
    await super.remove(box);
  }
}

const namesOf = (prefix: string): string[] => TWINS.find(([p]) => p === prefix)?.[1] ?? [];

/** The latency rows named `names`, renamed `<prefix> <name>` and noted as against the library, as `only` allows. */
export function twinRows(prefix: string, names: readonly string[], only: ReadonlySet<string> | undefined): AnyRow<Subject>[] {
  return latencyRows
    .filter((r) => names.includes(r.name) && (!only || only.has(`${prefix} ${r.name}`)))
    .map((r) => ({ ...r, name: `${prefix} ${r.name}`, note: `${r.note ?? ''} (vs library)`.trim() }));
}

/** HTTP Exec/ExecOutput1M/Create (fetch, frames), HTTP JSON Exec/ExecOutput1M, HTTP node:http Exec, WS Exec/ExecOutput1M, SDK Exec/ExecOutput1M, each against the library in one run. */
export async function runTransportRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; /** Row names to run (TRANSPORT_ROW_NAMES); default all. */ only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  if (opts.only && !TRANSPORT_ROW_NAMES.some((n) => opts.only!.has(n))) return [];
  // The library on the server's own pool settings (the in-box agent on), so the rows show what the transport adds.
  const lib = await PoolSubject.open('lib', {}, opts);
  let server: ServerHandle | undefined;
  let nodeHttpClose: (() => Promise<void>) | undefined;
  try {
    server = await serve({ manager: lib.manager, port: 0, dataDir: opts.dataDir, logger: pino({ level: 'silent' }), print: () => undefined });
    const key = server.adminKey!;
    const http = new HttpSubject(server.url, key, opts.runId);
    const ws = new WsSubject(server.url, key, opts.runId);
    const json = new JsonHttpSubject(server.url, key, opts.runId);
    const nodeHttp = new NodeHttpSubject(server.url, key, opts.runId);
    const sdk = new SdkSubject(server.url, key, opts.runId);
    nodeHttpClose = () => nodeHttp.close();
    return [
      ...(await runPairRows(twinRows('HTTP', namesOf('HTTP'), opts.only), http, lib as unknown as Subject, ctx)),
      ...(await runPairRows(twinRows('HTTP JSON', namesOf('HTTP JSON'), opts.only), json, lib as unknown as Subject, ctx)),
      ...(await runPairRows(twinRows('HTTP node:http', namesOf('HTTP node:http'), opts.only), nodeHttp, lib as unknown as Subject, ctx)),
      ...(await runPairRows(twinRows('WS', namesOf('WS'), opts.only), ws, lib as unknown as Subject, ctx)),
      ...(await runPairRows(twinRows('SDK', namesOf('SDK'), opts.only), sdk, lib as unknown as Subject, ctx)),
    ];
  } finally {
    await nodeHttpClose?.();
    await server?.close();
    await lib.close();
  }
}

async function main(): Promise<void> {
  const mode = process.argv.includes('--quick') ? 'quick' : 'full';
  const runId = String(process.pid);
  const tmp = await mkdtemp(join(os.tmpdir(), 'sbx-bench-transport-'));
  const log = (line: string) => process.stderr.write(`bench: ${line}\n`);
  const engine = new EngineClient();
  try {
    const i = process.argv.indexOf('--only');
    const only =
      i > 0 && process.argv[i + 1] ? new Set(TRANSPORT_ROW_NAMES.filter((n) => n.toLowerCase().includes(process.argv[i + 1]!.toLowerCase()))) : undefined;
    const rows = await runTransportRows(
      { mode, log, signal: new AbortController().signal },
      { managerName: `bench-tr-${process.pid}`, dataDir: tmp, runId, ...(only ? { only } : {}) },
    );
    const out = ['row                          subject    p50 ms   lib p50 ms  ratio   added p50 ms'];
    for (const r of rows) {
      if (r.sides.length !== 2) {
        out.push(`${r.name.padEnd(29)}${r.status}: ${r.reason ?? ''}`);
        continue;
      }
      const [s, b] = r.sides;
      out.push(
        `${r.name.padEnd(29)}${s.subject.padEnd(11)}${s.stats.p50.toFixed(1).padStart(6)}   ${b.stats.p50.toFixed(1).padStart(10)}  ${(r.ratio ?? 0).toFixed(2).padStart(5)}x  ${(s.stats.p50 - b.stats.p50).toFixed(1).padStart(8)}   (n=${s.stats.n})`,
      );
    }
    process.stdout.write(`${out.join('\n')}\n`);
  } finally {
    await sweep(engine, runId).catch(() => 0);
    engine.close();
    await rm(tmp, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
