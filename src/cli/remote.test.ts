/**
 * The commands that talk to a server, run as a user runs them: `node --import tsx main.ts …` in
 * child processes against a real server (and engine) started here. Terminal behaviour runs
 * under a real pseudo-terminal from script(1).
 */
/* eslint-disable no-control-regex -- terminal output is what these tests read */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, lstatSync, rmSync, statSync, symlinkSync, writeFileSync, chmodSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';
import { testEnv } from '../testing/env.js';

const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'sbx-cli-remote-'));
let t: TestServer;
let box: string;

before(async () => {
  t = await startTestServer('cli');
  const r = await sbx(['create', IMAGE]);
  assert.equal(r.code, 0, r.stderr);
  box = r.stdout.trim();
});
after(async () => {
  await t?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** No SBX_* of the caller; the server and admin key of this test; a config dir of its own. */
function cliEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SBX_') && k !== 'NO_COLOR'));
  const home = join(dir, 'home');
  const merged: NodeJS.ProcessEnv = { ...env, HOME: home, XDG_CONFIG_HOME: join(home, '.config'), SBX_URL: t.url, SBX_API_KEY: t.admin, ...extra };
  for (const [k, v] of Object.entries(merged)) if (v === undefined) delete merged[k];
  return merged;
}

function run(
  file: string,
  args: string[],
  opts: {
    input?: string | Buffer;
    env?: Record<string, string | undefined>;
    onOutput?: (out: string, write: (s: string) => void, child: ChildProcess) => void;
  } = {},
): Promise<Result> {
  const child = spawn(file, args, { cwd: ROOT, env: cliEnv(opts.env), stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
    opts.onOutput?.(stdout, (s) => child.stdin.write(s), child);
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  if (!opts.onOutput) child.stdin.end(opts.input ?? '');
  const hung = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return new Promise((resolve) =>
    child.on('close', (code) => {
      clearTimeout(hung);
      resolve({ code, stdout, stderr });
    }),
  );
}

function sbx(args: string[], opts: Parameters<typeof run>[2] = {}): Promise<Result> {
  return run(process.execPath, ['--import', 'tsx', MAIN, ...args], opts);
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** `sbx ARGS` on a pseudo-terminal (script -e keeps the exit status); `before` runs in the same shell first. */
function onTty(args: string[], opts: Parameters<typeof run>[2] & { before?: string } = {}): Promise<Result> {
  const line = [process.execPath, '--import', 'tsx', MAIN, ...args].map(shellQuote).join(' ');
  return run('script', ['-qefc', `${opts.before ? `${opts.before}\n` : ''}${line}`, '/dev/null'], opts);
}

async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/** One digest over a tree: every path, its kind, mode bits, symlink target and content. */
function treeDigest(root: string): string {
  const h = createHash('sha256');
  const walk = (rel: string) => {
    const abs = join(root, rel);
    const st = lstatSync(abs);
    if (st.isSymbolicLink()) h.update(`L ${rel} -> ${readlinkSync(abs)}\n`);
    else if (st.isDirectory()) {
      h.update(`D ${rel} ${(st.mode & 0o777).toString(8)}\n`);
      for (const name of readdirSync(abs).sort()) walk(rel ? `${rel}/${name}` : name);
    } else
      h.update(`F ${rel} ${(st.mode & 0o777).toString(8)} `)
        .update(readFileSync(abs))
        .update('\n');
  };
  walk('');
  return h.digest('hex');
}

function makeTree(root: string): void {
  mkdirSync(join(root, 'sub', 'deeper'), { recursive: true });
  writeFileSync(join(root, 'hello.txt'), 'hello\n');
  writeFileSync(join(root, 'sub', 'random.bin'), randomBytes(700_000));
  writeFileSync(join(root, 'sub', 'deeper', 'empty'), '');
  writeFileSync(join(root, 'run.sh'), '#!/bin/sh\necho ran\n');
  chmodSync(join(root, 'run.sh'), 0o755);
  writeFileSync(join(root, `${'long-name-'.repeat(12)}.txt`), 'a name past the 100 bytes of a plain tar header\n');
  symlinkSync('hello.txt', join(root, 'link'));
}

describe('sbx exec', () => {
  test("streams stdout and stderr apart and exits with the command's status", async () => {
    const r = await sbx(['exec', box, '--', 'sh', '-c', 'echo out; echo err >&2; exit 3']);
    assert.deepEqual([r.code, r.stdout, r.stderr], [3, 'out\n', 'err\n']);
  });

  test('a command that exits at once still reports its status, every time (exit frames arriving with the upgrade)', async () => {
    const codes = await Promise.all([0, 1, 2, 3, 4, 5].map(async (n) => (await sbx(['exec', box, 'sh', '-c', `exit ${n}`])).code));
    assert.deepEqual(codes, [0, 1, 2, 3, 4, 5]);
  });

  test('options go before the id; everything after it goes to the command', async () => {
    const r = await sbx(['exec', '-e', 'A=1', '-w', '/tmp', box, 'sh', '-c', 'echo "$A $(pwd)" "$@"', 'sh', '-i', '--x']);
    assert.deepEqual([r.code, r.stdout], [0, '1 /tmp -i --x\n']);
  });

  test('-i pipes stdin with EOF; without -i the command reads EOF', async () => {
    const piped = await sbx(['exec', '-i', box, '--', 'sh', '-c', 'wc -c; echo done'], { input: 'twelve bytes' });
    assert.deepEqual([piped.code, piped.stdout.replace(/ +/g, '')], [0, '12\ndone\n']);
    const closed = await sbx(['exec', box, '--', 'cat'], { input: 'not for the box' });
    assert.deepEqual([closed.code, closed.stdout], [0, '']);
  });

  test('a command not in the box exits 127; a box that does not exist is an sbx error (1) naming the id', async () => {
    const missing = await sbx(['exec', box, '--', 'no-such-command']);
    assert.equal(missing.code, 127, missing.stderr);
    assert.match(missing.stderr, /no-such-command/);
    const gone = await sbx(['exec', 'sb-nope', '--', 'true']);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /box 'sb-nope' not found/);
    assert.match(gone.stderr, /sbx ls/);
  });

  test('SIGINT to sbx kills the command in the box and exits 130', async () => {
    let sent = false;
    const started = Date.now();
    const r = await sbx(['exec', box, '--', 'sh', '-c', 'echo ready; sleep 60; echo never'], {
      onOutput: (out, _write, child) => {
        if (sent || !out.includes('ready')) return;
        sent = true;
        child.kill('SIGINT');
      },
    });
    assert.equal(r.code, 130, r.stderr);
    assert.equal(r.stdout, 'ready\n');
    assert.ok(Date.now() - started < 20_000);
    const left = await sbx(['exec', box, '--', 'sh', '-c', 'for i in 1 2 3 4 5; do ps | grep -q "[s]leep 60" || { echo 0; exit; }; sleep 1; done; echo 1']);
    // The kill in the box follows the closed socket, so it is given a few seconds.
    assert.equal(left.stdout.trim(), '0', 'the sleep was killed in the box');
  });

  test('--timeout kills the command: 137', async () => {
    const r = await sbx(['exec', '--timeout', '1s', box, '--', 'sleep', '30']);
    assert.equal(r.code, 137, r.stderr);
  });

  test('usage errors exit 2: no command, unknown option', async () => {
    for (const args of [
      ['exec', box],
      ['exec', box, '--'],
      ['exec', '--bogus', box, 'true'],
    ]) {
      const r = await sbx(args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.notEqual(r.stderr, '');
    }
  });
});

describe('sbx exec -t on a pseudo-terminal', () => {
  test('the command gets a terminal of this one’s size, and its exit status comes back', async () => {
    const r = await onTty(['exec', '-t', box, '--', 'sh', '-c', 'tty; stty size; exit 4'], { before: 'stty cols 91 rows 21' });
    assert.equal(r.code, 4, r.stdout + r.stderr);
    assert.match(r.stdout, /\/dev\/pts\/\d+\r*\n/);
    assert.match(r.stdout, /21 91\r*\n/);
  });

  test('a window resize reaches the box', async () => {
    // The resize comes once the command has printed its first size: it then starts a process
    // whose name the host can see (built at run time on both sides, so no other command line
    // holds it), and waits for its terminal to change. A fixed delay failed on a loaded machine, where the CLI took longer.
    const inBox =
      'stty size; m=probe; sh -c "sleep 60; :" "sbx-resize-$m" & p=$!; i=0; while [ "$(stty size)" = "24 80" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; kill $p; stty size';
    const r = await onTty(['exec', '-t', box, '--', 'sh', '-c', inBox], {
      before:
        'stty cols 80 rows 24; (i=0; n=resize; while ! pgrep -f "sbx-$n-probe" >/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; stty cols 123 rows 45 < /dev/tty) &',
    });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /^24 80\r*\n45 123\r*\n$/);
  });

  test('-it is raw mode: ^C goes to the command in the box (its trap runs), not to sbx', async () => {
    let sent = false;
    const r = await onTty(['exec', '-it', box, '--', 'sh', '-c', 'trap "echo got-int; exit 7" INT; echo ready; sleep 20 & wait'], {
      onOutput: (out, write) => {
        if (sent || !out.includes('ready')) return;
        sent = true;
        write('\x03');
      },
    });
    assert.ok(sent, r.stdout);
    assert.equal(r.code, 7, r.stdout + r.stderr);
    assert.match(r.stdout, /got-int/);
  });

  test('shell: a login shell reading what is typed, leaving with its status', async () => {
    const r = await onTty(['shell', box], { input: 'echo typed-$((6*7))\nexit 5\n' });
    assert.equal(r.code, 5, r.stdout + r.stderr);
    assert.match(r.stdout, /typed-42/);
  });
});

describe('sbx cp', () => {
  test('a directory round trip keeps every byte, mode and symlink (checksum of the tree)', async () => {
    const src = join(dir, 'tree');
    makeTree(src);
    const up = await sbx(['cp', src, `${box}:/tmp/`]);
    assert.equal(up.code, 0, up.stderr);
    const inBox = await sbx(['exec', box, '--', 'sh', '-c', 'cat /tmp/tree/hello.txt; /tmp/tree/run.sh; readlink /tmp/tree/link']);
    assert.equal(inBox.stdout, 'hello\nran\nhello.txt\n');
    const back = join(dir, 'back');
    const down = await sbx(['cp', `${box}:/tmp/tree`, back]);
    assert.equal(down.code, 0, down.stderr);
    assert.equal(treeDigest(back), treeDigest(src));
    // Into an existing directory: under the source's name, as docker cp does.
    mkdirSync(join(dir, 'into'));
    assert.equal((await sbx(['cp', `${box}:/tmp/tree`, join(dir, 'into')])).code, 0);
    assert.equal(treeDigest(join(dir, 'into', 'tree')), treeDigest(src));
  });

  test('on a terminal a progress line counts the bytes up to 100%; off one there is none', async () => {
    const src = join(dir, 'progress');
    mkdirSync(src);
    writeFileSync(join(src, 'data.bin'), randomBytes(2_000_000));
    const r = await onTty(['cp', src, `${box}:/tmp/`]);
    assert.equal(r.code, 0, r.stdout);
    assert.match(r.stdout, /\r\x1b\[2Kprogress → .*:\/tmp\/progress {2}1\.9 MiB \/ 1\.9 MiB {2}100%\r*\n/);
    const quiet = await sbx(['cp', src, `${box}:/tmp/`]);
    assert.deepEqual([quiet.code, quiet.stdout, quiet.stderr], [0, '', '']);
  });

  test('a single file, renamed on the way; - writes a tar to stdout', async () => {
    const file = join(dir, 'one.txt');
    writeFileSync(file, 'one file\n');
    assert.equal((await sbx(['cp', file, `${box}:/tmp/renamed.txt`])).code, 0);
    assert.equal((await sbx(['exec', box, 'cat', '/tmp/renamed.txt'])).stdout, 'one file\n');
    const out = join(dir, 'copied.txt');
    assert.equal((await sbx(['cp', `${box}:/tmp/renamed.txt`, out])).code, 0);
    assert.equal(readFileSync(out, 'utf8'), 'one file\n');
    const tarred = await sbx(['cp', `${box}:/tmp/renamed.txt`, '-']);
    assert.equal(tarred.code, 0);
    assert.ok(tarred.stdout.startsWith('renamed.txt'), 'a tar whose first entry is the file');
  });

  test('a missing path is an sbx error saying which; two local paths are a usage error', async () => {
    const missing = await sbx(['cp', `${box}:/no/such`, join(dir, 'x')]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /not_found: .*\/no\/such|no such/i);
    const noParent = await sbx(['cp', join(dir, 'one.txt'), `${box}:/no/such/dir/`]);
    assert.equal(noParent.code, 1);
    assert.match(noParent.stderr, /no such directory in box/);
    assert.equal((await sbx(['cp', 'a', 'b'])).code, 2);
  });
});

describe('sbx ws', () => {
  test('create, put a directory, ls-files, cat, get it back (checksum), rm', async () => {
    const created = await sbx(['ws', 'create', 'cli-test', '--json']);
    assert.equal(created.code, 0, created.stderr);
    const ws = (JSON.parse(created.stdout) as { id: string }).id;
    const src = join(dir, 'ws-tree');
    makeTree(src);
    const put = await sbx(['ws', 'put', ws, src, 'project']);
    assert.equal(put.code, 0, put.stderr);
    const files = await sbx(['ws', 'ls-files', '-r', ws, 'project', '--json']);
    const names = (JSON.parse(files.stdout) as Array<{ name: string }>).map((e) => e.name).sort();
    assert.ok(names.includes('sub/random.bin') && names.includes('link'), names.join(' '));
    const table = await sbx(['ws', 'ls-files', ws, 'project']);
    assert.match(table.stdout, /^MODE +SIZE +MODIFIED +NAME\n/);
    assert.match(table.stdout, /-rwxr-xr-x .* run\.sh\n/);
    assert.equal((await sbx(['ws', 'cat', ws, 'project/hello.txt'])).stdout, 'hello\n');
    const back = join(dir, 'ws-back');
    const got = await sbx(['ws', 'get', ws, 'project', back]);
    assert.equal(got.code, 0, got.stderr);
    assert.equal(treeDigest(back), treeDigest(src));
    assert.equal((await sbx(['ws', 'put', ws, '-', 'stdin.txt'], { input: 'from stdin' })).code, 0);
    assert.equal((await sbx(['ws', 'cat', ws, 'stdin.txt'])).stdout, 'from stdin');
    const listed = await sbx(['ws', 'ls', '--json']);
    assert.ok((JSON.parse(listed.stdout) as Array<{ id: string }>).some((w) => w.id === ws));
    assert.equal((await sbx(['ws', 'rm', ws])).code, 0);
    const gone = await sbx(['ws', 'cat', ws, 'stdin.txt']);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, new RegExp(ws));
  });
});

describe('sbx box lifecycle and --json', () => {
  test('create --json, ls --json, info --json parse; stop, start, rm', async () => {
    const created = await sbx(['create', '--json', '-l', 'cli=yes', '--idle-timeout', '10m', IMAGE]);
    assert.equal(created.code, 0, created.stderr);
    const info = JSON.parse(created.stdout) as { id: string; labels: Record<string, string>; idleTimeoutMs: number; status: string };
    assert.deepEqual([info.labels['cli'], info.idleTimeoutMs, info.status], ['yes', 600_000, 'running']);
    const listed = JSON.parse((await sbx(['ls', '--json', '-l', 'cli=yes'])).stdout) as Array<{ id: string }>;
    assert.deepEqual(
      listed.map((b) => b.id),
      [info.id],
    );
    assert.equal((await sbx(['stop', info.id])).code, 0);
    assert.equal((JSON.parse((await sbx(['info', info.id, '--json'])).stdout) as { status: string }).status, 'stopped');
    assert.equal((await sbx(['start', info.id])).code, 0);
    assert.equal((JSON.parse((await sbx(['info', info.id, '--json'])).stdout) as { status: string }).status, 'running');
    const rm = await sbx(['rm', info.id, 'sb-nope']);
    assert.equal(rm.code, 1, 'one of the ids failed');
    assert.equal(rm.stdout, `${info.id}\n`);
    assert.match(rm.stderr, /sb-nope/);
    assert.equal((await sbx(['info', info.id])).code, 1);
  });

  test('human output: an aligned table with relative times, no colour off a terminal or with NO_COLOR, colour on one', async () => {
    const plain = await sbx(['ls']);
    assert.match(plain.stdout, /^ID +IMAGE +STATUS +POOL +OWNER +WORKSPACE +CREATED\n/);
    assert.match(plain.stdout, new RegExp(`${box} +${IMAGE.replace(/[.:]/g, '\\$&')} +running .*(ago|just now)\\n`));
    assert.doesNotMatch(plain.stdout, /\x1b\[/);
    const tty = await onTty(['ls']);
    assert.match(tty.stdout, /\x1b\[32mrunning/);
    const noColor = await onTty(['ls'], { env: { NO_COLOR: '1' } });
    assert.doesNotMatch(noColor.stdout, /\x1b\[/);
    assert.match(noColor.stdout, /running/);
  });

  test('pools ls and keys ls print tables and parse as JSON', async () => {
    const pools = JSON.parse((await sbx(['pools', 'ls', '--json'])).stdout) as Array<{ name: string; connected: boolean }>;
    assert.deepEqual(
      pools.map((p) => [p.name, p.connected]),
      [['local', true]],
    );
    assert.match((await sbx(['pools', 'ls'])).stdout, /^NAME +ADDR +STATUS/);
    const keys = JSON.parse((await sbx(['keys', 'ls', '--json'])).stdout) as Array<{ role: string }>;
    assert.ok(keys.some((k) => k.role === 'admin'));
  });

  test('--help of each command has examples', async () => {
    for (const cmd of [
      ['create'],
      ['ls'],
      ['info'],
      ['exec'],
      ['shell'],
      ['rm'],
      ['cp'],
      ['login'],
      ['ws'],
      ['ws', 'put'],
      ['images', 'pull'],
      ['keys', 'create'],
      ['pools', 'add'],
    ]) {
      const r = await sbx([...cmd, '--help']);
      assert.equal(r.code, 0, cmd.join(' '));
      assert.match(r.stdout, /Examples:\n {2}.*sbx /, `${cmd.join(' ')} --help`);
    }
  });
});

describe('sbx keys, login and errors', () => {
  test('keys create makes a user key that works until it is revoked; a refused key says how to get one', async () => {
    const made = await sbx(['keys', 'create', 'cli-user', '--json']);
    assert.equal(made.code, 0, made.stderr);
    const { id, key } = JSON.parse(made.stdout) as { id: string; key: string };
    const asUser = await sbx(['ls', '--json'], { env: { SBX_API_KEY: key } });
    assert.equal(asUser.code, 0, asUser.stderr);
    assert.deepEqual(JSON.parse(asUser.stdout), [], 'a new user sees none of the admin’s boxes');
    const forbidden = await sbx(['keys', 'ls'], { env: { SBX_API_KEY: key } });
    assert.equal(forbidden.code, 1);
    assert.match(forbidden.stderr, /admin/);
    assert.equal((await sbx(['keys', 'revoke', id])).code, 0);
    const refused = await sbx(['ls'], { env: { SBX_API_KEY: key } });
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^sbx: unauthorized: /);
    assert.match(refused.stderr, /from SBX_API_KEY was refused/);
    assert.match(refused.stderr, /sbx keys create/);
    assert.match(refused.stderr, /sbx login/);
  });

  test('a refusal that force would let through names the flag, -f/--force', async () => {
    const r = await sbx(['pools', 'rm', 'local']);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^sbx: pool_in_use: pool 'local' has \d+ box\(es\); remove them first, or remove them with the pool: use -f\/--force\n/);
  });

  test('no key at all: the same advice', async () => {
    const r = await sbx(['ls'], { env: { SBX_API_KEY: undefined } });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /no API key was given/);
    assert.match(r.stderr, /sbx serve` prints an admin key/);
  });

  test('an unreachable server: the URL tried, where it came from, and `sbx serve`', async () => {
    const url = `http://127.0.0.1:${await deadPort()}`;
    for (const [args, env, from] of [
      [['ls'], { SBX_URL: url }, 'SBX_URL'],
      [['ls', '--url', url], {}, '--url'],
      [['--url', url, 'exec', box, 'true'], {}, '--url'],
    ] as const) {
      const r = await sbx([...args], { env });
      assert.equal(r.code, 1, r.stderr);
      assert.ok(r.stderr.startsWith(`sbx: cannot reach the sbx server at ${url} (from ${from})`), r.stderr);
      assert.match(r.stderr, /`sbx serve`/);
      assert.equal(r.stdout, '');
    }
  });

  test('login checks the key, writes the profile with mode 0600, and later commands use it', async () => {
    const home = join(dir, 'login-home');
    const env = { HOME: home, XDG_CONFIG_HOME: undefined, SBX_URL: undefined, SBX_API_KEY: undefined };
    const bad = await sbx(['login', t.url, '--api-key', 'sbxk_0123456789abcdef_notavalidsecretnotavalidsecretnotavalidsecr'], { env });
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /unauthorized/);
    assert.throws(() => statSync(join(home, '.config', 'sbx', 'config.yaml')), 'nothing is saved for a refused key');
    const ok = await sbx(['login', t.url, '--api-key-stdin'], { env, input: `${t.admin}\n` });
    assert.equal(ok.code, 0, ok.stderr);
    const file = join(home, '.config', 'sbx', 'config.yaml');
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.equal(statSync(join(home, '.config', 'sbx')).mode & 0o777, 0o700);
    const text = readFileSync(file, 'utf8');
    assert.ok(text.includes(t.admin) && text.includes(t.url), text);
    const ls = await sbx(['ls', '-q'], { env });
    assert.equal(ls.code, 0, ls.stderr);
    assert.ok(ls.stdout.includes(box));
    // XDG_CONFIG_HOME wins over HOME; a named profile; an unknown one says how to make it.
    const xdg = join(dir, 'xdg');
    assert.equal((await sbx(['login', t.url, '--api-key', t.admin, '--profile', 'other'], { env: { ...env, XDG_CONFIG_HOME: xdg } })).code, 0);
    assert.equal(statSync(join(xdg, 'sbx', 'config.yaml')).mode & 0o777, 0o600);
    const unknown = await sbx(['ls', '--profile', 'nope'], { env: { ...env, XDG_CONFIG_HOME: xdg } });
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /profile 'nope'.*known: other.*sbx login URL --profile nope/);
    // The environment beats the saved profile.
    const dead = `http://127.0.0.1:${await deadPort()}`;
    const viaEnv = await sbx(['ls'], { env: { ...env, SBX_URL: dead } });
    assert.match(viaEnv.stderr, new RegExp(`cannot reach the sbx server at ${dead.replace(/[.:/]/g, '\\$&')} \\(from SBX_URL\\)`));
  });
});

describe('sbx images pull', () => {
  test('plain lines off a terminal, one JSON event a line with --json', async () => {
    const plain = await sbx(['images', 'pull', testEnv.pullImage]);
    assert.equal(plain.code, 0, plain.stderr);
    assert.match(plain.stdout, /^Pulling from /m);
    assert.match(plain.stdout, /Status: /);
    assert.doesNotMatch(plain.stdout, /\x1b\[/);
    const json = await sbx(['images', 'pull', '--json', testEnv.pullImage]);
    const events = json.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { status: string });
    assert.ok(events.some((e) => e.status.startsWith('Status: ')));
    const tty = await onTty(['images', 'pull', testEnv.pullImage]);
    assert.equal(tty.code, 0, tty.stdout);
    assert.match(tty.stdout, /\x1b\[2KStatus: /);
    const missing = await sbx(['images', 'pull', `${testEnv.registry}/sbx/no-such-image:never`]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /not_found/);
  });
});
