/**
 * envd through the real `e2b` SDK (2.51) against a real sbx server and engine: commands (run,
 * exit codes, streaming, background, kill, stdin, connect from a second client), the PTY, files
 * and watches, the access token and the user. The sandboxes are boxes made by the Manager here and
 * handed to the SDK as `Sandbox.connect` would (id, access token, envd version), so these tests
 * need nothing of the control plane; src/server/e2b/e2b.test.ts runs the SDK end to end.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { CommandExitError, Sandbox } from 'e2b';
import { Sandbox as Sandbox231 } from 'e2b-v231';
import { keyIdOf, startTestServer, type TestServer } from '../../../testing/server.js';
import { testEnv } from '../../../testing/env.js';
import { HANG_MS } from '../../../testing/wait.js';
import { envdAccessToken } from '../access-token.js';
import { ENVD_PREFIX } from './routes.js';
import { ENVD_VERSION } from './version.js';

let srv: TestServer;

/** An SDK Sandbox for a new box of `image`, as the SDK builds one after create/connect. */
async function sandboxFor(image = testEnv.e2bImage, token?: string): Promise<Sandbox> {
  const box = await srv.manager.create({ image });
  return sdkSandbox(box.id, token ?? (await envdAccessToken(srv.manager, box.id, keyIdOf(srv.admin))));
}

function sdkSandbox(sandboxId: string, envdAccessToken: string): Sandbox {
  const Ctor = Sandbox as unknown as new (opts: Record<string, unknown>) => Sandbox;
  return new Ctor({
    sandboxId,
    envdAccessToken,
    envdVersion: ENVD_VERSION,
    sandboxUrl: srv.url + ENVD_PREFIX,
    apiUrl: srv.url + '/e2b/api',
    apiKey: 'e2b_' + '0'.repeat(80),
  });
}

before(async () => {
  srv = await startTestServer('envd');
});

after(async () => {
  await srv.dispose();
});

