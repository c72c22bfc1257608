/**
 * The `base` template (images/sbx-e2b, Debian built by scripts/debian-rootfs.sh) has the tools
 * e2b code calls and E2B's base has, used through the real `e2b` SDK against a real `sbx serve`:
 * bash, git (init and commit as `user`), python3, curl against a server in the box, passwordless
 * sudo for `user`, tput with a TERM, procps. On sbx-base's busybox each of these exited 127, and
 * sudo also needs the box without no-new-privileges (the `sudo` security profile).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Sandbox } from 'e2b';
import { testEnv } from '../../testing/env.js';
import { startTestServer, type TestServer } from '../../testing/server.js';

let srv: TestServer;
let sbx: Sandbox;

before(async () => {
  srv = await startTestServer('e2b-base-template', { serve: { e2b: { templates: { base: testEnv.e2bImage } } } });
  const key = (await srv.server.keys.create({ name: 'e2b-base', role: 'user' })).e2bKey;
  sbx = await Sandbox.create({ apiUrl: `${srv.url}/e2b/api`, sandboxUrl: `${srv.url}/e2b/envd`, apiKey: key, metadata: { suite: 'base-template' } });
});

after(async () => {
  await sbx?.kill();
  await srv?.dispose();
});

/** Runs `cmd` as the sandbox's default user; the SDK throws on a non-zero exit, with its output. */
async function run(cmd: string, opts: { envs?: Record<string, string>; user?: 'root' | 'user' } = {}): Promise<string> {
  return (await sbx.commands.run(cmd, opts)).stdout;
}

describe(`the base template (${testEnv.e2bImage})`, () => {
  test('the default user is `user` (uid 1000, home /home/user, login shell bash), in bash 5', async () => {
    assert.equal(
      await run('id -un; id -u; id -g; pwd; echo "$HOME"; getent passwd user | cut -d: -f7'),
      'user\n1000\n1000\n/home/user\n/home/user\n/bin/bash\n',
    );
    assert.match(await run('bash --version'), /^GNU bash, version 5\./);
    // `; true`: a lone command bash would exec, and then $$ would be ps itself.
    assert.equal(await run('ps -o comm= -p $$; true'), 'bash\n', 'procps ps, and the SDK runs commands in bash');
  });

  test('sudo -n works for `user` without a password, and makes it root', async () => {
    assert.equal(await run('sudo -n true && sudo -n id -u && sudo -n -u user id -un'), '0\nuser\n');
  });

  test('git: init, commit and log as `user`', async () => {
    // E2B's base presets no identity either: e2b code sets one, as here.
    const out = await run(
      [
        'set -e',
        'rm -rf ~/repo && git init -q -b main ~/repo && cd ~/repo',
        'git config user.name "Sandbox User" && git config user.email user@example.com',
        'printf "hello\\n" > README && git add README && git commit -q -m "first commit"',
        'git log --format="%an <%ae> %s" && git status --porcelain && stat -c %U .git',
      ].join('\n'),
    );
    assert.equal(out, 'Sandbox User <user@example.com> first commit\nuser\n');
  });

  test('python3 -c runs, with the standard library', async () => {
    assert.equal(
      await run(`python3 -c 'import json, sqlite3, ssl, sys; print(json.dumps({"major": sys.version_info[0], "sum": 2 + 3}))'`),
      '{"major": 3, "sum": 5}\n',
    );
  });

  test('python is python3, and pip is there', async () => {
    assert.match(await run('python --version'), /^Python 3\.\d+\.\d+\n$/);
    assert.match(await run('pip --version'), /^pip \d+(\.\d+)* from \S+ \(python 3\.\d+\)\n$/);
  });

  test('curl fetches from an HTTP server started in the box, and reports a 404 and a refused connection', async () => {
    await run('mkdir -p /tmp/www && printf "served in the box\\n" > /tmp/www/hello.txt');
    // python3 -u: unbuffered, so its "Serving HTTP on" line says the socket is listening.
    let onReady!: () => void;
    const ready = new Promise<void>((resolve) => (onReady = resolve));
    let out = '';
    const server = await sbx.commands.run('exec python3 -u -m http.server 18123 --bind 127.0.0.1 --directory /tmp/www', {
      background: true,
      onStdout: (data) => {
        out += data;
        if (out.includes('Serving HTTP on')) onReady();
      },
    });
    try {
      // A server that exits instead (no python3, the port taken) fails here rather than never being ready.
      await Promise.race([ready, server.wait().then((r) => assert.fail(`the server exited ${r.exitCode}: ${r.stderr}`))]);
      assert.equal(await run('curl -sS --fail http://127.0.0.1:18123/hello.txt'), 'served in the box\n');
      assert.equal(await run(`curl -sS -o /dev/null -w '%{http_code}' http://127.0.0.1:18123/missing`), '404');
    } finally {
      await server.kill();
    }
    // Nothing listens now: curl's "couldn't connect" (7), not a missing program (127).
    assert.equal(await run('curl -sS http://127.0.0.1:18123/ 2>/dev/null; echo "exit $?"'), 'exit 7\n');
    assert.equal(await run('test -s /etc/ssl/certs/ca-certificates.crt && echo ca-certificates'), 'ca-certificates\n', 'https needs the CA bundle');
  });

  test('tput reads the terminfo of the TERM given', async () => {
    assert.equal(await run('tput colors; tput cols', { envs: { TERM: 'xterm-256color', COLUMNS: '132' } }), '256\n132\n');
    assert.equal(await run('tput colors; tput cols', { envs: { TERM: 'xterm' } }), '8\n80\n');
  });
});
