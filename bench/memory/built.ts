/**
 * Memory0BoxesBuilt: Memory0Boxes' reading (a started Manager with one Docker pool, no boxes) on
 * the built package: tsc's output of src/ with the build's options, run by plain node as the
 * package's users run it. Memory0Boxes runs from source under tsx, whose loader and the sources
 * it compiled are part of its reading; the two side by side show which is sbx's.
 * The build is cached in .build/bench-dist/<hash of its inputs>.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { notRun } from '../core/result.js';
import type { RowResult } from '../core/result.js';
import { probeBuiltMemory } from './probe.js';
import { MEMORY_BUILT_ROW } from './rows.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const OUT = join(ROOT, '.build', 'bench-dist');
/** The child and what it imports besides src/. */
const CHILD_FILES = ['bench/memory/built-child.ts', 'bench/memory/protocol.ts', 'bench/core/gc.ts'];
/** What else decides the output: the compiler's options and version. */
const SETTINGS = ['tsconfig.json', 'tsconfig.build.json', 'package-lock.json'];
const MiB = 2 ** 20;

/** src/'s files as tsconfig.build.json compiles them: no tests, no test helpers. */
function sources(): string[] {
  return (readdirSync(join(ROOT, 'src'), { recursive: true }) as string[])
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && !f.split('/').includes('testing'))
    .sort()
    .map((f) => `src/${f}`);
}

/** Compiles src/ and the child once per input hash; returns the child's path in the build. */
export async function buildChild(log: (line: string) => void): Promise<string> {
  const files = [...sources(), ...CHILD_FILES];
  const hash = createHash('sha256');
  for (const f of [...files, ...SETTINGS])
    hash
      .update(f)
      .update('\0')
      .update(readFileSync(join(ROOT, f)))
      .update('\0');
  const key = hash.digest('hex').slice(0, 16);
  const dir = join(OUT, key);
  const child = join(dir, 'bench', 'memory', 'built-child.js');
  if (existsSync(child)) return child;
  mkdirSync(OUT, { recursive: true });
  const tmp = `${dir}.${process.pid}`;
  const config = join(OUT, `tsconfig.${key}.json`);
  // tsconfig.build.json's options with the root at the repository, so the child and src/ keep
  // their relative paths; paths in a config file are relative to it.
  writeFileSync(
    config,
    JSON.stringify({
      extends: '../../tsconfig.build.json',
      compilerOptions: { rootDir: '../..', outDir: tmp, declaration: false, sourceMap: false },
      files: files.map((f) => `../../${f}`),
      include: [],
    }),
  );
  const t0 = performance.now();
  try {
    await promisify(execFile)(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', config], { cwd: ROOT });
    renameSync(tmp, dir);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    const out = (err as { stdout?: string }).stdout ?? '';
    throw new Error(`tsc failed: ${out.split('\n').slice(0, 5).join(' ') || (err as Error).message}`);
  } finally {
    rmSync(config, { force: true });
  }
  log(`memory: built src/ for ${MEMORY_BUILT_ROW} in ${((performance.now() - t0) / 1000).toFixed(1)}s (.build/bench-dist/${key})`);
  return child;
}

/** Builds (or finds) the package and reads a started Manager's memory in a plain node child. */
export async function runBuiltMemory(opts: {
  managerName: string;
  dataDir: string;
  signal: AbortSignal;
  log: (line: string) => void;
  onChild: (pid: number | undefined) => void;
}): Promise<RowResult[]> {
  opts.signal.throwIfAborted();
  const t0 = performance.now();
  try {
    const child = await buildChild(opts.log);
    opts.log('memory: child process running the built package (plain node), a started Manager');
    // The build sits in .build/bench-dist, not where the package keeps its agent: say where.
    process.env['SBX_AGENT_DIR'] ??= join(ROOT, '.build', 'agent');
    const r = await probeBuiltMemory(child, { managerName: opts.managerName, dataDir: opts.dataDir }, opts.onChild);
    return [
      {
        name: MEMORY_BUILT_ROW,
        group: 'memory',
        note: `started Manager, no boxes, from the built package (tsc output, plain node)${r.gc ? '' : '; no --expose-gc, RSS includes garbage'}`,
        status: 'ok',
        sides: [],
        ratio: null,
        wallMs: performance.now() - t0,
        memory: { baselineMiB: r.baselineRss / MiB, baselineOf: 'node', rssMiB: r.managerRss / MiB, boxes: 0, heapMiB: r.managerHeapUsed / MiB },
      },
    ];
  } catch (err) {
    if (opts.signal.aborted) throw opts.signal.reason;
    opts.log(`memory: FAILED: ${(err as Error).message}`);
    return [notRun({ name: MEMORY_BUILT_ROW, group: 'memory' }, 'failed', (err as Error).message)];
  }
}
