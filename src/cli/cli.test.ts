/**
 * The `sbx` binary as a user runs it: a child process with real arguments against the real
 * engine, asserting stdout, stderr and the exit status, and that every run leaves no box behind.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { managerSelector } from '../sandbox/labels.js';
import { testEnv } from '../testing/env.js';
import { registryOnlyImage, removeLocalImage } from '../testing/registry-image.js';
import { waitFor } from '../testing/wait.js';

const IMAGE = testEnv.baseImage;
const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const NAME = `cli-${process.pid}`;
const dir = mkdtempSync(join(tmpdir(), 'sbx-cli-'));
const engine = new DockerRuntime(testEnv.engineAddr);

/** A config file whose only pool is an engine that is not there. */
const unreachable = join(dir, 'unreachable.yaml');
writeFileSync(unreachable, `name: ${NAME}\npools:\n  - name: gone\n    addr: unix://${join(dir, 'no-engine.sock')}\n`);

after(async () => {
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
});

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The CLI's environment: this test's instance name and data dir, none of the caller's SBX_* settings. */
function cliEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SBX_')));
  return { ...env, SBX_NAME: NAME, SBX_DATA_DIR: join(dir, 'data'), ...extra };
}

/** Runs `sbx ARGS…`, then asserts that no box of this test's instance is left (and sweeps any). */
async function sbx(
  args: string[],
  opts: {
    input?: string;
    env?: Record<string, string>;
    onSpawn?: (child: ChildProcess) => void;
    onOutput?: (out: { stdout: string; stderr: string }, child: ChildProcess) => void;
    /** A command line to run instead of `sbx ARGS` (a pseudo-terminal's script(1) around it). */
    command?: string[];
  } = {},
): Promise<Result> {
  const [file, ...argv] = opts.command ?? [process.execPath, '--import', 'tsx', MAIN, ...args];
  const child = spawn(file!, argv, { cwd: ROOT, env: cliEnv(opts.env), stdio: ['pipe', 'pipe', 'pipe'] });
  opts.onSpawn?.(child);
  let stdout = '';
  let stderr = '';
  const seen = () => opts.onOutput?.({ stdout, stderr }, child);
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
    seen();
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
    seen();
  });
  child.stdin.end(opts.input ?? '');
  // A hung CLI fails its test instead of stalling the run.
  const hung = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
  clearTimeout(hung);
  await assertNoBoxesLeft();
  return { code, stdout, stderr };
}

async function boxes() {
  return engine.list({ labels: managerSelector(NAME) });
}