describe('commands', () => {
  let sbx: Sandbox;
  before(async () => {
    sbx = await sandboxFor();
  });

  test("run: stdout, stderr and exit 0, as e2b's `user` in its home, through bash -l", async () => {
    const r = await sbx.commands.run('echo out; echo err >&2; whoami; pwd; echo $0');
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'out\nuser\n/home/user\n/bin/bash\n');
    assert.equal(r.stderr, 'err\n');
  });

  test('a non-zero exit throws CommandExitError with the exit code and output', async () => {
    await assert.rejects(sbx.commands.run('echo partial; echo bad >&2; exit 3'), (err: unknown) => {
      assert.ok(err instanceof CommandExitError, String(err));
      assert.equal(err.exitCode, 3);
      assert.equal(err.stdout, 'partial\n');
      assert.equal(err.stderr, 'bad\n');
      return true;
    });
  });

  test('user, cwd and envs reach the process', async () => {
    const r = await sbx.commands.run('whoami; pwd; echo "$GREETING"', { user: 'root', cwd: '/tmp', envs: { GREETING: 'hi there' } });
    assert.equal(r.stdout, 'root\n/tmp\nhi there\n');
  });

  test('onStdout streams chunks as they are printed, not at the end', async () => {
    // line2 is printed only once line1 reached onStdout (which opens the gate); output held back
    // to the end would leave the gate shut until the command gives up and says so.
    const gate = `/tmp/gate-${process.pid}`;
    const script = `rm -f ${gate}; echo line1; i=0; while [ ! -e ${gate} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; [ -e ${gate} ] || echo gave-up; echo line2`;
    const seen: string[] = [];
    let opened: Promise<unknown> | undefined;
    const r = await sbx.commands.run(script, {
      onStdout: (data) => {
        seen.push(data);
        if (data.includes('line1')) opened ??= sbx.commands.run(`touch ${gate}`);
      },
    });
    await opened;
    assert.equal(r.stdout, 'line1\nline2\n', `chunks: ${JSON.stringify(seen)}`);
    assert.ok(seen.length >= 2, `chunks: ${JSON.stringify(seen)}`);
  });

  test('background: listed with its pid, killed by kill(pid), then gone (kill again is false)', async () => {
    const h = await sbx.commands.run('sleep 300', { background: true });
    assert.ok(h.pid > 1);
    const listed = await sbx.commands.list();
    const entry = listed.find((p) => p.pid === h.pid);
    assert.ok(entry, `pid ${h.pid} not in ${JSON.stringify(listed)}`);
    assert.equal(entry.cmd, '/bin/bash');
    assert.deepEqual(entry.args, ['-l', '-c', 'sleep 300']);
    // The process really runs in the box, under that pid (bash -c execs its last command).
    const ps = await sbx.commands.run(`cat /proc/${h.pid}/cmdline | tr '\\0' ' '`);
    assert.match(ps.stdout, /sleep 300/);
    assert.equal(await sbx.commands.kill(h.pid), true);
    await assert.rejects(h.wait(), (err: unknown) => err instanceof CommandExitError && err.exitCode === -1 && /signal: killed/.test(String(err.error)));
    assert.equal(
      (await sbx.commands.list()).some((p) => p.pid === h.pid),
      false,
    );
    assert.equal(await sbx.commands.kill(h.pid), false);
    const gone = await sbx.commands.run(`test -e /proc/${h.pid} && echo alive || echo gone`);
    assert.equal(gone.stdout, 'gone\n');
  });

  test('sendStdin and closeStdin: the process reads the input, then EOF', async () => {
    const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, 'hello ');
    await sbx.commands.sendStdin(h.pid, 'world\n');
    await sbx.commands.closeStdin(h.pid);
    const r = await h.wait();
    assert.equal(r.stdout, 'hello world\ndone\n');
  });

  test('without stdin: true the process reads EOF at once (no hang)', async () => {
    const r = await sbx.commands.run('cat; echo after-eof');
    assert.equal(r.stdout, 'after-eof\n');
  });

  test('a background process outlives its client; a second client connects by pid and sees its later output and exit', async () => {
    const h = await sbx.commands.run('sleep 1; echo late; exit 4', { background: true });
    await h.disconnect();
    const other = sdkSandbox(sbx.sandboxId, await envdAccessToken(srv.manager, sbx.sandboxId, keyIdOf(srv.admin)));
    const seen: string[] = [];
    const again = await other.commands.connect(h.pid, { onStdout: (d) => void seen.push(d) });
    await assert.rejects(again.wait(), (err: unknown) => err instanceof CommandExitError && err.exitCode === 4);
    assert.deepEqual(seen, ['late\n']);
  });
  test("timeoutMs ends the wait with the SDK's TimeoutError and kills the command, as envd does", async () => {
    await assert.rejects(sbx.commands.run('sleep 302', { timeoutMs: 1000 }), (err: Error) => err.name === 'TimeoutError');
    const running = async () => (await sbx.commands.list()).some((p) => p.args.join(' ').includes('sleep 302'));
    const deadline = Date.now() + HANG_MS;
    while (await running()) {
      if (Date.now() > deadline) assert.fail('the timed-out command still runs');
      await sleep(25);
    }
  });
});

describe('pty', () => {
  test('create, sendInput, resize: stty sees both sizes; exit ends it', async () => {
    const sbx = await sandboxFor();
    const chunks: Buffer[] = [];
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => void chunks.push(Buffer.from(d)) });
    const text = () => Buffer.concat(chunks).toString('utf8');
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; tty\n'));
    await waitFor(() => /24 80/.test(text()), 'the first stty size');
    await sbx.pty.resize(pty.pid, { cols: 100, rows: 40 });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\nexit 0\n'));
    const r = await pty.wait();
    assert.equal(r.exitCode, 0);
    assert.match(text(), /40 100/);
    assert.match(text(), /\/dev\/pts\/\d+/);
  });

  test('a second client connects to a running terminal; kill ends it', async () => {
    const sbx = await sandboxFor();
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: () => undefined });
    const other = sdkSandbox(sbx.sandboxId, await envdAccessToken(srv.manager, sbx.sandboxId, keyIdOf(srv.admin)));
    const chunks: Buffer[] = [];
    const again = await other.pty.connect(pty.pid, { onData: (d) => void chunks.push(Buffer.from(d)) });
    await other.pty.sendInput(pty.pid, new TextEncoder().encode('echo seen-$((6*7))\n'));
    await waitFor(() => Buffer.concat(chunks).toString().includes('seen-42'), 'the echo on the second client');
    assert.equal(await other.pty.kill(pty.pid), true);
    await assert.rejects(again.wait());
    assert.equal(await other.pty.kill(pty.pid), false);
  });
});

