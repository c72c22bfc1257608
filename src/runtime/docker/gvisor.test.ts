import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { checkGvisorSpec, isGvisorRuntime, parseBoxPs } from './gvisor.js';

const MiB = 1024 * 1024;

test('runsc is known by its name, its path or its containerd shim', () => {
  assert.equal(isGvisorRuntime('runsc', undefined), true);
  assert.equal(isGvisorRuntime('sandboxed', { path: '/usr/local/lib/sbx-gvisor/runsc' }), true);
  assert.equal(isGvisorRuntime('gv', { runtimeType: 'io.containerd.runsc.v1' }), true);
  assert.equal(isGvisorRuntime('runc', { path: 'runc' }), false);
  assert.equal(isGvisorRuntime('kata', { runtimeType: 'io.containerd.kata.v2' }), false);
  assert.equal(isGvisorRuntime('other', { path: '/opt/not-runsc-really' }), false);
});

test('a gVisor box with too little memory or too few pids to start its sandbox is refused naming the field', () => {
  checkGvisorSpec({ image: 'x', ociRuntime: 'runsc', memory: 32 * MiB, pidsLimit: 64 });
  checkGvisorSpec({ image: 'x', ociRuntime: 'runsc' });
  assert.throws(
    () => checkGvisorSpec({ image: 'x', ociRuntime: 'runsc', memory: 16 * MiB }),
    (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'memory',
  );
  assert.throws(
    () => checkGvisorSpec({ image: 'x', ociRuntime: 'runsc', pidsLimit: 12 }),
    (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'pidsLimit',
  );
});

test("the box's ps output parses; anything else is an error", () => {
  assert.deepEqual(parseBoxPs('[{"pid":"1","user":"root","command":"sleep 1"}]\n'), [{ pid: '1', user: 'root', command: 'sleep 1' }]);
  assert.throws(() => parseBoxPs('{}'));
  assert.throws(() => parseBoxPs('PID USER COMMAND'));
});
