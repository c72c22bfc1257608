import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/**
 * Module hooks (node:module `register`) that append every URL a child process resolves to the file
 * named in `data.file`: the run-time half of the tests that prove what a module graph loads (the
 * SDK's, the CLI's start-up). Register them with
 * `register('data:text/javascript,' + encodeURIComponent(RESOLVE_RECORDER_HOOKS), { data: { file } })`.
 */
export const RESOLVE_RECORDER_HOOKS = `
import { appendFileSync } from 'node:fs';
let file;
export function initialize(data) { file = data.file; }
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  appendFileSync(file, r.url + '\\n');
  return r;
}`;

/**
 * Runs `body` (ES module code; top-level await allowed) in a child `node --import tsx` with the
 * recorder registered first, and answers every module file the child loaded after that (ESM
 * resolutions, and CommonJS requires from the require cache at exit) as paths, with its stdout.
 */
export async function modulesLoadedBy(body: string, opts: { cwd: string }): Promise<{ modules: string[]; stdout: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-module-graph-'));
  try {
    const log = join(dir, 'loaded.txt');
    const script = `
      import { register, createRequire } from 'node:module';
      import { appendFileSync } from 'node:fs';
      const require = createRequire(import.meta.url);
      const before = new Set(Object.keys(require.cache));
      register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(RESOLVE_RECORDER_HOOKS)}), { data: { file: ${JSON.stringify(log)} } });
      process.on('exit', () => appendFileSync(${JSON.stringify(log)}, Object.keys(require.cache).filter((k) => !before.has(k)).join('\\n') + '\\n'));
      ${body}
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: opts.cwd });
    const modules = readFileSync(log, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((u) => (u.startsWith('file:') ? fileURLToPath(u) : u))
      .filter((p) => !p.startsWith('node:'));
    return { modules: [...new Set(modules)], stdout };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The npm packages among module paths (`ws`, `@kubernetes/client-node`), each once. */
export function packagesOf(modules: string[]): string[] {
  return [...new Set(modules.flatMap((p) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(p)?.[1] ?? []))];
}