describe('files', () => {
  let sbx: Sandbox;
  before(async () => {
    sbx = await sandboxFor();
  });

  test('write, read, exists, list, makeDir, rename, remove, relative to the home', async () => {
    const info = await sbx.files.write('notes/a.txt', 'alpha\n');
    assert.equal(info.path, '/home/user/notes/a.txt');
    assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'alpha\n');
    assert.equal(await sbx.files.exists('notes/a.txt'), true);
    assert.equal(await sbx.files.exists('notes/missing.txt'), false);
    assert.equal(await sbx.files.makeDir('/tmp/made/deep'), true);
    assert.equal(await sbx.files.makeDir('/tmp/made/deep'), false);
    await sbx.files.rename('notes/a.txt', 'notes/b.txt');
    const entries = await sbx.files.list('notes');
    assert.deepEqual(
      entries.map((e) => [e.name, e.type, e.path, e.size]),
      [['b.txt', 'file', '/home/user/notes/b.txt', 6]],
    );
    await sbx.files.remove('notes/b.txt');
    assert.equal(await sbx.files.exists('notes/b.txt'), false);
    // Written as the user: the box sees the file owned by uid 1000.
    await sbx.files.write('/tmp/owned.txt', 'x');
    assert.equal((await sbx.commands.run('stat -c %u:%g /tmp/owned.txt')).stdout, '1000:1000\n');
  });

  test('binary round trip of 3 MiB by hash; several files in one write', async () => {
    const data = randomBytes(3 * 1024 * 1024);
    await sbx.files.write('/tmp/blob.bin', new Blob([data]));
    const back = Buffer.from(await sbx.files.read('/tmp/blob.bin', { format: 'bytes' }));
    assert.equal(createHash('sha256').update(back).digest('hex'), createHash('sha256').update(data).digest('hex'));
    const sum = await sbx.commands.run('sha256sum /tmp/blob.bin');
    assert.equal(sum.stdout.split(' ')[0], createHash('sha256').update(data).digest('hex'));
    const many = await sbx.files.write([
      { path: '/tmp/m/one.txt', data: '1' },
      { path: '/tmp/m/two.txt', data: '22' },
    ]);
    assert.deepEqual(
      many.map((w) => w.path),
      ['/tmp/m/one.txt', '/tmp/m/two.txt'],
    );
    assert.equal(await sbx.files.read('/tmp/m/two.txt'), '22');
  });

  test("reads keep the user's permissions (/root is closed to `user`, open to root); writes are envd's, as root, handed to the user", async () => {
    await assert.rejects(sbx.files.read('/root/.profile'));
    // As E2B's envd (which runs as root): the write succeeds, and the file is the user's.
    await sbx.files.write('/etc/owned', 'x');
    assert.equal((await sbx.files.getInfo('/etc/owned')).owner, 'user');
    await sbx.files.write('/etc/by-root', 'ok', { user: 'root' });
    assert.equal(await sbx.files.read('/etc/by-root', { user: 'root' }), 'ok');
  });

  test('getInfo, list with depth, read as stream, blob and gzip', async () => {
    await sbx.files.write('/tmp/tree/a/b/deep.txt', 'deep');
    await sbx.files.write('/tmp/tree/top.txt', 'top!');
    const info = await sbx.files.getInfo('/tmp/tree/top.txt');
    assert.deepEqual([info.name, info.type, info.path, info.size], ['top.txt', 'file', '/tmp/tree/top.txt', 4]);
    assert.match(info.permissions, /^-rw/);
    assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime.getTime() - Date.now()) < 60_000);
    const one = (await sbx.files.list('/tmp/tree')).map((e) => e.path).sort();
    assert.deepEqual(one, ['/tmp/tree/a', '/tmp/tree/top.txt']);
    const three = (await sbx.files.list('/tmp/tree', { depth: 3 })).map((e) => e.path).sort();
    assert.deepEqual(three, ['/tmp/tree/a', '/tmp/tree/a/b', '/tmp/tree/a/b/deep.txt', '/tmp/tree/top.txt']);
    const stream = await sbx.files.read('/tmp/tree/top.txt', { format: 'stream' });
    assert.equal(await new Response(stream).text(), 'top!');
    const blob = await sbx.files.read('/tmp/tree/a/b/deep.txt', { format: 'blob' });
    assert.equal(await blob.text(), 'deep');
    assert.equal(await sbx.files.read('/tmp/tree/top.txt', { gzip: true }), 'top!');
  });

  test("a full disk is 507, the SDK's NotEnoughSpaceError, and leaves no partial file", async () => {
    // /dev/shm is a 64 MiB tmpfs in every box: 80 MiB cannot fit.
    const big = new Blob([Buffer.alloc(80 * 1024 * 1024, 1)]);
    await assert.rejects(sbx.files.write('/dev/shm/too-big.bin', big), (err: Error) => err.name === 'NotEnoughSpaceError');
    assert.equal((await sbx.commands.run('ls -A /dev/shm')).stdout, '');
  });

  test('a missing file is FileNotFoundError-like (NotFoundError)', async () => {
    await assert.rejects(sbx.files.read('/tmp/nope.txt'), (err: Error) => err.name.includes('NotFound'));
  });

  test('watchDir recursive sees a file written in a subdirectory', async () => {
    await sbx.files.makeDir('/tmp/rwatch/sub');
    const events: Array<{ type: string; name: string }> = [];
    const handle = await sbx.files.watchDir('/tmp/rwatch', (e) => void events.push({ type: String(e.type), name: e.name }), { recursive: true });
    try {
      await sbx.files.write('/tmp/rwatch/sub/inner.txt', 'x');
      await waitFor(() => events.some((e) => e.name === 'sub/inner.txt'), `an event for sub/inner.txt (have ${JSON.stringify(events)})`);
    } finally {
      await handle.stop();
    }
  });

  test('watchDir reports create, write and remove as they happen', async () => {
    await sbx.files.makeDir('/tmp/watched');
    const events: Array<{ type: string; name: string }> = [];
    const handle = await sbx.files.watchDir('/tmp/watched', (e) => void events.push({ type: String(e.type), name: e.name }));
    try {
      await sbx.files.write('/tmp/watched/new.txt', 'x');
      await sbx.commands.run('rm /tmp/watched/new.txt');
      await waitFor(() => events.some((e) => e.type === 'remove'), `a remove event (have ${JSON.stringify(events)})`);
      assert.ok(
        events.some((e) => e.type === 'create' && e.name === 'new.txt'),
        JSON.stringify(events),
      );
      assert.ok(
        events.some((e) => e.type === 'write' && e.name === 'new.txt'),
        JSON.stringify(events),
      );
    } finally {
      await handle.stop();
    }
  });
});

