/**
 * Unchanged e2b code on sbx, end to end: the real `e2b` SDK creates a sandbox through the control
 * plane, runs commands and moves files through envd, a second process finds it with nothing but
 * the three E2B_* variables and its id, `getHost(port)` reaches a service started after create
 * through sbx's host-based proxy, and kill removes the box.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { after, before, test } from 'node:test';
import { Sandbox } from 'e2b';
import { startTestServer, type TestServer } from '../../testing/server.js';
import { testEnv } from '../../testing/env.js';

const DOMAIN = 'e2b.sbx.test';
let srv: TestServer;
let key: string;
let env: Record<string, string>;

before(async () => {
  srv = await startTestServer('e2b-e2e', { serve: { proxyDomain: DOMAIN, e2b: { templates: { base: testEnv.e2bImage } } } });
  key = (await srv.server.keys.create({ name: 'e2b-user', role: 'user' })).e2bKey;
  env = { E2B_API_URL: `${srv.url}/e2b/api`, E2B_SANDBOX_URL: `${srv.url}/e2b/envd`, E2B_API_KEY: key };
});

after(async () => {
  await srv.dispose();
});

const opts = () => ({ apiUrl: env['E2B_API_URL']!, sandboxUrl: env['E2B_SANDBOX_URL']!, apiKey: key });

/** Runs `code` (an ES module body) in a fresh node process with the E2B_* variables only. */
function child(code: string, extraEnv: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, ['--input-type=module', '-e', code], {
      env: { PATH: process.env['PATH'] ?? '', ...env, ...extraEnv },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.on('close', (c) => resolve({ code: c, stdout, stderr }));
  });
}

test('pause and resume keep files and processes: connect resumes, so does any use (with a timeout again); kill of a paused sandbox', async () => {
  const sbx = await Sandbox.create({ ...opts(), metadata: { suite: 'e2e-pause' } });
  try {
    await sbx.commands.run('mkdir -p state && head -c 65536 /dev/urandom > state/blob.bin');
    const hash = (await sbx.commands.run('sha256sum state/blob.bin')).stdout;
    // timeoutMs 0: no command deadline, so only the pause and resume could end it.
    // Written by a rename, so whole once it exists; run() returns once the command started, and
    // bash -l reads the image's profile files before it gets there.
    const bg = await sbx.commands.run('echo $$ > /tmp/bg.pid.new && mv /tmp/bg.pid.new /tmp/bg.pid; exec sleep 3600', { background: true, timeoutMs: 0 });
    await sbx.commands.run('until [ -e /tmp/bg.pid ]; do sleep 0.05; done', { timeoutMs: 30_000 });
    const pid = (await sbx.files.read('/tmp/bg.pid')).trim();
    const box = await srv.manager.get(sbx.sandboxId);

    assert.equal(await sbx.pause(), true);
    assert.equal(box.status, 'paused');
    assert.equal(await sbx.isRunning(), false, 'paused is not running, as e2b says');
    assert.equal(box.status, 'paused', 'and asking is a read, which does not resume it');
    const again = await Sandbox.connect(sbx.sandboxId, opts());
    assert.equal(box.status, 'running', 'connect resumed it');
    assert.equal((await again.commands.run('sha256sum state/blob.bin')).stdout, hash, 'the file written before the pause');
    assert.equal(
      (await again.commands.run(`kill -0 ${pid} && cat /proc/${pid}/cmdline | tr '\\0' ' '`)).stdout,
      'sleep 3600 ',
      'the same process, not a new one',
    );
    assert.ok((await again.commands.list()).some((p) => p.pid === bg.pid));

    // Any use resumes a paused sandbox (e2b's autoResume), and gives it e2b's default timeout again.
    assert.equal(await again.pause(), true);
    assert.equal(box.maxLifetimeMs, 0);
    const before = Date.now();
    assert.equal((await sbx.commands.run(`kill -0 ${pid} && echo woke`)).stdout, 'woke\n');
    assert.equal(box.status, 'running');
    const info = await sbx.getInfo();
    assert.equal(info.state, 'running');
    assert.ok(info.endAt.getTime() >= before + 300_000 - 1_000, `a timeout again, not none (${info.endAt.toISOString()})`);

    assert.equal(await sbx.pause(), true);
  } finally {
    assert.equal(await sbx.kill(), true);
  }
  await assert.rejects(srv.manager.get(sbx.sandboxId), (err: { code?: string }) => err.code === 'not_found');
});

test('create, run, write and read, connect from a second process, getHost through the proxy, kill', async () => {
  const sbx = await Sandbox.create({ ...opts(), metadata: { suite: 'e2e' } });
  try {
    const r = await sbx.commands.run('echo "hello from $(whoami)"');
    assert.equal(r.stdout, 'hello from user\n');
    await sbx.files.write('app/data.txt', 'shared state\n');

    // A second process: the three variables and the id, nothing else.
    const other = await child(
      `import { Sandbox } from 'e2b';
       const sbx = await Sandbox.connect(process.env.SBX_ID);
       const r = await sbx.commands.run('cat app/data.txt; echo from-child > app/child.txt');
       process.stdout.write(JSON.stringify({ out: r.stdout, host: sbx.getHost(8080) }));`,
      { SBX_ID: sbx.sandboxId, NODE_PATH: '' },
    );
    assert.equal(other.code, 0, other.stderr);
    const said = JSON.parse(other.stdout) as { out: string; host: string };
    assert.equal(said.out, 'shared state\n');
    assert.equal(said.host, `8080-${sbx.sandboxId}.${DOMAIN}`);
    assert.equal(await sbx.files.read('app/child.txt'), 'from-child\n');

    // A service started after create is reached at getHost(port), with the key as the credential.
    await sbx.commands.run('mkdir -p /tmp/www && echo served-by-box > /tmp/www/index.html');
    await sbx.commands.run('python3 -m http.server 8080 --directory /tmp/www', { background: true });
    // Started is not yet listening: wait for the port (the proxy says 503 port_not_listening till then).
    await sbx.commands.run('until curl -sf -o /dev/null http://127.0.0.1:8080/index.html; do sleep 0.05; done', { timeoutMs: 30_000 });
    const page = await viaHost(sbx.getHost(8080), '/index.html', key);
    assert.equal(page.status, 200, page.body);
    assert.equal(page.body, 'served-by-box\n');
    assert.equal((await viaHost(sbx.getHost(8080), '/index.html', null)).status, 403); // no credential: e2b's 403
  } finally {
    assert.equal(await sbx.kill(), true);
  }
  await assert.rejects(srv.manager.get(sbx.sandboxId), (err: { code?: string }) => err.code === 'not_found');
});

/** GET through the server with the Host a browser would send for that host name. */
function viaHost(host: string, path: string, apiKey: string | null): Promise<{ status: number; body: string }> {
  const { port } = new URL(srv.url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path, headers: { host: `${host}:${port}`, ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) } },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}
