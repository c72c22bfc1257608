import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { buildContainerSpec, newBoxRecord } from './box-spec.js';
import { resolvePool } from './config.js';
import { validateCreateOptions } from './create-options.js';
import type { CreateOptions } from './types.js';

const GiB = 1024 ** 3;
const machine = { cpus: 2, memoryBytes: 8 * GiB };

function spec(opts: Partial<CreateOptions> = {}, poolExtra: Parameters<typeof resolvePool>[0] = { name: 'local' }) {
  const pool = resolvePool(poolExtra);
  const all: CreateOptions = { image: 'sbx-base:latest', ...opts };
  const record = newBoxRecord({ manager: 'm', id: 'sb-1', owner: 'alice', pool, opts: all, now: 1000, tokenNonce: 'n' });
  return buildContainerSpec({ record, opts: all, pool, sbxEnv: { SBX_SANDBOX_ID: 'sb-1' }, mount: undefined, machine });
}

describe('the idle ladder at create (no engine)', () => {
  const record = (opts: Partial<CreateOptions>, pool: Parameters<typeof resolvePool>[0] = { name: 'local' }) =>
    newBoxRecord({
      manager: 'm',
      id: 'sb-1',
      owner: 'alice',
      pool: resolvePool(pool),
      opts: { image: 'sbx-base:latest', ...opts },
      now: 1000,
      tokenNonce: 'n',
    });
  const MIN = 60_000;

  test('steps the caller set must come in order: the one too late is invalid_argument naming it', () => {
    assert.throws(
      () => record({ idlePauseMs: 10 * MIN, idleTimeoutMs: 10 * MIN }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'idlePauseMs',
    );
    assert.throws(
      () => record({ idleArchiveMs: 40 * MIN }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'idleArchiveMs',
      'after the pool default idle timeout (30 m)',
    );
    assert.throws(
      () => record({ idlePauseMs: 5 * MIN, idleArchiveMs: 5 * MIN }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'idlePauseMs',
    );
    const ok = record({ idlePauseMs: 1 * MIN, idleArchiveMs: 5 * MIN, idleTimeoutMs: 10 * MIN });
    assert.deepEqual([ok.idlePauseMs, ok.idleArchiveMs, ok.idleTimeoutMs], [MIN, 5 * MIN, 10 * MIN]);
  });

  test("a pool default step at or after the caller's later one is dropped, not an error", () => {
    const pool = { name: 'local', idlePauseMs: 5 * MIN, idleArchiveMs: 2 * 60 * MIN, idleTimeoutMs: 24 * 60 * MIN };
    const r = record({ idleTimeoutMs: 30 * MIN }, pool);
    assert.deepEqual([r.idlePauseMs, r.idleArchiveMs, r.idleTimeoutMs], [5 * MIN, 0, 30 * MIN]);
    const short = record({ idleTimeoutMs: 2 * MIN }, pool);
    assert.deepEqual([short.idlePauseMs, short.idleArchiveMs, short.idleTimeoutMs], [0, 0, 2 * MIN]);
  });

  test('a persistent box has no idle timeout step: pause and archive may come after its (unused) timeout', () => {
    const r = record({ policy: 'persistent', idlePauseMs: 60 * MIN, idleArchiveMs: 120 * MIN });
    assert.deepEqual([r.idlePauseMs, r.idleArchiveMs], [60 * MIN, 120 * MIN]);
  });
});

describe('container spec building (no engine)', () => {
  test('defaults: the graceful command, /workspace, hardening, pool memory and cpus, no engine restart policy', () => {
    const s = spec();
    assert.equal(s.name, 'sbx-m-sb-1');
    assert.equal(s.workDir, '/workspace');
    assert.equal(s.memory, GiB);
    assert.equal(s.cpus, 1);
    assert.equal(s.pidsLimit, 512);
    assert.equal(s.security?.noNewPrivileges, true);
    assert.deepEqual(s.security?.capDrop, ['ALL']);
    assert.equal(s.network, undefined);
    assert.equal(s.labels?.['sbx.owner'], 'alice');
  });

  test("sbx's variables win over the caller's", () => {
    assert.equal(spec({ env: { A: '1' } }).env?.['SBX_SANDBOX_ID'], 'sb-1');
    assert.equal(spec({ env: { A: '1' } }).env?.['A'], '1');
  });

  test('pool defaults are capped at the pool ceiling, explicit asks above it are refused', () => {
    const s = spec({}, { name: 'small', memory: 4 * GiB, cpus: 4, maxMemory: 2 * GiB });
    assert.equal(s.memory, 2 * GiB);
    assert.equal(s.cpus, 2, 'capped at the machine when no maxCpus');
    assert.throws(
      () => spec({ memory: 3 * GiB }, { name: 'small', maxMemory: 2 * GiB }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'memory',
    );
    assert.throws(
      () => spec({ cpus: 3 }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'cpus',
    );
    assert.equal(spec({ memory: 0 } as never, { name: 'p', memory: 0, cpus: 0 }).memory, undefined, '0 = no limit');
  });

  test("sudo is standard's capabilities without no-new-privileges (setuid programs take effect), network as standard's", () => {
    const standard = spec().security;
    const sudo = spec({ security: 'sudo' });
    assert.equal(sudo.security?.noNewPrivileges, undefined);
    assert.deepEqual(sudo.security?.capDrop, standard?.capDrop);
    assert.deepEqual(sudo.security?.capAdd, standard?.capAdd);
    assert.equal(sudo.network, undefined);
    assert.equal(validateCreateOptions({ image: 'x', security: 'sudo' }).security, 'sudo');
  });

  test('strict means no network; asking for one with it is refused, not silently applied', () => {
    assert.equal(spec({ security: 'strict' }).network, 'none');
    assert.equal(spec({ security: 'strict', network: 'none' }).network, 'none');
    assert.throws(
      () => spec({ security: 'strict', network: 'bridge' }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'network',
    );
    assert.throws(
      () => spec({ network: 'bridge' }, { name: 'p', security: 'strict' }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'network',
    );
    assert.equal(spec({ network: 'bridge' }, { name: 'p', networks: ['bridge'] }).network, 'bridge');
  });

  test("a named network must be 'none' or one the pool lists: the default bridge would undo the isolation", () => {
    for (const network of ['bridge', 'other_default', 'sbx-boxes']) {
      assert.throws(
        () => spec({ network }),
        (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'network' && /lists for the pool/.test(e.message),
        network,
      );
    }
    assert.throws(
      () => spec({ network: 'bridge' }, { name: 'p', networks: ['other'] }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'network',
    );
    assert.equal(spec({ network: 'none' }).network, 'none', "'none' needs no listing");
    assert.equal(spec({ network: 'other' }, { name: 'p', networks: ['bridge', 'other'] }).network, 'other');
  });

  test('vnc: the VNC port on loopback and a 256 MiB /dev/shm, and no capability beyond the profile', () => {
    const plain = spec();
    const s = spec({ vnc: true });
    assert.deepEqual(s.ports, [{ containerPort: 5900, hostIp: '127.0.0.1' }]);
    assert.equal(s.shmSize, 256 * 1024 * 1024);
    assert.deepEqual(s.security, plain.security, 'the same hardening as a box without vnc');
    assert.ok(!s.security?.capAdd?.includes('SYS_ADMIN'));
    assert.equal(plain.ports, undefined);
    assert.equal(plain.shmSize, undefined);
    const own = spec({ vnc: true, ports: [{ containerPort: 3000 }, { containerPort: 5900, hostPort: 15900 }] });
    assert.deepEqual(own.ports, [{ containerPort: 3000 }, { containerPort: 5900, hostPort: 15900 }], "the caller's 5900 is kept, not doubled");
  });

  test('vnc without a network is refused naming vnc (nothing could reach the port)', () => {
    for (const opts of [
      { vnc: true, security: 'strict' as const },
      { vnc: true, network: 'none' },
    ]) {
      assert.throws(
        () => spec(opts),
        (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'vnc',
      );
    }
  });
});