describe('access and errors', () => {
  test("a wrong access token, or another box's token, is refused (AuthenticationError)", async () => {
    const a = await srv.manager.create({ image: testEnv.e2bImage });
    const b = await srv.manager.create({ image: testEnv.e2bImage });
    const forged = sdkSandbox(a.id, 'x'.repeat(43));
    await assert.rejects(forged.commands.run('true'), (err: Error) => err.name === 'AuthenticationError');
    await assert.rejects(forged.files.read('/etc/passwd'), (err: Error) => err.name === 'AuthenticationError');
    const crossed = sdkSandbox(a.id, await envdAccessToken(srv.manager, b.id, keyIdOf(srv.admin)));
    await assert.rejects(crossed.commands.run('true'), (err: Error) => err.name === 'AuthenticationError');
  });

  test('the token of a removed box does not open a new box under the same id', async () => {
    const id = `reused-${process.pid}`;
    const first = await srv.manager.create({ id, image: testEnv.e2bImage });
    const oldToken = await envdAccessToken(srv.manager, id, keyIdOf(srv.admin));
    await first.remove();
    await srv.manager.create({ id, image: testEnv.e2bImage });
    assert.notEqual(await envdAccessToken(srv.manager, id, keyIdOf(srv.admin)), oldToken);
    await assert.rejects(sdkSandbox(id, oldToken).commands.run('true'), (err: Error) => err.name === 'AuthenticationError');
    assert.equal((await sdkSandbox(id, await envdAccessToken(srv.manager, id, keyIdOf(srv.admin))).commands.run('echo ok')).stdout, 'ok\n');
  });

  test("a token is its key's: revoking that key ends it, while another key's token for the box still works", async () => {
    const carol = await srv.server.keys.create({ name: 'carol', role: 'user', owner: 'carol' });
    const box = await srv.manager.create({ image: testEnv.e2bImage, owner: 'carol' });
    const carols = sdkSandbox(box.id, await envdAccessToken(srv.manager, box.id, carol.id));
    const admins = sdkSandbox(box.id, await envdAccessToken(srv.manager, box.id, keyIdOf(srv.admin)));
    assert.equal((await carols.commands.run('echo ok')).stdout, 'ok\n');
    assert.equal((await srv.call('DELETE', `/v1/keys/${carol.id}`)).status, 204);
    await assert.rejects(carols.commands.run('true'), (err: Error) => err.name === 'AuthenticationError');
    const health = await fetch(`${srv.url}${ENVD_PREFIX}/health`, {
      headers: { 'e2b-sandbox-id': box.id, 'x-access-token': await envdAccessToken(srv.manager, box.id, carol.id) },
    });
    assert.equal(health.status, 401);
    assert.match(((await health.json()) as { message: string }).message, /revoked/);
    await assert.rejects(carols.files.read('/etc/hostname'), (err: Error) => err.name === 'AuthenticationError');
    assert.equal((await admins.commands.run('echo still')).stdout, 'still\n');
  });

  test('wrong tokens count toward the address limit (429, Retry-After); a right token still works from that address', async () => {
    const s = await startTestServer('envd-limit', { serve: { authFailures: { max: 3, windowMs: 60_000 } } });
    try {
      const box = await s.manager.create({ image: testEnv.baseImage });
      const health = (token: string) => fetch(`${s.url}${ENVD_PREFIX}/health`, { headers: { 'e2b-sandbox-id': box.id, 'x-access-token': token } });
      const good = await envdAccessToken(s.manager, box.id, keyIdOf(s.admin));
      const wrong = `${keyIdOf(s.admin)}.${'x'.repeat(43)}`;
      for (let i = 0; i < 3; i++) assert.equal((await health(wrong)).status, 401);
      const limited = await health(wrong);
      assert.equal(limited.status, 429);
      assert.ok(Number(limited.headers.get('retry-after')) > 0);
      assert.equal((await health(good)).status, 204, 'a right token is never locked out');
      // One limiter for every credential: the address is over it for API keys too, not for a good one.
      assert.equal((await s.call('GET', '/v1/boxes', { key: 'wrong' })).status, 429);
      assert.equal((await s.call('GET', '/v1/boxes')).status, 200);
    } finally {
      await s.dispose();
    }
  });

  test('an unknown id cannot be probed: a token that names no live key reads as a wrong token (401); one that does reads as not running (502); both count toward the limit', async () => {
    const s = await startTestServer('envd-probe', { serve: { authFailures: { max: 6, windowMs: 60_000 } } });
    try {
      const box = await s.manager.create({ image: testEnv.baseImage });
      const health = async (id: string, token: string) => {
        const res = await fetch(`${s.url}${ENVD_PREFIX}/health`, { headers: { 'e2b-sandbox-id': id, 'x-access-token': token } });
        return { status: res.status, retryAfter: res.headers.get('retry-after'), message: ((await res.json()) as { message: string }).message };
      };
      const unknown = `sb-never-${process.pid}`;
      // Without a live key id, a known box and an unknown id answer alike: four failures.
      for (const token of ['garbage', `${'0'.repeat(16)}.${'x'.repeat(43)}`]) {
        const known = await health(box.id, token);
        assert.equal(known.status, 401);
        assert.deepEqual(await health(unknown, token), known, `token ${token}: the same answer for an unknown id as for a known box`);
      }
      // A token naming a live key (what a removed box's token is): not running, and counted.
      const shaped = `${keyIdOf(s.admin)}.${'x'.repeat(43)}`;
      for (let i = 0; i < 2; i++) assert.equal((await health(unknown, shaped)).status, 502);
      const limited = await health(unknown, shaped);
      assert.equal(limited.status, 429, 'unknown ids count toward the address limit');
      assert.ok(Number(limited.retryAfter) > 0);
      assert.match((await s.call('GET', '/metrics', { key: null })).text, /sbx_auth_failures_total 7/);
    } finally {
      await s.dispose();
    }
  });

  test('an image without bash: commands fail with a NotFoundError naming /bin/bash', async () => {
    const sbx = await sandboxFor(testEnv.baseImage);
    await assert.rejects(sbx.commands.run('echo hi'), (err: Error) => err.name === 'NotFoundError' && /\/bin\/bash/.test(err.message));
  });

  test('a box whose /etc/passwd is huge: the server refuses to read it, and stays up', async () => {
    const box = await srv.manager.create({ image: testEnv.e2bImage });
    await box.exec(['sh', '-c', 'head -c 2097152 /dev/zero >> /etc/passwd'], { user: 'root' });
    const big = sdkSandbox(box.id, await envdAccessToken(srv.manager, box.id, keyIdOf(srv.admin)));
    await assert.rejects(big.commands.run('echo hi'), (err: Error) => /larger than 1048576 bytes/.test(err.message));
    await box.remove();
    const other = await sandboxFor();
    assert.equal((await other.commands.run('echo still up')).stdout, 'still up\n');
  });

  test("without E2b-Sandbox-Id (older Python SDKs after connect) the token names the box; a removed box's token reads as not found (502)", async () => {
    const box = await srv.manager.create({ image: testEnv.baseImage });
    const token = await envdAccessToken(srv.manager, box.id, keyIdOf(srv.admin));
    const health = async (t: string) => {
      const res = await fetch(`${srv.url}${ENVD_PREFIX}/health`, { headers: { 'x-access-token': t } });
      return { status: res.status, text: await res.text() };
    };
    assert.equal((await health(token)).status, 204);
    assert.equal((await health('garbage')).status, 401);
    assert.equal((await health(`${keyIdOf(srv.admin)}.${'x'.repeat(43)}`)).status, 502);
    await box.remove();
    const gone = await health(token);
    assert.equal(gone.status, 502);
    assert.match(gone.text, /was not found/);
  });

  test('a removed box: requests fail as a sandbox that is not running', async () => {
    const sbx = await sandboxFor();
    await (await srv.manager.get(sbx.sandboxId)).remove();
    await assert.rejects(sbx.commands.run('true'), (err: Error) => /not running/i.test(err.message));
    await assert.rejects(sbx.files.read('/etc/hostname'), (err: Error) => /not running|502/i.test(err.message));
  });
});

