/**
 * What the build ships: `tsc -p tsconfig.build.json` (what `npm run build` runs) into a temporary
 * directory, then the tree is read. Nothing of the test support (src/testing) may be in it, nor
 * any file that would load it, nor a test file.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const out = mkdtempSync(join(tmpdir(), 'sbx-dist-'));
after(() => rmSync(out, { recursive: true, force: true }));

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]));
}

test('the built package holds no test support: no testing path, no test file, no import of either', () => {
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const build = spawnSync(process.execPath, [tsc, '-p', join(ROOT, 'tsconfig.build.json'), '--outDir', out], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(build.status, 0, `the build failed:\n${build.stdout}\n${build.stderr}`);
  const built = files(out).map((f) => relative(out, f));
  // The entry points are there: an empty or misplaced tree would prove nothing.
  for (const entry of ['index.js', 'cli/main.js', 'client/index.js', 'jsapi/index.js', 'server/index.js']) assert.ok(built.includes(entry), entry);
  assert.deepEqual(
    built.filter((f) => f.split('/').includes('testing') || /\.test\.(js|d\.ts)$/.test(f)),
    [],
  );
  const loading: string[] = [];
  for (const f of built.filter((x) => x.endsWith('.js') || x.endsWith('.d.ts'))) {
    const text = readFileSync(join(out, f), 'utf8');
    for (const m of text.matchAll(/(?:from\s*|import\s*\(?\s*)['"](\.{1,2}\/[^'"]+)['"]/g)) {
      const target = relative(out, resolve(dirname(join(out, f)), m[1]!));
      if (target.split('/').includes('testing')) loading.push(`${f} -> ${m[1]}`);
    }
    if (/from\s*['"]node:test['"]/.test(text)) loading.push(`${f} -> node:test`);
  }
  assert.deepEqual(loading, []);
});
