/**
 * The SDK as its own npm package (packages/sdk, `sbx-sdk`): packed as npm publishes it, installed
 * into an empty project, where it must bring `ws` and nothing else, type-check from its own
 * declarations (no type of the core left unresolved), and run against a real `sbx serve`.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startTestServer } from '../src/testing/server.js';
import type { TestServer } from '../src/testing/server.js';
import { testEnv } from '../src/testing/env.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'sbx-sdk-pkg-'));
const project = join(dir, 'project');
let server: TestServer;

function bytesUnder(path: string): number {
  const s = statSync(path);
  if (!s.isDirectory()) return s.size;
  return readdirSync(path).reduce((n, e) => n + bytesUnder(join(path, e)), 0);
}

before(async () => {
  const packed = await run('npm', ['pack', '-w', 'sbx-sdk', '--pack-destination', dir, '--silent'], {
    cwd: ROOT,
    encoding: 'utf8',
    maxBuffer: 16 * 1024 * 1024,
  });
  const tarball = join(dir, packed.stdout.trim().split('\n').at(-1)!);
  writeFileSync(join(dir, 'package.json'), '{}');
  rmSync(project, { recursive: true, force: true });
  await run('mkdir', ['-p', project]);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'uses-sbx-sdk', private: true, type: 'module' }));
  await run('npm', ['install', '--no-audit', '--no-fund', '--silent', tarball], { cwd: project, encoding: 'utf8' });
  server = await startTestServer('sdk-pkg');
});

after(async () => {
  await server?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

test('npm i sbx-sdk installs the SDK and ws, nothing else', (t) => {
  const installed = readdirSync(join(project, 'node_modules')).filter((e) => !e.startsWith('.'));
  assert.deepEqual(installed.sort(), ['sbx-sdk', 'ws']);
  t.diagnostic(
    `installed: ${(bytesUnder(join(project, 'node_modules')) / 1024).toFixed(0)} KiB (sbx-sdk ${(bytesUnder(join(project, 'node_modules', 'sbx-sdk')) / 1024).toFixed(0)} KiB)`,
  );
});

test('its declarations stand alone: a strict program type-checks against them, without skipLibCheck', async () => {
  writeFileSync(
    join(project, 'check.ts'),
    [
      "import { Sbx, SbxError, isSbxError, type BoxInfo, type BoxStats, type ExecResult } from 'sbx-sdk';",
      "const sbx = new Sbx({ url: 'http://127.0.0.1:1', apiKey: 'k' });",
      "const box = await sbx.create({ image: 'x', env: { A: '1' } });",
      "const r: ExecResult = await box.exec(['true'], { timeoutMs: 1000 });",
      'const info: BoxInfo = await box.info();',
      'const stats: BoxStats = await box.stats();',
      'const cpu: number | null = stats.cpuPercent ?? (await sbx.stats(box.id)).memoryBytes;',
      'console.log(cpu);',
      'const e: unknown = r.exitCode + info.exitCode!;',
      'if (isSbxError(e, "not_found") || e instanceof SbxError) console.log(e.code);',
      '// @ts-expect-error: not an option of create',
      "await sbx.create({ image: 'x', nope: 1 });",
      '',
    ].join('\n'),
  );
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const args = ['--noEmit', '--strict', '--skipLibCheck', 'false', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022'];
  args.push('--lib', 'es2023,esnext.disposable', '--types', 'node', '--typeRoots', join(ROOT, 'node_modules', '@types'), 'check.ts');
  const r = await run(process.execPath, [tsc, ...args], { cwd: project, encoding: 'utf8' }).catch((err: { stdout?: string }) => ({
    stdout: err.stdout ?? String(err),
  }));
  assert.equal(r.stdout.trim(), '', 'tsc reported errors');
});

test('the installed package runs against sbx serve: create, exec, stats, a typed error, remove', async () => {
  writeFileSync(
    join(project, 'use.mjs'),
    [
      "import { Sbx, SbxError } from 'sbx-sdk';",
      'const sbx = new Sbx();',
      `const box = await sbx.create({ image: ${JSON.stringify(testEnv.baseImage)} });`,
      "const r = await box.exec(['sh', '-c', 'echo hi from $SBX_SANDBOX_ID']);",
      "const missing = await sbx.get('sb-no-such-box').catch((e) => e);",
      'const stats = await box.stats();',
      'await box.remove();',
      'console.log(JSON.stringify({ id: box.id, stdout: r.stdout, missing: missing instanceof SbxError ? missing.code : String(missing), memory: typeof stats.memoryBytes }));',
    ].join('\n'),
  );
  const r = await run(process.execPath, ['use.mjs'], {
    cwd: project,
    encoding: 'utf8',
    env: { ...process.env, SBX_URL: server.url, SBX_API_KEY: server.admin },
  });
  const out = JSON.parse(r.stdout) as { id: string; stdout: string; missing: string; memory: string };
  assert.equal(out.stdout, `hi from ${out.id}\n`);
  assert.equal(out.memory, 'number', "box.stats() from the package: the running box's memory");
  assert.equal(out.missing, 'not_found');
  assert.deepEqual(await server.manager.list(), [], 'the box was removed');
});