async function assertNoBoxesLeft(): Promise<void> {
  const left = await boxes();
  await Promise.all(left.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
  assert.deepEqual(
    left.map((c) => c.name),
    [],
    'the CLI left boxes behind',
  );
}

describe('sbx run', () => {
  test("prints the command's stdout and stderr apart and exits with its status", async () => {
    const r = await sbx(['run', IMAGE, 'sh', '-c', 'echo out; echo err >&2; exit 3']);
    assert.equal(r.stdout, 'out\n');
    assert.equal(r.stderr, 'err\n');
    assert.equal(r.code, 3);
  });

  test('everything after the image goes to the command, options included; a leading -- is dropped', async () => {
    const r = await sbx(['run', IMAGE, 'sh', '-c', 'printf "%s|" "$@"', 'sh', '-a', '--b', '-t', '5']);
    assert.deepEqual([r.code, r.stdout, r.stderr], [0, '-a|--b|-t|5|', '']);
    const dashed = await sbx(['run', IMAGE, '--', 'echo', '-x']);
    assert.deepEqual([dashed.code, dashed.stdout], [0, '-x\n']);
  });

  test('the box is made from the image and labelled with the instance name while it runs; SIGINT kills the command, removes the box, exits 130', async () => {
    let seen: Awaited<ReturnType<typeof boxes>> | undefined;
    let signalled = false;
    // An hour of sleep: a CLI that did not kill it is SIGKILLed by sbx() after 60 s, not 130.
    const r = await sbx(['run', IMAGE, 'sh', '-c', 'echo ready; sleep 3600'], {
      onOutput: ({ stdout }, child) => {
        if (!stdout.includes('ready') || signalled) return;
        signalled = true;
        void boxes().then((list) => {
          seen = list;
          child.kill('SIGINT');
        });
      },
    });
    assert.equal(seen?.length, 1, 'one box of this instance while the command runs');
    assert.equal(seen[0]!.labels['sbx.managed-by'], 'sbx');
    assert.equal(seen[0]!.labels['sbx.image'], IMAGE);
    assert.equal(r.stdout, 'ready\n');
    assert.equal(r.code, 130);
  });

  test('SIGINT as soon as the box exists, while it is being made: the box is removed, exit 130', async () => {
    // Signal as soon as the container exists (created, not yet running the command).
    let signalled = false;
    const poll = setInterval(() => {
      void boxes().then((list) => {
        if (list.length === 0 || signalled) return;
        signalled = true;
        process.kill(pid, 'SIGINT');
      });
    }, 10);
    let pid = 0;
    const r = await sbx(['run', IMAGE, 'sh', '-c', 'echo ran; sleep 3600'], { onSpawn: (child) => (pid = child.pid!) }).finally(() => clearInterval(poll));
    assert.ok(signalled, 'the box was seen');
    assert.equal(r.code, 130, r.stderr);
  });

  test('a reader gone before the first line (sbx --help | head): exit 141 quietly, no EPIPE stack trace', async () => {
    // The pipe's read end is closed at spawn, long before the CLI writes: its first write fails EPIPE.
    const r = await sbx(['--help'], { onSpawn: (child) => child.stdout?.destroy() });
    assert.equal(r.code, 141, r.stderr);
    assert.doesNotMatch(r.stderr, /EPIPE|Unhandled|at /);
  });

  test('a reader that goes away (| head -1): the command is killed, the box removed, exit 141', async () => {
    const r = await sbx(['run', IMAGE, 'yes'], { onOutput: (_out, child) => child.stdout?.destroy() });
    assert.equal(r.code, 141, r.stderr);
    assert.match(r.stdout, /^y\n/);
    assert.doesNotMatch(r.stderr, /EPIPE|Unhandled/);
  });

  test('a command killed inside the box exits 137, not the timeout status', async () => {
    const r = await sbx(['run', '--timeout', '1m', IMAGE, 'sh', '-c', 'kill -9 $$']);
    assert.equal(r.code, 137);
    assert.doesNotMatch(r.stderr, /timed out/);
  });

  test('a command that is not in the box exits 127 and says so; one that cannot be run exits 126, as docker run does', async () => {
    const missing = await sbx(['run', IMAGE, 'no-such-command']);
    assert.equal(missing.code, 127);
    assert.match(missing.stderr, /^sbx: not_found: cmd: 'no-such-command' was not found/);
    assert.equal(missing.stdout, '');
    const notExecutable = await sbx(['run', IMAGE, '/etc/passwd']);
    assert.equal(notExecutable.code, 126, notExecutable.stderr);
    assert.match(notExecutable.stderr, /\/etc\/passwd/);
  });
});

describe('sbx run --timeout', () => {
  test('takes a duration: 1s kills a long command, says so on stderr, exits 124', async () => {
    const r = await sbx(['run', '--timeout', '1s', IMAGE, 'sh', '-c', 'echo started; sleep 3600']);
    assert.equal(r.code, 124);
    assert.equal(r.stdout, 'started\n');
    assert.equal(r.stderr, 'sbx: timed out after 1s; the command was killed\n');
  });

  test('a plain number is a usage error naming the forms with a unit (never milliseconds silently); 800ms is 800 ms', async () => {
    const bare = await sbx(['-c', unreachable, 'run', '--timeout', '800', IMAGE, 'sleep', '60']);
    assert.equal(bare.code, 2, bare.stderr);
    assert.match(bare.stderr, /--timeout.*'800' has no unit: write 800s, 800m or 800ms \(e\.g\. 500ms, 30s, 5m, 2h/);
    const r = await sbx(['run', '--timeout', '800ms', IMAGE, 'sleep', '60']);
    assert.equal(r.code, 124);
    assert.equal(r.stderr, 'sbx: timed out after 800ms; the command was killed\n');
  });

  test('a command that finishes in time keeps its own status', async () => {
    const r = await sbx(['run', '--timeout', '30s', IMAGE, 'sh', '-c', 'echo fast; exit 5']);
    assert.deepEqual([r.code, r.stdout, r.stderr], [5, 'fast\n', '']);
  });

  test('a bad duration is a usage error naming the option, before any box is made', async () => {
    // The only pool is unreachable: had the CLI tried to make a box, it would fail with 125.
    for (const bad of ['30x', '-5s', 'soon']) {
      const r = await sbx(['-c', unreachable, 'run', '--timeout', bad, IMAGE, 'true']);
      assert.equal(r.code, 2, `--timeout ${bad}: ${r.stderr}`);
      assert.match(r.stderr, /--timeout/);
      assert.ok(r.stderr.includes(`'${bad}'`), r.stderr);
      assert.equal(r.stdout, '');
    }
  });
});

describe('sbx run --env', () => {
  test('KEY=VALUE sets it (the value may hold =); KEY alone passes the caller’s value', async () => {
    const r = await sbx(
      ['run', '-e', 'A=1', '-e', 'B=x=y', '-e', 'FROM_CALLER', '-e', 'EMPTY=', IMAGE, 'sh', '-c', 'echo "$A|$B|$FROM_CALLER|${EMPTY-unset}|"'],
      {
        env: { FROM_CALLER: 'hello world' },
      },
    );
    assert.deepEqual([r.code, r.stdout, r.stderr], [0, '1|x=y|hello world||\n', '']);
  });

  test('KEY alone that the caller has not set is a usage error naming it, before any box is made', async () => {
    const r = await sbx(['-c', unreachable, 'run', '-e', 'SBX_CLI_TEST_UNSET', IMAGE, 'env']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--env/);
    assert.match(r.stderr, /SBX_CLI_TEST_UNSET is not set/);
  });

  test('an empty key is a usage error', async () => {
    const r = await sbx(['-c', unreachable, 'run', '-e', '=x', IMAGE, 'env']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--env.*'=x'/);
  });
});

describe('sbx run, docker’s flags', () => {
  test('-it: the command gets a terminal (script(1) gives sbx one) and its status comes back', async () => {
    const line = [process.execPath, '--import', 'tsx', MAIN, 'run', '-it', IMAGE, 'sh', '-c', 'tty; exit 3']
      .map((a) => `'${a.replace(/'/g, `'\\''`)}'`)
      .join(' ');
    const r = await sbx([], { command: ['script', '-qefc', line, '/dev/null'] });
    assert.equal(r.code, 3, r.stderr);
    // script(1) may echo what its own stdin held first (^@ when that is not a terminal either).
    assert.match(r.stdout, /\/dev\/pts\/\d+\r*\n/);
  });

  test('-w, -u and --name, as docker run takes them; --rm is accepted (run always removes its box)', async () => {
    const r = await sbx(['run', '--rm', '-w', '/tmp', '-u', '1000', '--name', `${NAME}-named`, IMAGE, 'sh', '-c', 'pwd; id -u; echo $SBX_SANDBOX_ID']);
    assert.deepEqual([r.code, r.stdout, r.stderr], [0, `/tmp\n1000\n${NAME}-named\n`, '']);
  });

  test('--pull: missing (the default) pulls an image the engine lacks, never refuses, always pulls first', async () => {
    const image = await registryOnlyImage('cli-run-pull');
    try {
      const never = await sbx(['run', '--pull', 'never', image, 'true']);
      assert.equal(never.code, 125, never.stderr);
      assert.match(never.stderr, /^sbx: not_found: image .*cli-run-pull.* not found/);
      const missing = await sbx(['run', image, 'echo', 'ran']);
      assert.deepEqual([missing.code, missing.stdout], [0, 'ran\n'], missing.stderr);
      assert.match(missing.stderr, /is not on the pool; pulling it/);
      const always = await sbx(['run', '--pull', 'always', image, 'echo', 'again']);
      assert.deepEqual([always.code, always.stdout], [0, 'again\n'], always.stderr);
      assert.doesNotMatch(always.stderr, /is not on the pool/);
    } finally {
      await removeLocalImage(image);
    }
  });
});

describe('sbx run stdin', () => {
  test('-i passes stdin to the command', async () => {
    const r = await sbx(['run', '-i', IMAGE, 'sh', '-c', 'wc -c; echo done'], { input: 'twelve bytes' });
    assert.deepEqual([r.code, r.stdout.replace(/ +/g, ''), r.stderr], [0, '12\ndone\n', '']);
  });

  test('without -i the command reads EOF, not the caller’s stdin', async () => {
    const r = await sbx(['run', IMAGE, 'cat'], { input: 'not for the box' });
    assert.deepEqual([r.code, r.stdout], [0, '']);
  });
});

describe('sbx errors', () => {
  test('an unknown pool is an sbx error (125) that names the known pools', async () => {
    const r = await sbx(['run', '--pool', 'nope', IMAGE, 'true']);
    assert.equal(r.code, 125);
    assert.equal(r.stderr, "sbx: pool_not_found: pool 'nope' not found; known pools: local\n");
    assert.equal(r.stdout, '');
  });

  test('a missing image is an sbx error (125): with --pull never at once, else once the pull has failed', async () => {
    const r = await sbx(['run', '--pull', 'never', 'sbx-no-such-image:never', 'true']);
    assert.equal(r.code, 125);
    assert.match(r.stderr, /^sbx: not_found: .*sbx-no-such-image:never/);
    const pulled = await sbx(['run', `${testEnv.registry}/sbx/no-such-image:never`, 'true']);
    assert.equal(pulled.code, 125);
    assert.match(pulled.stderr, /pulling it/);
    assert.match(pulled.stderr, /^sbx: \w+: .*no-such-image:never/m);
  });

  test('an unreachable engine is an sbx error (125); -c works before and after the command', async () => {
    for (const args of [
      ['-c', unreachable, 'run', IMAGE, 'true'],
      ['run', '-c', unreachable, IMAGE, 'true'],
    ]) {
      const r = await sbx(args);
      assert.equal(r.code, 125, r.stderr);
      assert.match(r.stderr, /^sbx: runtime_unavailable: /);
    }
  });

  test('SBX_CONFIG names the config file', async () => {
    const r = await sbx(['pools'], { env: { SBX_CONFIG: unreachable } });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^gone\tunix:\/\/.*no-engine\.sock\tunreachable\tboxes=0\n$/);
  });

  test('a bad config file is an sbx error (125) naming the key and line', async () => {
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, 'name: x\npools:\n  - name: local\n    idleTimeout: soon\n');
    const r = await sbx(['-c', bad, 'run', IMAGE, 'true']);
    assert.equal(r.code, 125);
    assert.match(r.stderr, /^sbx: invalid_argument: config: pools\.0\.idleTimeout: .*bad\.yaml:4/);
  });

  test('usage errors exit 2: unknown option, missing arguments, unknown command, no command', async () => {
    for (const args of [['run', '--bogus', IMAGE, 'true'], ['run', IMAGE], ['run', IMAGE, '--'], ['frobnicate'], []]) {
      const r = await sbx(args);
      assert.equal(r.code, 2, `sbx ${args.join(' ')}: ${r.stderr}`);
      assert.notEqual(r.stderr, '', `sbx ${args.join(' ')} says why`);
      assert.equal(r.stdout, '');
    }
  });
});

describe('sbx help and pools', () => {
  test('--help exits 0 on stdout and documents the exit statuses', async () => {
    const r = await sbx(['run', '--help']);
    assert.equal(r.code, 0);
    assert.equal(r.stderr, '');
    for (const text of ['--timeout <duration>', '--env <KEY[=VALUE]>', '--interactive', '124', '125', '130']) assert.ok(r.stdout.includes(text), text);
    const top = await sbx(['--help']);
    assert.equal(top.code, 0);
    assert.match(top.stdout, /run \[options\] <image> <cmd\.\.\.>/);
    assert.match(top.stdout, /pools/);
  });

  test('--version and -v print the package’s version', async () => {
    const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    for (const flag of ['--version', '-v']) assert.deepEqual(Object.values(await sbx([flag])), [0, `${version}\n`, ''], flag);
  });

  test('pools lists the embedded default pool as connected', async () => {
    const r = await sbx(['pools']);
    assert.deepEqual([r.code, r.stdout, r.stderr], [0, 'local\tlocal\tconnected\tboxes=0\n', '']);
  });

  test('serve logs: one JSON object a line off a terminal; readable lines with --log-format pretty; --log-level warn hides info', async () => {
    const serveUntilUp = (tag: string, args: string[], env: Record<string, string> = {}) => {
      let sent = false;
      return sbx(['serve', '--port', '0', ...args], {
        env: { SBX_NAME: `${NAME}-logs-${tag}`, SBX_DATA_DIR: join(dir, `logs-${tag}`), ...env },
        onOutput: (out, child) => {
          if (sent || !out.stderr.includes('sbx: serving')) return;
          sent = true;
          child.kill('SIGINT');
        },
      });
    };
    // Three servers at once (one shutting down takes seconds), each its own instance and data.
    const [json, pretty, quiet] = await Promise.all([
      serveUntilUp('json', []),
      serveUntilUp('pretty', ['--log-format', 'pretty']),
      serveUntilUp('quiet', [], { SBX_LOG_LEVEL: 'warn' }),
    ]);
    assert.equal(json.code, 0, json.stderr);
    const lines = json.stdout.split('\n').filter((l) => l.startsWith('{'));
    assert.ok(
      lines.some((l) => (JSON.parse(l) as { msg: string }).msg === 'sbx serving'),
      json.stdout,
    );
    assert.equal(pretty.code, 0, pretty.stderr);
    assert.match(pretty.stdout, /^\d\d:\d\d:\d\d\.\d{3} INFO {2}sbx serving url=http:\/\/127\.0\.0\.1:\d+ /m);
    assert.doesNotMatch(pretty.stdout, /"level":/);
    assert.equal(quiet.code, 0, quiet.stderr);
    assert.doesNotMatch(quiet.stdout, /sbx serving/);
    const bad = await sbx(['serve', '--port', '0'], { env: { SBX_NAME: `${NAME}-logs-bad`, SBX_DATA_DIR: join(dir, 'logs-bad'), SBX_LOG_FORMAT: 'fancy' } });
    assert.equal(bad.code, 125);
    assert.match(bad.stderr, /SBX_LOG_FORMAT: 'fancy' is not one of auto, pretty, json/);
  });

  test('pools alone only reads: a server’s box of the same instance name, stopped by its own command, is not started again', async () => {
    // Another instance name than NAME: sbx() sweeps NAME's boxes after every run.
    const env = { SBX_NAME: `${NAME}-pools`, SBX_DATA_DIR: join(dir, 'pools-data') };
    const docker = new Docker();
    let checked: Promise<void> | undefined;
    const served = await sbx(['serve', '--port', '0'], {
      env,
      onOutput: (out, child) => {
        const url = /sbx: serving (http:\/\/127\.0\.0\.1:\d+)/.exec(out.stderr)?.[1];
        const key = /sbxk_[A-Za-z0-9_-]+/.exec(out.stdout + out.stderr)?.[0];
        if (!url || !key || checked) return;
        const call = async (method: string, path: string, body?: unknown) => {
          const res = await fetch(url + path, {
            method,
            headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
            ...(body ? { body: JSON.stringify(body) } : {}),
          });
          return (res.status === 204 ? {} : await res.json()) as { id: string; status: string; containerId: string };
        };
        checked = (async () => {
          const made = await call('POST', '/v1/boxes', { image: IMAGE, cmd: ['sh', '-c', 'exit 4'] });
          try {
            // The server sees its command end (the event it gets from the engine), not a time.
            if (made.status !== 'stopped')
              await waitFor(async () => (await call('GET', `/v1/boxes/${made.id}`)).status === 'stopped', { what: 'the box stopped', intervalMs: 50 });
            const before = (await docker.getContainer(made.containerId).inspect()).State;
            const pools = await sbx(['pools'], { env });
            assert.deepEqual([pools.code, pools.stdout], [0, 'local\tlocal\tconnected\tboxes=1\n'], pools.stderr);
            const after = (await docker.getContainer(made.containerId).inspect()).State;
            assert.deepEqual([after.StartedAt, after.Status], [before.StartedAt, 'exited'], 'sbx pools started the server’s box again');
          } finally {
            await call('DELETE', `/v1/boxes/${made.id}`);
          }
        })().finally(() => child.kill('SIGINT'));
      },
    });
    assert.ok(checked, `serve never said where it serves: ${served.stderr}`);
    await checked;
    assert.equal(served.code, 0, served.stderr);
  });

  test('serve serves the HTTP API with the key it prints, and stops on SIGINT with status 0', async () => {
    let checked: Promise<void> | undefined;
    const r = await sbx(['serve', '--port', '0'], {
      env: { SBX_DATA_DIR: join(dir, 'serve-data') },
      onOutput: (out, child) => {
        const url = /sbx: serving (http:\/\/127\.0\.0\.1:\d+)/.exec(out.stderr)?.[1];
        const key = /sbxk_[A-Za-z0-9_-]+/.exec(out.stdout + out.stderr)?.[0];
        if (!url || !key || checked) return;
        checked = (async () => {
          assert.deepEqual(await (await fetch(`${url}/healthz`)).json(), { ok: true });
          assert.equal((await fetch(`${url}/v1/boxes`)).status, 401);
          const boxes = await fetch(`${url}/v1/boxes`, { headers: { authorization: `Bearer ${key}` } });
          assert.equal(boxes.status, 200);
          assert.deepEqual(await boxes.json(), { boxes: [] });
        })().finally(() => child.kill('SIGINT'));
      },
    });
    assert.ok(checked, `serve never said where it serves: ${r.stderr}`);
    await checked;
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /sbx: SIGINT, shutting down/);
  });
});
