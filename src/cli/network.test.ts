/**
 * `sbx create --egress/--allow/--deny` and `sbx network`, run as a user runs them (child
 * processes) against a real server whose pool's runtime records the egress rules it is given
 * (no packet is filtered here).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { EgressRecorder } from '../testing/egress-runtimes.js';
import { testEnv } from '../testing/env.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'sbx-cli-network-'));
const rec = new EgressRecorder(new DockerRuntime(testEnv.engineAddr));
let t: TestServer;

before(async () => {
  t = await startTestServer('cli-net', { config: { pools: [{ name: 'local', runtime: rec.runtime }] } });
});
after(async () => {
  await t?.dispose();
  await rec.inner.close();
  rmSync(dir, { recursive: true, force: true });
});

function sbx(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SBX_')));
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    cwd: ROOT,
    env: { ...env, HOME: dir, XDG_CONFIG_HOME: join(dir, '.config'), SBX_URL: t.url, SBX_API_KEY: t.admin, NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

describe('sbx create and sbx network: egress flags', () => {
  test('create --allow/--deny makes an allowlist; sbx network shows it, then replaces it with --egress or --deny', async () => {
    const made = await sbx(['create', '--allow', 'PyPI.org:443', '--allow', '*.pythonhosted.org', '--deny', '10.0.0.0/8', '--json', IMAGE]);
    assert.equal(made.code, 0, made.stderr);
    const info = JSON.parse(made.stdout) as { id: string; networkPolicy: unknown };
    assert.deepEqual(info.networkPolicy, { egress: { allow: ['pypi.org:443', '*.pythonhosted.org'], deny: ['10.0.0.0/8'] } });
    const shown = await sbx(['network', info.id]);
    assert.equal(shown.code, 0, shown.stderr);
    assert.equal(shown.stdout, 'allow pypi.org:443, *.pythonhosted.org; deny 10.0.0.0/8\n');
    const none = await sbx(['network', info.id, '--egress', 'none']);
    assert.equal(none.code, 0, none.stderr);
    assert.equal(none.stdout, 'none\n');
    const deny = await sbx(['network', '--deny', '169.254.169.254', '--deny', '[2001:db8::1]:53/udp', '--json', info.id]);
    assert.equal(deny.code, 0, deny.stderr);
    assert.deepEqual(JSON.parse(deny.stdout), { egress: { deny: ['169.254.169.254', '[2001:db8::1]:53/udp'] } });
    const detail = await sbx(['info', info.id]);
    assert.match(detail.stdout, /Egress:\s+deny 169\.254\.169\.254, \[2001:db8::1\]:53\/udp/);
    assert.equal((await sbx(['rm', info.id])).code, 0);
  });

  test('--egress with a list is a usage error (2); a bad entry is the server’s invalid_argument naming it (1), and nothing is created', async () => {
    const boxes = (await t.manager.list()).length;
    const both = await sbx(['create', '--egress', 'none', '--allow', 'a.test', IMAGE]);
    assert.equal(both.code, 2, both.stderr);
    assert.match(both.stderr, /--egress all\|none or --allow\/--deny lists, not both/);
    const choice = await sbx(['create', '--egress', 'some', IMAGE]);
    assert.equal(choice.code, 2, choice.stderr);
    const bad = await sbx(['create', '--allow', 'ok.test', '--allow', 'bad_name.test', IMAGE]);
    assert.equal(bad.code, 1, bad.stderr);
    assert.match(bad.stderr, /networkPolicy\.egress\.allow\[1\].*bad_name\.test/);
    assert.equal((await t.manager.list()).length, boxes);
    const missing = await sbx(['network', 'sb-000000000000', '--egress', 'all']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /not_found|not found/);
  });

  test('--help describes the flags and the entry grammar', async () => {
    for (const cmd of ['create', 'network']) {
      const help = await sbx([cmd, '--help']);
      assert.equal(help.code, 0, help.stderr);
      for (const words of ['--egress <policy>', '--allow <entry>', '--deny <entry>', '*.example.com', 'At most 1000 entries']) {
        assert.ok(help.stdout.includes(words), `sbx ${cmd} --help should mention ${words}`);
      }
    }
  });
});
