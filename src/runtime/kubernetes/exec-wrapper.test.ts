// The exec wrapper, run by this machine's real /bin/sh (dash) exactly as Kubernetes would run
// its argv in a box: argv reaches the program unchanged, env and workDir apply, a process that
// cannot start is reported under the marker. (busybox ash in the box images is covered by the
// real-cluster tests.)
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { EXEC_MARKER_ENV } from '../exec-killer.js';
import { wrapperArgv, wrapperFailure } from './exec.js';

const run = async (cmd: string[], opts: { env?: Record<string, string>; workDir?: string } = {}) => {
  const marker = randomUUID();
  const [file, ...args] = wrapperArgv(cmd, opts, marker);
  try {
    const r = await promisify(execFile)(file!, args, { env: { PATH: '/usr/bin:/bin' } });
    return { code: 0, stdout: r.stdout, stderr: r.stderr, marker };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, stdout: err.stdout, stderr: err.stderr, marker };
  }
};

test('argv with spaces, quotes, $(…), backticks and an empty string reaches the program unchanged', async () => {
  const argv = ['two words', `it's "quoted"`, '$(id -u)', '`id`', '; echo pwned', '', '--', 'a\nb', '*'];
  const r = await run(['printf', '[%s]\\n', ...argv]);
  assert.equal(r.code, 0);
  assert.equal(r.stdout, argv.map((a) => `[${a}]\n`).join(''));
});

test('env values are exported as they are, and the marker comes last', async () => {
  const r = await run(['sh', '-c', `printf '%s|%s|%s' "$A" "$B" "$${EXEC_MARKER_ENV}"`], {
    env: { A: 'x y $(id) `z`', B: "'", [EXEC_MARKER_ENV]: 'caller' },
  });
  assert.equal(r.code, 0);
  assert.equal(r.stdout, `x y $(id) \`z\`|'|${r.marker}`);
});

test('workDir applies; one that cannot be entered is reported', async () => {
  assert.equal((await run(['pwd'], { workDir: '/tmp' })).stdout, '/tmp\n');
  const bad = await run(['true'], { workDir: '/no/such dir' });
  assert.equal(bad.code, 126);
  assert.equal(wrapperFailure(bad.stderr, bad.marker), 'workdir');
});

test('a missing or non-executable command is reported; a command that exits 127 itself is not', async () => {
  const missing = await run(['/no/such/binary']);
  assert.equal(missing.code, 127);
  assert.equal(wrapperFailure(missing.stderr, missing.marker), 'notfound');
  assert.equal(wrapperFailure((await run(['no-such-command-anywhere'])).stderr, missing.marker), undefined, 'another exec’s marker does not match');
  const notFound = await run(['no-such-command-anywhere']);
  assert.equal(wrapperFailure(notFound.stderr, notFound.marker), 'notfound');
  const noexec = await run(['/etc/passwd']);
  assert.equal(noexec.code, 126);
  assert.equal(wrapperFailure(noexec.stderr, noexec.marker), 'noexec');
  const own = await run(['sh', '-c', 'echo oops >&2; exit 127']);
  assert.equal(own.code, 127);
  assert.equal(wrapperFailure(own.stderr, own.marker), undefined);
});
