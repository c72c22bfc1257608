/**
 * Builds the web console (console/) into .build/console/: esbuild bundles console/src/main.tsx
 * (Preact, xterm.js and uPlot; the terminal and the charts as chunks loaded when first shown)
 * and its CSS into content-hashed files under assets/, writes index.html naming them, and a
 * gzip copy of each for the server to send (src/server/console.ts).
 *
 * Skipped when nothing it reads changed since the last build (a hash of console/ and the lock
 * file), so every script may call it: `npm ci` (prepare), `npm test`, `npm pack`.
 *
 * Usage: tsx scripts/console-build.ts [--force]
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

const root = fileURLToPath(new URL('..', import.meta.url));
const source = join(root, 'console');
const out = join(root, '.build', 'console');

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await filesUnder(p)));
    else out.push(p);
  }
  return out.sort();
}

/** What the build reads: the console's sources, this script and the locked versions of what it bundles. */
async function inputHash(): Promise<string> {
  const h = createHash('sha256');
  for (const f of [...(await filesUnder(source)), fileURLToPath(import.meta.url), join(root, 'package-lock.json')]) {
    h.update(relative(root, f))
      .update('\0')
      .update(await readFile(f))
      .update('\0');
  }
  return h.digest('hex');
}

async function main(): Promise<void> {
  const hash = await inputHash();
  const stamp = join(out, '.input-hash');
  if (!process.argv.includes('--force') && existsSync(stamp) && (await readFile(stamp, 'utf8')) === hash) return;

  const staging = `${out}.tmp-${process.pid}`;
  await rm(staging, { recursive: true, force: true });
  const result = await build({
    entryPoints: { app: join(source, 'src', 'main.tsx') },
    bundle: true,
    splitting: true,
    format: 'esm',
    target: ['chrome110', 'firefox115', 'safari16'],
    minify: true,
    sourcemap: false,
    legalComments: 'none',
    jsx: 'automatic',
    jsxImportSource: 'preact',
    outdir: join(staging, 'assets'),
    entryNames: '[name]-[hash]',
    chunkNames: '[name]-[hash]',
    assetNames: '[name]-[hash]',
    metafile: true,
    logLevel: 'warning',
    define: { 'process.env.NODE_ENV': '"production"' },
  });
  const outputs = Object.entries(result.metafile.outputs);
  const entry = outputs.find(([file, o]) => file.endsWith('.js') && o.entryPoint?.endsWith('main.tsx'));
  if (!entry) throw new Error('esbuild wrote no entry script');
  const script = basename(entry[0]);
  const css = entry[1].cssBundle ? basename(entry[1].cssBundle) : undefined;
  const template = await readFile(join(source, 'index.html'), 'utf8');
  const html = template
    .replace('<!--styles-->', css ? `<link rel="stylesheet" href="assets/${css}">` : '')
    .replace('<!--script-->', `<script type="module" src="assets/${script}"></script>`);
  await writeFile(join(staging, 'index.html'), html);
  for (const f of await filesUnder(staging)) await writeFile(`${f}.gz`, gzipSync(await readFile(f), { level: 9 }));
  await writeFile(join(staging, '.input-hash'), hash);
  await rm(out, { recursive: true, force: true });
  await mkdir(join(root, '.build'), { recursive: true });
  await rename(staging, out);
  let gz = 0;
  for (const f of await filesUnder(out)) if (f.endsWith('.gz')) gz += (await readFile(f)).length;
  console.error(`console built: ${relative(root, out)} (${Math.round(gz / 1024)} KiB gzip in all)`);
}

await main();
