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
import { registryOnlyImage, removeLocalImage } from '../testing/registry-image.js';
import { RESOLVE_RECORDER_HOOKS } from '../testing/module-recorder.js';
import { waitFor } from '../testing/wait.js';

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

async function modulesLoadedBy(args: string[]): Promise<{ result: Result; modules: string[] }> {
  const log = join(dir, `modules-${randomBytes(4).toString('hex')}.txt`);
  writeFileSync(log, '');
  const recorder = join(dir, `record-${randomBytes(4).toString('hex')}.mjs`);
  const register = `import { register, createRequire } from 'node:module';
    register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(RESOLVE_RECORDER_HOOKS)}), { data: { file: ${JSON.stringify(log)} } });
    const require = createRequire(import.meta.url);
    process.on('exit', () => require('node:fs').appendFileSync(${JSON.stringify(log)}, Object.keys(require.cache).join('\\n') + '\\n'));`;
  writeFileSync(recorder, register);
  const result = await run(process.execPath, ['--import', 'tsx', '--import', recorder, MAIN, ...args]);
  const modules = [...new Set(readFileSync(log, 'utf8').split('\n').filter(Boolean))].map((u) => (u.startsWith('file:') ? fileURLToPath(u) : u));
  return { result, modules };
}

/** What neither `--help` nor a command that talks to a server may load: the server, the library's core, the engine clients. */
const HEAVY = [/\/node_modules\/(fastify|dockerode|docker-modem|@kubernetes|pino|@grpc|@fastify)\//, /\/src\/(sandbox|server|runtime|compat|workspace)\//];

function heavyModules(modules: string[]): string[] {
  // Leaves the SDK loads too (src/client/module-graph.test.ts): they import nothing but errors.ts.
  const leaves = ['/src/sandbox/box-path.ts', '/src/workspace/workspace-path.ts', '/src/runtime/ports.ts'];
  return modules.filter((m) => HEAVY.some((re) => re.test(m)) && !leaves.some((leaf) => m.endsWith(leaf)));
}

describe('start-up loads only what the command needs', () => {
  test('--help: commander and the CLI’s own files, no SDK, no server, no core, no engine client', async () => {
    const { result, modules } = await modulesLoadedBy(['--help']);
    assert.equal(result.code, 0, result.stderr);
    assert.ok(
      modules.some((m) => m.endsWith('/src/cli/boxes.ts')),
      'the recorder saw the CLI load',
    );
    assert.deepEqual(heavyModules(modules), []);
    assert.deepEqual(
      modules.filter((m) => /\/src\/client\/|\/node_modules\/(ws|yaml|tar-stream)\//.test(m)),
      [],
    );
  });

  test('exec against a server: the WebSocket exec and nothing of the server, the core or the engine clients', async () => {
    const { result, modules } = await modulesLoadedBy(['exec', box, '--', 'sh', '-c', 'exit 7']);
    assert.equal(result.code, 7, result.stderr);
    assert.ok(
      modules.some((m) => m.endsWith('/src/client/stream.ts')),
      'the recorder saw the exec load',
    );
    assert.deepEqual(heavyModules(modules), []);
  });
});

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
    // An hour-long sleep: a CLI that waited for it would be killed by sbx() long before, not exit 130.
    const r = await sbx(['exec', box, '--', 'sh', '-c', 'echo ready; sleep 3600; echo never'], {
      onOutput: (out, _write, child) => {
        if (sent || !out.includes('ready')) return;
        sent = true;
        child.kill('SIGINT');
      },
    });
    assert.equal(r.code, 130, r.stderr);
    assert.equal(r.stdout, 'ready\n');
    const left = await sbx(['exec', box, '--', 'sh', '-c', 'for i in $(seq 50); do ps | grep -q "[s]leep 3600" || { echo 0; exit; }; sleep 1; done; echo 1']);
    // The kill in the box follows the closed socket: waited for, up to a time only a hang reaches.
    assert.equal(left.stdout.trim(), '0', 'the sleep was killed in the box');
  });

  test('--timeout kills the command: 124 and a line on stderr, as timeout(1) and sbx run', async () => {
    const r = await sbx(['exec', '--timeout', '1s', box, '--', 'sleep', '30']);
    assert.equal(r.code, 124, r.stderr);
    assert.equal(r.stderr, 'sbx: timed out after 1s; the command was killed\n');
    const killed = await sbx(['exec', '--timeout', '1m', box, '--', 'sh', '-c', 'kill -9 $$']);
    assert.deepEqual([killed.code, killed.stderr], [137, ''], 'a command killed otherwise keeps 137');
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
    // holds it), and waits for its terminal to reach the new size. A fixed delay failed on a loaded machine, where the CLI took longer;
    // and `stty cols 123 rows 45` is two changes, so the box may see 24 123 on the way (CI did).
    const inBox =
      'stty size; m=probe; sh -c "sleep 60; :" "sbx-resize-$m" & p=$!; i=0; while [ "$(stty size)" != "45 123" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; kill $p; stty size';
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
    const paused = await sbx(['pause', '--json', info.id]);
    assert.deepEqual(JSON.parse(paused.stdout), [{ id: info.id, ok: true, status: 'paused' }], paused.stderr);
    assert.equal((JSON.parse((await sbx(['info', info.id, '--json'])).stdout) as { status: string }).status, 'paused');
    const resumed = await sbx(['resume', '--json', info.id]);
    assert.deepEqual(JSON.parse(resumed.stdout), [{ id: info.id, ok: true, status: 'running' }], resumed.stderr);
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
      ['images', 'ls'],
      ['images', 'rm'],
      ['url'],
      ['vnc'],
      ['renew'],
      ['whoami'],
      ['logout'],
      ['completion'],
      ['keys', 'create'],
      ['pools', 'add'],
      ['snapshot'],
      ['snapshots'],
      ['snapshots', 'ls'],
      ['snapshots', 'rm'],
    ]) {
      const r = await sbx([...cmd, '--help']);
      assert.equal(r.code, 0, cmd.join(' '));
      assert.match(r.stdout, /Examples:\n {2}.*sbx /, `${cmd.join(' ')} --help`);
    }
  });
});

