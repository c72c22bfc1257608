import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startError } from './exec.js';

// Recorded from Docker Engine 20.10.24 (runc), as the first stdout frame of a failed exec start.
const OCI = 'OCI runtime exec failed: exec failed: unable to start container process:';
const RECORDED = {
  noDir: `${OCI} chdir to cwd ("/nope") set in config.json failed: no such file or directory: unknown\r\n`,
  fileDir: `${OCI} chdir to cwd ("/etc/passwd") set in config.json failed: not a directory: unknown: Are you trying to mount a directory onto a file (or vice-versa)? Check if the specified host path exists and is the expected type\r\n`,
  noPath: `${OCI} exec: "/no/such": stat /no/such: no such file or directory: unknown\r\n`,
  noCmd: `${OCI} exec: "nosuchcmd": executable file not found in $PATH: unknown\r\n`,
  notExecutable: `${OCI} exec: "/etc/passwd": permission denied: unknown\r\n`,
  noUser: 'unable to find user bob: no matching entries in passwd file\r\n',
};

test('a missing or unusable working directory is invalid_argument on workDir', () => {
  for (const text of [RECORDED.noDir, RECORDED.fileDir]) {
    const e = startError(text, ['true'], { workDir: '/nope' }, 'c1');
    assert.equal(e.code, 'invalid_argument');
    assert.equal(e.details?.['field'], 'workDir');
    assert.match(e.message, /^workDir: '\/nope'/);
    assert.ok(e.message.includes(text.trim()), 'the engine text is in the message');
  }
});

test('a missing executable is not_found naming the command', () => {
  for (const [text, cmd] of [
    [RECORDED.noPath, '/no/such'],
    [RECORDED.noCmd, 'nosuchcmd'],
  ] as const) {
    const e = startError(text, [cmd, 'arg'], {}, 'c1');
    assert.equal(e.code, 'not_found');
    assert.equal(e.details?.['cmd'], cmd);
  }
});

test('an unknown user is invalid_argument on user', () => {
  const e = startError(RECORDED.noUser, ['true'], { user: 'bob' }, 'c1');
  assert.equal(e.code, 'invalid_argument');
  assert.equal(e.details?.['field'], 'user');
});

test('anything else is internal with the runtime message', () => {
  const e = startError(RECORDED.notExecutable, ['/etc/passwd'], {}, 'c1');
  assert.equal(e.code, 'internal');
  assert.ok(e.message.includes('permission denied'));
  assert.equal(startError('', ['x'], {}, 'c1').code, 'internal');
});
