/**
 * The dependency rule of docs/architecture.md, checked over every import and re-export in src
 * (type-only ones too: a type from a higher layer is a dependency on it). Test files and the
 * testing area may import anything; nothing else may import the testing area.
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const src = dirname(fileURLToPath(import.meta.url));

/** Each area, and the areas it may import (its own files always). First match wins. */
const AREAS: Array<{ area: string; match: (f: string) => boolean; may: string[]; typesOf?: string[] }> = [
  { area: 'testing', match: (f) => f.startsWith('testing/'), may: ['*'] },
  { area: 'errors', match: (f) => f === 'errors.ts', may: [] },
  { area: 'util', match: (f) => f.startsWith('util/'), may: ['errors'] },
  { area: 'attach', match: (f) => f.startsWith('attach/'), may: ['errors', 'util'] },
  { area: 'runtime', match: (f) => f.startsWith('runtime/'), may: ['errors', 'util', 'attach'] },
  // sbx node: the node machine's own runtime served to a Manager (src/node).
  { area: 'node', match: (f) => f.startsWith('node/'), may: ['errors', 'util', 'runtime'] },
  { area: 'workspace', match: (f) => f.startsWith('workspace/'), may: ['errors', 'util', 'runtime'] },
  { area: 'sandbox', match: (f) => f.startsWith('sandbox/'), may: ['errors', 'util', 'attach', 'runtime', 'workspace'] },
  // serve() in server/index.ts composes the server: its core and the plugins on it.
  { area: 'server-entry', match: (f) => f === 'server/index.ts', may: ['errors', 'util', 'attach', 'runtime', 'workspace', 'sandbox', 'server', 'e2b'] },
  { area: 'e2b', match: (f) => f.startsWith('server/e2b/'), may: ['errors', 'util', 'attach', 'runtime', 'workspace', 'sandbox', 'server'] },
  { area: 'server', match: (f) => f.startsWith('server/'), may: ['errors', 'util', 'attach', 'runtime', 'workspace', 'sandbox'] },
  { area: 'jsapi', match: (f) => f.startsWith('jsapi/'), may: ['errors', 'util', 'attach', 'runtime', 'workspace', 'sandbox'] },
  // The SDK speaks the HTTP API: the server's wire types (API keys) are its types too, nothing else of it.
  { area: 'client', match: (f) => f.startsWith('client/'), may: ['errors', 'util', 'attach', 'runtime', 'workspace', 'sandbox'], typesOf: ['server'] },
  {
    area: 'cli',
    match: (f) => f.startsWith('cli/'),
    may: ['errors', 'util', 'attach', 'runtime', 'workspace', 'sandbox', 'server', 'server-entry', 'e2b', 'client', 'node'],
  },
  { area: 'library', match: (f) => f === 'index.ts', may: ['errors', 'util', 'attach', 'runtime', 'workspace', 'sandbox'] },
];

function areaOf(file: string): string {
  const a = AREAS.find((x) => x.match(file));
  if (!a) throw new Error(`${file}: in no area of the dependency rule; add it to AREAS and docs/architecture.md`);
  return a.area;
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'gen' ? [] : sources(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}

/** Relative specifiers of every import, re-export and dynamic import, and whether it is type-only. */
function relativeImports(source: string): Array<{ spec: string; typeOnly: boolean }> {
  const re =
    /(?:^|\n)\s*(?:import|export)\s+(type\s)?[^'";]*?from\s+['"](\.[^'"]+)['"]|(?:^|\n)\s*import\s+['"](\.[^'"]+)['"]|import\(\s*['"](\.[^'"]+)['"]\s*\)/g;
  return [...source.matchAll(re)].map((m) => ({ spec: (m[2] ?? m[3] ?? m[4])!, typeOnly: m[1] !== undefined }));
}

test('no import from a lower layer to a higher one, and nothing outside tests imports the testing area', () => {
  const broken: string[] = [];
  for (const path of sources(src)) {
    const file = relative(src, path);
    if (file.endsWith('.test.ts')) continue;
    const from = areaOf(file);
    const { may, typesOf = [] } = AREAS.find((a) => a.area === from)!;
    for (const { spec, typeOnly } of relativeImports(readFileSync(path, 'utf8'))) {
      const target = relative(src, resolve(dirname(path), spec.replace(/\.js$/, '.ts')));
      if (target.startsWith('..')) continue; // not a module of src (a URL in a page the server sends)
      const to = areaOf(target);
      if (to === from || may.includes('*') || may.includes(to) || (typeOnly && typesOf.includes(to))) continue;
      broken.push(`${file} (${from}) imports ${target} (${to})`);
    }
  }
  assert.deepEqual(broken, []);
});
