/**
 * Runs every example in examples/ as a child process against the real engine, as a reader
 * would (`npx tsx examples/NAME.ts`), and asserts its output, exit status 0, and that it leaves
 * no box behind. The README's code blocks are these files (test/readme.test.ts).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { DockerRuntime } from '../src/runtime/docker/runtime.js';
import { loadConfig, resolveConfig } from '../src/sandbox/config.js';
import { managerSelector } from '../src/sandbox/labels.js';
import { startTestServer } from '../src/testing/server.js';
import { testEnv } from '../src/testing/env.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const EXAMPLES = join(ROOT, 'examples');
const dir = mkdtempSync(join(tmpdir(), 'sbx-examples-'));
const engine = new DockerRuntime(testEnv.engineAddr);

after(async () => {
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
});

/** What each example must print; an example missing here fails the suite, so none goes unrun. */
const EXPECTED: Record<string, RegExp[]> = {
  'library.ts': [
    /exitCode: 3,/,
    /stdout: 'hi\\n',/,
    /stderr: '',/,
    /truncated: false,/,
    /timedOut: false,/,
    /durationMs: \d+/,
    /^streamed\ncat exited with 0\n$/m,
  ],
  'quickstart.ts': [
    /^created box (sb-[0-9a-f]+) on pool local in \d+ ms$/m,
    /^exec exit=0 in \d+ ms:\nhello from sb-[0-9a-f]+\nuid=1000\(sandbox\)/m,
    /^stream exit=0: STREAMED THROUGH STDIN \(stdin closed\)$/m,
    /^info: status=running policy=session owner=quickstart image=sbx-base:latest$/m,
    /^removed sb-[0-9a-f]+; boxes left: 0$/m,
  ],
  'sdk.ts': [/^0 hi from the SDK$/m],
  'e2b.ts': [/^hello from user\n42\ntrue\n$/],
};

/** Examples that talk to `sbx serve`: run against a real server on this test's own Manager name. */
const NEEDS_SERVER = new Set(['sdk.ts', 'e2b.ts']);

function run(file: string, name: string, extraEnv: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SBX_')));
  const child = spawn(process.execPath, ['--import', 'tsx', join(EXAMPLES, file)], {
    cwd: ROOT,
    env: { ...env, SBX_NAME: name, SBX_DATA_DIR: join(dir, name), ...extraEnv },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const hung = setTimeout(() => child.kill('SIGKILL'), 120_000);
  return new Promise((resolve) =>
    child.on('close', (code) => {
      clearTimeout(hung);
      resolve({ code, stdout, stderr });
    }),
  );
}

const files = readdirSync(EXAMPLES)
  .filter((f) => f.endsWith('.ts'))
  .sort();

test('every example has its expected output written down here', () => {
  assert.deepEqual(files, Object.keys(EXPECTED).sort());
});

for (const file of files) {
  test(`examples/${file} runs to exit 0, prints what it says, and leaves no box`, async () => {
    // Its own instance name (the examples' `new Manager()` reads SBX_NAME), so its boxes are told apart.
    const name = `ex-${file.replace(/\.ts$/, '')}-${process.pid}`;
    const server = NEEDS_SERVER.has(file) ? await startTestServer('example', { name, dataDir: join(dir, name) }) : undefined;
    let r;
    try {
      const e2bKey = server ? (await server.server.keys.create({ name: 'example', role: 'user' })).e2bKey : '';
      const env: Record<string, string> = server
        ? {
            SBX_URL: server.url,
            SBX_API_KEY: server.admin,
            E2B_API_URL: `${server.url}/e2b/api`,
            E2B_SANDBOX_URL: `${server.url}/e2b/envd`,
            E2B_API_KEY: e2bKey,
          }
        : {};
      r = await run(file, name, env);
    } finally {
      await server?.dispose();
    }
    const left = await engine.list({ labels: managerSelector(name) });
    await Promise.all(left.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
    assert.equal(r.code, 0, `exit ${r.code}; stderr:\n${r.stderr}`);
    assert.equal(r.stderr, '');
    for (const re of EXPECTED[file] ?? []) assert.match(r.stdout, re);
    assert.deepEqual(
      left.map((c) => c.name),
      [],
      `examples/${file} left boxes behind`,
    );
  });
}

test('examples/config.yaml (the README configuration) loads, with its durations in ms', () => {
  const config = resolveConfig(loadConfig({ file: join(EXAMPLES, 'config.yaml'), env: {} }), {});
  assert.equal(config.name, 'sbx');
  assert.equal(config.cleanupIntervalMs, 60_000);
  const [pool] = config.pools;
  assert.equal(config.pools.length, 1);
  assert.deepEqual(
    [pool?.name, pool?.addr, pool?.maxTotal, pool?.maxPerUser, pool?.idleTimeoutMs, pool?.maxLifetimeMs, pool?.security],
    ['local', 'local', 20, 3, 30 * 60_000, 8 * 3_600_000, 'standard'],
  );
  assert.deepEqual(pool?.networkPolicy, { egress: 'all' });
});
