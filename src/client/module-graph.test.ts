/**
 * The SDK must run where none of the core's dependencies are: its runtime module graph is
 * `ws`, node built-ins, its own files and two leaf files of the core (the error class and the
 * workspace path policy). Checked twice: statically, by walking the imports that survive
 * compilation (`import type` is erased, `import { type X }` is not under verbatimModuleSyntax),
 * and by loading src/client/index.ts in a child process and recording every module it loads.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { modulesLoadedBy, packagesOf } from '../testing/module-recorder.js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const entry = join(here, 'index.ts');
/** Core files the SDK may load: leaves that import nothing but each other, node built-ins and ws (src/attach). */
const ALLOWED_CORE = [
  'src/attach/connect.ts',
  'src/attach/sse-parser.ts',
  'src/errors.ts',
  'src/runtime/ports.ts',
  'src/sandbox/box-path.ts',
  'src/workspace/workspace-path.ts',
];
const ALLOWED_PACKAGES = ['ws'];

/** Specifiers of the imports and re-exports that stay in the emitted JavaScript. */
function runtimeImports(source: string): string[] {
  const out: string[] = [];
  const re = /^\s*(import|export)\s+(type\s+)?([^'";]*?)\s*from\s+['"]([^'"]+)['"]|^\s*import\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/gm;
  for (const m of source.matchAll(re)) {
    if (m[5] || m[6]) {
      out.push((m[5] ?? m[6])!);
      continue;
    }
    if (m[2]) continue; // `import type …` / `export type …`: erased
    out.push(m[4]!);
  }
  return out;
}

function walk(file: string, seen = new Set<string>(), bare = new Set<string>()): { files: Set<string>; bare: Set<string> } {
  if (seen.has(file)) return { files: seen, bare };
  seen.add(file);
  for (const spec of runtimeImports(readFileSync(file, 'utf8'))) {
    if (spec.startsWith('.')) walk(resolve(dirname(file), spec.replace(/\.js$/, '.ts')), seen, bare);
    else bare.add(spec);
  }
  return { files: seen, bare };
}

test('static: the SDK imports only ws, node built-ins, its own files and the leaf files of the core', () => {
  const { files, bare } = walk(entry);
  const outside = [...files].map((f) => relative(repo, f)).filter((f) => !f.startsWith('src/client/'));
  assert.deepEqual(outside.sort(), [...ALLOWED_CORE].sort());
  const packages = [...bare].filter((s) => !s.startsWith('node:'));
  assert.deepEqual(packages.sort(), ALLOWED_PACKAGES);
  assert.ok(files.size >= 6, `walked the graph (${files.size} files)`);
});

test('static: the walker sees through a mixed import, so it can fail', () => {
  assert.deepEqual(runtimeImports("import type { A } from 'pino';\nimport { type B } from 'fastify';\nexport type { C } from 'zod';\nimport 'dockerode';"), [
    'fastify',
    'dockerode',
  ]);
});

test('at run time: loading the SDK loads no core dependency (ESM resolutions and CommonJS requires recorded in a child)', async () => {
  const { modules: loaded } = await modulesLoadedBy(
    `const sdk = await import(${JSON.stringify(pathToFileURL(entry).href)});
     if (typeof sdk.Sbx !== 'function') throw new Error('no Sbx export');`,
    { cwd: repo },
  );
  const packages = packagesOf(loaded);
  assert.deepEqual(packages, ALLOWED_PACKAGES, `packages loaded: ${packages.join(', ')}`);
  const core = loaded
    .filter((p) => !p.includes('/node_modules/'))
    .map((p) => relative(repo, p))
    .filter((p) => !p.startsWith('src/client/'));
  assert.deepEqual(core.sort(), [...ALLOWED_CORE].sort());
  assert.ok(
    loaded.some((p) => p.endsWith('src/client/stream.ts')),
    'the recorder saw the SDK load',
  );
});