describe('sbx snapshot', () => {
  test('snapshot --name prints the id, create takes it, snapshots ls (table, -q, --json), rm per id with --json', async () => {
    assert.equal((await sbx(['exec', box, '--', 'sh', '-c', 'echo cli > /tmp/snap.txt'])).code, 0);
    const taken = await sbx(['snapshot', box, '--name', 'cli-snap']);
    assert.equal(taken.code, 0, taken.stderr);
    const id = taken.stdout.trim();
    assert.match(id, /^snap-[0-9a-f]{12}$/);
    const dup = await sbx(['snapshot', box, '--name', 'cli-snap']);
    assert.equal(dup.code, 1);
    assert.match(dup.stderr, /conflict/);
    const made = await sbx(['create', id]);
    assert.equal(made.code, 0, made.stderr);
    const copy = made.stdout.trim();
    assert.equal((await sbx(['exec', copy, '--', 'cat', '/tmp/snap.txt'])).stdout, 'cli\n');
    const table = await sbx(['snapshots', 'ls']);
    assert.match(table.stdout, /^ID +NAME +OWNER +POOL +FROM BOX +SIZE +CREATED\n/);
    assert.match(table.stdout, new RegExp(`${id} +cli-snap `));
    assert.equal((await sbx(['snapshots', 'ls', '-q'])).stdout, `${id}\n`);
    const listed = JSON.parse((await sbx(['snapshots', 'ls', '--json'])).stdout) as Array<{ id: string; sourceBoxId: string }>;
    assert.deepEqual(
      listed.map((s) => [s.id, s.sourceBoxId]),
      [[id, box]],
    );
    const inUse = await sbx(['snapshots', 'rm', '--json', 'cli-snap', 'snap-000000000000']);
    assert.equal(inUse.code, 1);
    const results = JSON.parse(inUse.stdout) as Array<{ id: string; ok: boolean; error?: { code: string } }>;
    assert.deepEqual(
      results.map((r) => [r.id, r.ok, r.error?.code]),
      [
        ['cli-snap', false, 'conflict'],
        ['snap-000000000000', false, 'not_found'],
      ],
    );
    assert.equal((await sbx(['rm', copy])).code, 0);
    const rm = await sbx(['snapshots', 'rm', 'cli-snap']);
    assert.equal(rm.code, 0, rm.stderr);
    assert.equal(rm.stdout, 'cli-snap\n');
    assert.equal((await sbx(['snapshots', 'ls', '--json'])).stdout.trim(), '[]');
  });
});

