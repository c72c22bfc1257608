import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { parseRuntimeAddress } from './address.js';

test('local means the platform default engine, or DOCKER_HOST when set', () => {
  assert.deepEqual(parseRuntimeAddress('local', {}), { engine: 'docker', transport: 'unix', socketPath: '/var/run/docker.sock', raw: 'local' });
  const viaEnv = parseRuntimeAddress('local', { DOCKER_HOST: 'tcp://10.0.0.5:2375' });
  assert.equal(viaEnv.transport, 'tcp');
  assert.equal(viaEnv.raw, 'local');
});

test('unix, tcp, https and ssh addresses parse', () => {
  assert.deepEqual(parseRuntimeAddress('unix:///run/x.sock', {}), {
    engine: 'docker',
    transport: 'unix',
    socketPath: '/run/x.sock',
    raw: 'unix:///run/x.sock',
  });
  assert.deepEqual(parseRuntimeAddress('tcp://h:1234', {}), { engine: 'docker', transport: 'tcp', host: 'h', port: 1234, tls: false, raw: 'tcp://h:1234' });
  assert.equal((parseRuntimeAddress('tcp://h:2376', {}) as { tls: boolean }).tls, true);
  assert.equal((parseRuntimeAddress('https://h', {}) as { port: number }).port, 2376);
  const ssh = parseRuntimeAddress('ssh://me@box:2222', {});
  assert.deepEqual(ssh, { engine: 'docker', transport: 'ssh', host: 'box', port: 2222, username: 'me', raw: 'ssh://me@box:2222' });
});

test('an empty address is an error that says to use local', () => {
  assert.throws(
    () => parseRuntimeAddress('', {}),
    (e) => isSbxError(e, 'invalid_argument') && /local/.test(e.message),
  );
  assert.throws(
    () => parseRuntimeAddress('   ', {}),
    (e) => isSbxError(e, 'invalid_argument'),
  );
});

test('an unknown scheme is a clear error', () => {
  assert.throws(
    () => parseRuntimeAddress('ftp://x', {}),
    (e) => isSbxError(e, 'invalid_argument') && /unknown scheme 'ftp'/.test(e.message),
  );
  assert.throws(
    () => parseRuntimeAddress('not a url', {}),
    (e) => isSbxError(e, 'invalid_argument'),
  );
});
