/**
 * e2b rows: the `e2b` SDK against `sbx serve` (control plane + envd) beside the library in one
 * run, on the same image (sbx-e2b) and the same command line: the SDK runs every command as
 * `/bin/bash -l -c <line>`, so the library side runs exactly that too (as the image's user 1000 in
 * /home/user, envd's defaults), and the ratio is what the e2b path adds: sbx's server (HTTP, auth,
 * Connect envelopes, the process table) and the SDK's own client work, which runs in this process
 * too (undici's fetch, connect-web's parsing: ~3 ms CPU a command on the 2-core CI machine, more
 * than the library's whole exec, measured with the server in a process of its own).
 *
 * Run alone: `npx tsx bench/rows/e2b.ts [--quick]`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sandbox } from 'e2b';
import pino from 'pino';
import { serve } from '../../src/server/index.js';
import type { ServerHandle } from '../../src/server/index.js';
import { BENCH_LABEL } from '../core/identity.js';
import type { RowResult } from '../core/result.js';
import { runPairRows } from '../core/run-rows.js';
import type { RunContext } from '../core/run-rows.js';
import { sweep } from '../core/sweep.js';
import { EngineClient } from '../engine/client.js';
import { PoolSubject, type PoolRef } from '../subjects/pool.js';
import type { BoxRef, ExecOutcome, Subject } from '../subjects/subject.js';
import { twinRows } from './transport.js';

const E2B_IMAGE = 'sbx-e2b:latest';
const TWINS = ['Exec', 'Create'];
export const E2B_ROW_NAMES: readonly string[] = TWINS.map((n) => `E2B ${n}`);

/** One argument as bash reads it. */
function quoted(arg: string): string {
  return /^[A-Za-z0-9_./=:-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}
const commandLine = (cmd: string[]): string => cmd.map(quoted).join(' ');

interface SandboxRef extends BoxRef {
  readonly sandbox: Sandbox;
}

/** Boxes as e2b code drives them: Sandbox.create, commands.run, kill. */
class E2bSubject implements Subject<SandboxRef> {
  readonly name = 'e2b';
  constructor(private readonly opts: { apiUrl: string; sandboxUrl: string; apiKey: string; runId: string }) {}

  async create(): Promise<SandboxRef> {
    const sandbox = await Sandbox.create({ ...this.opts, metadata: { [BENCH_LABEL.replace(/[^A-Za-z0-9._/-]/g, '_')]: this.opts.runId } });
    return { id: sandbox.sandboxId, sandbox };
  }
  async exec(ref: SandboxRef, cmd: string[]): Promise<ExecOutcome> {
    const r = await ref.sandbox.commands.run(commandLine(cmd));
    return { exitCode: r.exitCode, stdoutBytes: Buffer.byteLength(r.stdout) };
  }
  async info(ref: SandboxRef): Promise<void> {
    await ref.sandbox.getInfo();
  }
  async stop(): Promise<void> {
    throw new Error('e2b has no stop');
  }
  async start(): Promise<void> {
    throw new Error('e2b has no start');
  }
  async remove(ref: SandboxRef): Promise<void> {
    await ref.sandbox.kill();
  }
  async close(): Promise<void> {}
}

/** The library on the same image, running each command as the SDK does (`bash -l -c`). */
class BashLibrary implements Subject<PoolRef> {
  readonly name = 'lib';
  constructor(private readonly lib: PoolSubject) {}
  create(): Promise<PoolRef> {
    return this.lib.create();
  }
  exec(ref: PoolRef, cmd: string[]): Promise<ExecOutcome> {
    return this.lib.exec(ref, ['/bin/bash', '-l', '-c', commandLine(cmd)]);
  }
  info(ref: PoolRef): Promise<void> {
    return this.lib.info(ref);
  }
  stop(ref: PoolRef): Promise<void> {
    return this.lib.stop(ref);
  }
  start(ref: PoolRef): Promise<void> {
    return this.lib.start(ref);
  }
  remove(ref: PoolRef): Promise<void> {
    return this.lib.remove(ref);
  }
  close(): Promise<void> {
    return this.lib.close();
  }
}

/** E2B Exec and E2B Create, each against the library in one run. */
export async function runE2bRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; /** Row names to run (E2B_ROW_NAMES); default all. */ only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  if (opts.only && !E2B_ROW_NAMES.some((n) => opts.only!.has(n))) return [];
  const pool = await PoolSubject.open('lib', {}, { ...opts, image: E2B_IMAGE });
  const lib = new BashLibrary(pool);
  let server: ServerHandle | undefined;
  try {
    server = await serve({ manager: pool.manager, port: 0, dataDir: opts.dataDir, logger: pino({ level: 'silent' }), print: () => undefined });
    const { e2bKey } = await server.keys.create({ name: 'bench', role: 'admin' });
    const e2b = new E2bSubject({ apiUrl: `${server.url}/e2b/api`, sandboxUrl: `${server.url}/e2b/envd`, apiKey: e2bKey, runId: opts.runId });
    return await runPairRows(twinRows('E2B', TWINS, opts.only), e2b as unknown as Subject, lib as unknown as Subject, ctx);
  } finally {
    await server?.close();
    await lib.close();
  }
}

async function main(): Promise<void> {
  const mode = process.argv.includes('--quick') ? 'quick' : 'full';
  const runId = String(process.pid);
  const tmp = await mkdtemp(join(os.tmpdir(), 'sbx-bench-e2b-'));
  const log = (line: string) => process.stderr.write(`bench: ${line}\n`);
  const engine = new EngineClient();
  try {
    const rows = await runE2bRows({ mode, log, signal: new AbortController().signal }, { managerName: `bench-e2b-${process.pid}`, dataDir: tmp, runId });
    for (const r of rows) {
      if (r.sides.length !== 2) {
        process.stdout.write(`${r.name}: ${r.status} ${r.reason ?? ''}\n`);
        continue;
      }
      const [s, b] = r.sides;
      process.stdout.write(
        `${r.name.padEnd(12)} e2b p50 ${s.stats.p50.toFixed(1)} ms p95 ${s.stats.p95.toFixed(1)} ms | lib p50 ${b.stats.p50.toFixed(1)} ms p95 ${b.stats.p95.toFixed(1)} ms | ${(r.ratio ?? 0).toFixed(2)}x (n=${s.stats.n})\n`,
      );
    }
  } finally {
    await sweep(engine, runId).catch(() => 0);
    engine.close();
    await rm(tmp, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