describe('sbx create, docker’s habits', () => {
  test('the command follows the image without --, options before the image; --name names the box; -p publishes a port', async () => {
    const name = `cli-named-${process.pid}`;
    const made = await sbx([
      'create',
      '--name',
      name,
      '-p',
      '8080',
      '-p',
      '127.0.0.1::9090/udp',
      IMAGE,
      'sh',
      '-c',
      'echo "$0 $1" > /tmp/args; exec sleep 3600',
      '-x',
      '--y',
    ]);
    assert.equal(made.code, 0, made.stderr);
    assert.equal(made.stdout, `${name}\n`);
    try {
      assert.equal((await sbx(['exec', name, 'cat', '/tmp/args'])).stdout, '-x --y\n');
      const info = JSON.parse((await sbx(['info', '--json', name])).stdout) as { ports: Array<{ containerPort: number; protocol: string; hostPort: number }> };
      assert.deepEqual(info.ports.map((p) => [p.containerPort, p.protocol]).sort(), [
        [8080, 'tcp'],
        [9090, 'udp'],
      ]);
      assert.ok(info.ports.every((p) => p.hostPort > 0));
    } finally {
      await sbx(['rm', name]);
    }
  });

  test('a duration without a unit is a usage error naming the forms; a bad -p too', async () => {
    const bare = await sbx(['create', '--idle-timeout', '5', IMAGE]);
    assert.equal(bare.code, 2);
    assert.match(bare.stderr, /--idle-timeout.*'5' has no unit: write 5s, 5m or 5ms \(e\.g\. 500ms, 30s, 5m, 2h/);
    const port = await sbx(['create', '-p', 'http', IMAGE]);
    assert.equal(port.code, 2);
    assert.match(port.stderr, /'http' is not a port to publish/);
  });

  test('--pull missing: an admin key pulls the image the pool lacks; a user key is told to ask an admin; never does not pull', async () => {
    const image = await registryOnlyImage('cli-create-pull');
    try {
      const user = (JSON.parse((await sbx(['keys', 'create', `pull-user-${process.pid}`, '--json'])).stdout) as { key: string }).key;
      const refused = await sbx(['create', image], { env: { SBX_API_KEY: user } });
      assert.equal(refused.code, 1);
      assert.match(refused.stderr, /only an admin key may pull one: ask an admin to run `sbx images pull /);
      const never = await sbx(['create', '--pull', 'never', image]);
      assert.equal(never.code, 1);
      assert.match(never.stderr, /^sbx: not_found: image .*cli-create-pull/);
      const pulled = await sbx(['create', image]);
      assert.equal(pulled.code, 0, pulled.stderr);
      assert.match(pulled.stderr, /pulling it/);
      assert.equal((await sbx(['rm', pulled.stdout.trim()])).code, 0);
    } finally {
      await removeLocalImage(image);
    }
  });

  test('a workspace by name where an id is taken (create --workspace, ws ls-files); two of one name: an error listing their ids', async () => {
    const wsName = `named-${process.pid}`;
    const id = (await sbx(['ws', 'create', wsName])).stdout.trim();
    assert.match(id, /^[a-z0-9]/);
    const made = await sbx(['create', '--workspace', wsName, IMAGE]);
    assert.equal(made.code, 0, made.stderr);
    assert.equal((await sbx(['exec', made.stdout.trim(), 'sh', '-c', 'echo hi > /workspace/f'])).code, 0);
    assert.match((await sbx(['ws', 'ls-files', wsName])).stdout, /\bf\n/);
    await sbx(['rm', made.stdout.trim()]);
    const twin = (await sbx(['ws', 'create', wsName])).stdout.trim();
    const ambiguous = await sbx(['ws', 'ls-files', wsName]);
    assert.equal(ambiguous.code, 1);
    assert.match(ambiguous.stderr, new RegExp(`2 workspaces are named '${wsName}' \\((${id}, ${twin}|${twin}, ${id})\\): give an id`));
    assert.equal((await sbx(['ws', 'rm', '-f', id, twin])).code, 0);
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

/** A user key (made with the admin key) and its owner. */
async function userKey(name: string): Promise<{ key: string; owner: string }> {
  const made = await sbx(['keys', 'create', `${name}-${process.pid}`, '--json']);
  assert.equal(made.code, 0, made.stderr);
  return JSON.parse(made.stdout) as { key: string; owner: string };
}

/** Opens a signed URL as a browser does: the token becomes a cookie on a redirect to the clean URL. */
async function openAsBrowser(url: string): Promise<Response> {
  const first = await fetch(url, { redirect: 'manual' });
  if (first.status !== 303) return first;
  const cookie = first.headers.get('set-cookie')!.split(';')[0]!;
  return fetch(new URL(first.headers.get('location')!, url), { headers: { cookie } });
}

describe('box id prefixes', () => {
  test('a unique prefix of a generated id the caller may see stands for it; an ambiguous one lists the caller’s matches; another owner’s box never matches nor counts; a chosen id never matches by prefix', async () => {
    const p = `pfx${process.pid}`;
    const user = await userKey('prefix-user');
    const asUser = { env: { SBX_API_KEY: user.key } };
    const made = [
      await sbx(['create', IMAGE]),
      await sbx(['create', IMAGE]),
      await sbx(['create', IMAGE], asUser),
      await sbx(['create', '--name', `${p}-named1`, IMAGE]),
    ];
    for (const m of made) assert.equal(m.code, 0, m.stderr);
    const [a, b, c] = made.map((m) => m.stdout.trim()) as [string, string, string];
    try {
      const unique = await sbx(['exec', a.slice(0, -1), 'sh', '-c', 'echo $SBX_SANDBOX_ID']);
      assert.deepEqual([unique.code, unique.stdout], [0, `${a}\n`], unique.stderr);
      assert.equal((JSON.parse((await sbx(['info', '--json', b.slice(0, -1)])).stdout) as { id: string }).id, b);
      // The admin sees all three generated boxes: `sb-` is ambiguous for it, and says which.
      const ambiguous = await sbx(['exec', 'sb-', 'true']);
      assert.equal(ambiguous.code, 1);
      // (Other tests of this file may hold generated boxes of the admin's too: all of them count.)
      assert.match(ambiguous.stderr, /box id prefix 'sb-' is ambiguous: it starts \d+ of your boxes \(/);
      for (const id of [a, b, c]) assert.ok(ambiguous.stderr.includes(id), `${id} is among the matches`);
      // The user: the admin's boxes are not there at all, and do not make `sb-` ambiguous.
      const hidden = await sbx(['exec', a.slice(0, -1), 'true'], asUser);
      assert.equal(hidden.code, 1);
      assert.match(hidden.stderr, new RegExp(`^sbx: not_found: box '${a.slice(0, -1)}' not found`));
      const own = await sbx(['exec', 'sb-', 'sh', '-c', 'echo $SBX_SANDBOX_ID'], asUser);
      assert.deepEqual([own.code, own.stdout], [0, `${c}\n`], own.stderr);
      // A chosen id is a name: it never stands for a longer one (a removed agent-1 is never agent-10).
      const named = await sbx(['exec', `${p}-named`, 'true']);
      assert.equal(named.code, 1);
      assert.match(named.stderr, /not_found/);
      assert.equal((await sbx(['rm', 'sb-'], asUser)).code, 0, 'rm takes a prefix too');
      assert.equal((await sbx(['info', c])).code, 1, "the user's box is gone");
    } finally {
      await sbx(['rm', a, b, c, `${p}-named1`]);
    }
  });
});

describe('sbx url, vnc, renew, whoami, logout, images, completion', () => {
  test('url: the proxy URL of a published port; --share signs one a browser opens without a key', async () => {
    const made = await sbx([
      'create',
      '-p',
      '8080',
      IMAGE,
      'sh',
      '-c',
      'mkdir -p /tmp/www; echo hello-www > /tmp/www/index.html; exec httpd -f -p 8080 -h /tmp/www',
    ]);
    assert.equal(made.code, 0, made.stderr);
    const id = made.stdout.trim();
    try {
      const plain = await sbx(['url', id, '8080']);
      assert.deepEqual([plain.code, plain.stdout], [0, `${t.url}/v1/boxes/${id}/ports/8080/\n`], plain.stderr);
      assert.equal((await fetch(plain.stdout.trim())).status, 401, 'a plain URL needs the key');
      const shared = (await sbx(['url', '--share', '--ttl', '5m', id, '8080'])).stdout.trim();
      assert.match(shared, /\?sbx_token=/);
      // httpd may not listen yet the moment the box runs: wait for it, not for a number of tries.
      const body = await waitFor(
        async () => {
          const res = await openAsBrowser(shared);
          return res.status === 200 ? res.text() : false;
        },
        { what: 'the shared URL serving the page', intervalMs: 100 },
      );
      assert.equal(body, 'hello-www\n');
      const ttlAlone = await sbx(['url', '--ttl', '5m', id, '8080']);
      assert.equal(ttlAlone.code, 2);
      assert.match(ttlAlone.stderr, /--ttl is for --share/);
    } finally {
      await sbx(['rm', id]);
    }
  });

  test('vnc: a box made with --vnc has a viewer URL that serves the viewer page', async () => {
    const made = await sbx(['create', '--vnc', testEnv.desktopImage]);
    assert.equal(made.code, 0, made.stderr);
    const id = made.stdout.trim();
    try {
      const url = await sbx(['vnc', '--ttl', '10m', id]);
      assert.equal(url.code, 0, url.stderr);
      const res = await openAsBrowser(url.stdout.trim());
      assert.equal(res.status, 200);
      assert.match(await res.text(), /<html/i);
      const noVnc = await sbx(['vnc', box]);
      assert.equal(noVnc.code, 1);
    } finally {
      await sbx(['rm', id]);
    }
  });

  test('renew: the max lifetime runs from now', async () => {
    const r = await sbx(['renew', box, '2h']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `${box}\n`);
    const info = JSON.parse((await sbx(['info', '--json', box])).stdout) as { maxLifetimeMs: number; createdAt: string };
    const end = Date.parse(info.createdAt) + info.maxLifetimeMs;
    assert.ok(end > Date.now() + 7_000_000 && end <= Date.now() + 7_200_000, `ends at ${new Date(end).toISOString()}`);
    assert.equal((await sbx(['renew', box, '2'])).code, 2, 'a duration needs a unit');
  });

  test('whoami: the key in use, never its secret; a user key sees its own owner', async () => {
    const admin = JSON.parse((await sbx(['whoami', '--json'])).stdout) as Record<string, unknown>;
    assert.deepEqual([admin['role'], admin['admin'], admin['url']], ['admin', true, t.url]);
    const user = await userKey('whoami-user');
    const me = await sbx(['whoami'], { env: { SBX_API_KEY: user.key } });
    assert.equal(me.code, 0, me.stderr);
    assert.match(me.stdout, new RegExp(`Role: +user\n.*Owner: +${user.owner}`, 's'));
    assert.ok(!me.stdout.includes(user.key), 'the secret is not shown');
  });

  test('logout forgets the saved key; later commands are unauthorized and say how to log in', async () => {
    const env = { XDG_CONFIG_HOME: join(dir, 'logout'), SBX_URL: undefined, SBX_API_KEY: undefined };
    assert.equal((await sbx(['login', t.url, '--api-key', t.admin], { env })).code, 0);
    assert.equal((await sbx(['whoami'], { env })).code, 0);
    const out = await sbx(['logout'], { env });
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stderr, /forgot the key of profile 'default'/);
    assert.ok(!readFileSync(join(dir, 'logout', 'sbx', 'config.yaml'), 'utf8').includes(t.admin));
    const after = await sbx(['whoami'], { env });
    assert.equal(after.code, 1);
    assert.match(after.stderr, /no API key was given/);
  });

  test('images ls and rm: admin only (an engine’s images are every owner’s); rm removes it from the pool', async () => {
    const listed = JSON.parse((await sbx(['images', 'ls', '--json'])).stdout) as Array<{ tags: string[] }>;
    assert.ok(
      listed.some((i) => i.tags.includes(IMAGE)),
      'the base image is listed',
    );
    assert.match((await sbx(['images', 'ls'])).stdout, /^REPOSITORY +TAG +IMAGE ID +CREATED +SIZE\n/);
    const user = await userKey('images-user');
    for (const args of [
      ['images', 'ls'],
      ['images', 'rm', IMAGE],
    ]) {
      const r = await sbx(args, { env: { SBX_API_KEY: user.key } });
      assert.equal(r.code, 1, args.join(' '));
      assert.match(r.stderr, /^sbx: forbidden: .*\n.*admin key/);
    }
    const image = await registryOnlyImage('cli-images-rm');
    try {
      assert.equal((await sbx(['images', 'pull', image])).code, 0);
      assert.ok((await sbx(['images', 'ls'])).stdout.includes(image.replace(/:latest$/, '')));
      const rm = await sbx(['images', 'rm', image]);
      assert.deepEqual([rm.code, rm.stdout], [0, `${image}\n`], rm.stderr);
      assert.ok(!(await sbx(['images', 'ls'])).stdout.includes(image.replace(/:latest$/, '')));
      assert.equal((await sbx(['images', 'rm', image])).code, 1, 'a second rm: not found');
    } finally {
      await removeLocalImage(image);
    }
  });

  test('completion bash: commands, subcommands, flags, and box ids from the server', async () => {
    const script = await sbx(['completion', 'bash']);
    assert.equal(script.code, 0, script.stderr);
    const file = join(dir, 'completion.bash');
    writeFileSync(file, script.stdout);
    const probe = `sbx() { ${[process.execPath, '--import', 'tsx', MAIN].map(shellQuote).join(' ')} "$@"; }
source ${shellQuote(file)}
t() { COMP_WORDS=("$@"); COMP_CWORD=$(( \${#COMP_WORDS[@]} - 1 )); COMPREPLY=(); _sbx_complete; echo "\${COMPREPLY[*]}"; }
t sbx im; t sbx images ""; t sbx exec --t; t sbx exec ""; t sbx --url ${shellQuote(t.url)} ex`;
    const r = await run('bash', ['-c', probe]);
    assert.equal(r.code, 0, r.stderr);
    const [im, images, tty, ids, afterFlag] = r.stdout.split('\n');
    assert.equal(im, 'images');
    assert.equal(images, 'pull ls list rm remove --help');
    assert.equal(tty, '--timeout --tty');
    assert.ok(ids!.split(' ').includes(box), ids);
    assert.equal(afterFlag, 'exec');
    assert.match((await sbx(['completion', 'zsh'])).stdout, /bashcompinit/);
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
