/**
 * `sbx logs`, run as a user runs it (`node --import tsx main.ts logs …` in a child process)
 * against a real server and engine.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Sbx } from '../client/index.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));
const home = mkdtempSync(join(tmpdir(), 'sbx-cli-logs-'));
let t: TestServer;
let sbxApi: Sbx;

before(async () => {
  t = await startTestServer('cli-logs');
  sbxApi = new Sbx({ url: t.url, apiKey: t.admin });
});
after(async () => {
  await t?.dispose();
  rmSync(home, { recursive: true, force: true });
});

/** `sbx …` with this test's server and key; `onStdout` sees the output so far. */
function sbx(args: string[], onStdout?: (out: string) => void): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SBX_')));
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    env: { ...env, HOME: home, XDG_CONFIG_HOME: join(home, '.config'), SBX_URL: t.url, SBX_API_KEY: t.admin, NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
    onStdout?.(stdout);
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

test('sbx logs: -f follows the command to its end (stdout and stderr apart), --tail, --since with a unit or a time, -t; errors', async () => {
  const box = await sbxApi.create({ image: IMAGE, cmd: ['sh', '-c', 'echo one; echo two >&2; until [ -e /tmp/go ]; do sleep 0.05; done; echo three; exit 4'] });
  try {
    let released = false;
    const followed = await sbx(['logs', '-f', box.id], (out) => {
      if (released || !out.includes('one\n')) return;
      released = true;
      void box.exec(['touch', '/tmp/go']);
    });
    assert.deepEqual(followed, { code: 0, stdout: 'one\nthree\n', stderr: 'two\n' }, 'ends by itself when the command does');
    assert.equal((await sbx(['logs', '--tail', '1', box.id])).stdout, 'three\n');
    assert.equal((await sbx(['logs', '--since', '1h', box.id])).stdout, 'one\nthree\n');
    assert.equal(
      (await sbx(['logs', '--since', new Date(Date.now() + 3_600_000).toISOString(), box.id])).stdout,
      '',
      'nothing was written after a time to come',
    );
    const stamped = await sbx(['logs', '-t', '-n', '1', box.id]);
    assert.match(stamped.stdout, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z three\n$/);
    const bare = await sbx(['logs', '--since', '5', box.id]);
    assert.equal(bare.code, 2, 'a duration without a unit is a usage error');
    assert.match(bare.stderr, /give a unit/);
    const missing = await sbx(['logs', 'sb-000000000000']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /not.found/i);
  } finally {
    await box.remove();
  }
});