async function waitFor(cond: () => boolean, what: string, ms = HANG_MS): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

describe('the older SDK (e2b 2.31)', () => {
  test('commands, stdin, files and a missing file through 2.31', async () => {
    const box = await srv.manager.create({ image: testEnv.e2bImage });
    const Ctor = Sandbox231 as unknown as new (opts: Record<string, unknown>) => Sandbox231;
    const sbx = new Ctor({
      sandboxId: box.id,
      envdAccessToken: await envdAccessToken(srv.manager, box.id, keyIdOf(srv.admin)),
      envdVersion: ENVD_VERSION,
      sandboxUrl: srv.url + ENVD_PREFIX,
      apiUrl: srv.url + '/e2b/api',
      apiKey: 'e2b_' + '0'.repeat(80),
    });
    const r = await sbx.commands.run('echo v231; whoami');
    assert.equal(r.stdout, 'v231\nuser\n');
    await assert.rejects(sbx.commands.run('exit 5'), (err: { exitCode?: number }) => err.exitCode === 5);
    const h = await sbx.commands.run('cat', { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, 'piped\n');
    await sbx.commands.closeStdin(h.pid);
    assert.equal((await h.wait()).stdout, 'piped\n');
    await sbx.files.write('/tmp/v231.txt', 'old sdk');
    assert.equal(await sbx.files.read('/tmp/v231.txt'), 'old sdk');
    assert.deepEqual(
      (await sbx.files.list('/tmp')).filter((e) => e.name === 'v231.txt').map((e) => e.type),
      ['file'],
    );
    await assert.rejects(sbx.files.read('/tmp/none'), (err: Error) => err.name.includes('NotFound'));
  });
});
