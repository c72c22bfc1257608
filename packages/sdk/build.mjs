// Builds the SDK package from the one source tree (src/client): its JavaScript bundled into
// dist/index.js by esbuild (ws and node built-ins stay imports: the SDK's only dependency), its
// types into one self-contained dist/index.d.ts by dts-bundle-generator (the core's types the
// SDK shares, BoxInfo, ExecResult and the rest, inlined: the package needs none of the core).
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const entry = join(root, 'src', 'client', 'index.ts');
const out = join(here, 'dist');

rmSync(out, { recursive: true, force: true });
await build({
  entryPoints: [entry],
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external: ['ws'],
  sourcemap: true,
  outfile: join(out, 'index.js'),
  logLevel: 'warning',
});
const require = createRequire(import.meta.url);
const generator = join(dirname(require.resolve('dts-bundle-generator/package.json')), 'dist', 'bin', 'dts-bundle-generator.js');
execFileSync(
  process.execPath,
  [
    generator,
    '--silent',
    '--no-check',
    // Only what src/client/index.ts exports is exported: the library's Box, which the SDK's Box is
    // built from, would otherwise be exported under the same name.
    '--export-referenced-types=false',
    '--external-imports',
    'ws',
    '--project',
    join(here, 'tsconfig.json'),
    '-o',
    join(out, 'index.d.ts'),
    entry,
  ],
  { stdio: 'inherit' },
);
// The generator references @types/node but drops the imports of node:stream's classes (they are
// not globals): put them back, so the declarations stand alone.
const dts = join(out, 'index.d.ts');
const text = readFileSync(dts, 'utf8');
const used = ['Duplex', 'PassThrough', 'Readable', 'Transform', 'Writable'].filter(
  (name) => new RegExp(`\\b${name}\\b`).test(text) && !new RegExp(`(class|interface|type) ${name}\\b`).test(text),
);
if (used.length > 0) writeFileSync(dts, `import type { ${used.join(', ')} } from 'node:stream';\n${text}`);
