/**
 * The built package, as npm installs it: `npm run build`, then `node dist/cli/main.js` (the
 * package's `bin`) run as a user runs it, locally (`sbx run`) and against a real `sbx serve`
 * (create, exec, info, rm). The other CLI tests run the sources through tsx; this one checks that
 * the compiled files resolve their imports and find the in-box agent from dist/ too.
 */
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { DockerRuntime } from '../src/runtime/docker/runtime.js';
import { managerSelector } from '../src/sandbox/labels.js';
import { startTestServer } from '../src/testing/server.js';
import type { TestServer } from '../src/testing/server.js';
import { testEnv } from '../src/testing/env.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = join(ROOT, 'dist', 'cli', 'main.js');
const dir = mkdtempSync(join(tmpdir(), 'sbx-dist-cli-'));
const NAME = `dist-cli-${process.pid}`;
const engine = new DockerRuntime(testEnv.engineAddr);
const run = promisify(execFile);

/** Runs the built CLI without blocking this process (the test's server lives in it); resolves with the status whatever it is. */
async function sbx(args: string[], environment: NodeJS.ProcessEnv): Promise<{ status: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, [BIN, ...args], { env: environment, encoding: 'utf8' });
    return { status: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    if (typeof e.code !== 'number') throw err;
    return { status: e.code, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}
let server: TestServer;

before(async () => {
  // Before the server starts: a synchronous child blocks this process, which the server lives in.
  const build = spawnSync('npm', ['run', '-s', 'build'], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  assert.equal(build.status, 0, `npm run build failed:\n${build.stdout}\n${build.stderr}`);
  server = await startTestServer('dist-cli');
});

after(async () => {
  await server?.dispose();
  const left = await engine.list({ labels: managerSelector(NAME) });
  await Promise.all(left.map((c) => engine.remove(c.id, { force: true })));
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
  assert.deepEqual(
    left.map((c) => c.name),
    [],
    'the built CLI left boxes behind',
  );
});

/** The user's environment without their sbx settings, plus this test's. */
function env(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SBX_')));
  return { ...clean, HOME: dir, XDG_CONFIG_HOME: join(dir, 'config'), SBX_NAME: NAME, SBX_DATA_DIR: join(dir, 'data'), ...extra };
}

test('node dist/cli/main.js run: a box made, the command run through the in-box agent, the box removed', async () => {
  const r = await run(process.execPath, [BIN, 'run', testEnv.baseImage, 'sh', '-c', 'echo built; cat /proc/1/comm'], { env: env(), encoding: 'utf8' });
  assert.equal(r.stdout, 'built\nsbx-agent\n', 'PID 1 is the agent the built package found in .build/agent');
});

test('node dist/cli/main.js against sbx serve: create, exec with its status, info --json, rm', async () => {
  const remote = env({ SBX_URL: server.url, SBX_API_KEY: server.admin });
  const id = (await run(process.execPath, [BIN, 'create', testEnv.baseImage], { env: remote, encoding: 'utf8' })).stdout.trim();
  assert.match(id, /^sb-[0-9a-f]{12}$/);
  try {
    const exec = await sbx(['exec', id, '--', 'sh', '-c', 'echo out; echo err >&2; exit 4'], remote);
    assert.deepEqual([exec.status, exec.stdout, exec.stderr], [4, 'out\n', 'err\n']);
    const info = JSON.parse((await run(process.execPath, [BIN, 'info', id, '--json'], { env: remote, encoding: 'utf8' })).stdout) as {
      id: string;
      execPath: string;
      status: string;
    };
    assert.deepEqual([info.id, info.status, info.execPath], [id, 'running', 'agent']);
  } finally {
    const rm = await sbx(['rm', id], remote);
    assert.equal(rm.status, 0, rm.stderr);
  }
});
