import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { buildContainerSpec, newBoxRecord } from './box-spec.js';
import { loadConfig, resolveConfig, resolvePool } from './config.js';
import type { PoolConfig } from './config.js';
import type { CreateOptions } from './types.js';
import { WARM_LABEL, joinClaims, matchTemplate, spareSpec, templateKey } from './warm.js';

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
const machine = { cpus: 2, memoryBytes: 8 * GiB };
const IMAGE = 'sbx-base:latest';

function pool(extra: Partial<PoolConfig> = {}) {
  return resolvePool({ name: 'local', warm: [{ image: IMAGE, size: 2 }], ...extra });
}

describe('warm templates (no engine)', () => {
  test('a create of the template’s image and shape matches; claim-time options do not matter', () => {
    const p = pool();
    const claimTime: CreateOptions = {
      image: IMAGE,
      id: 'x',
      owner: 'alice',
      labels: { a: 'b' },
      pool: 'local',
      env: { FOO: 'bar' },
      policy: 'longrunning',
      idleTimeoutMs: 1,
      stopTimeoutMs: 2,
      maxLifetimeMs: 3,
      workDir: '/workspace',
      memory: GiB,
      cpus: 1,
      security: 'standard',
      ports: [],
    };
    assert.equal(matchTemplate({ image: IMAGE }, p, machine), p.warm[0]);
    assert.equal(matchTemplate(claimTime, p, machine), p.warm[0]);
  });

  test('anything fixed at container create sends the create cold', () => {
    const p = pool();
    const cold: Array<[string, Partial<CreateOptions>]> = [
      ['another image', { image: 'sbx-test:latest' }],
      ['a command', { cmd: ['sleep', '1'] }],
      ['a user', { user: '0' }],
      ['another working directory', { workDir: '/tmp' }],
      ['a pids limit', { pidsLimit: 10 }],
      ['ports', { ports: [{ containerPort: 80 }] }],
      ['vnc', { vnc: true }],
      ['a workspace', { workspaceId: 'ws-1' }],
      ['a mount path', { mountPath: '/data' }],
      ['other memory', { memory: 512 * MiB }],
      ['other cpus', { cpus: 0.5 }],
      ['the strict profile', { security: 'strict' }],
      ['a network', { network: 'bridge2' }],
    ];
    for (const [what, opts] of cold) assert.equal(matchTemplate({ image: IMAGE, ...opts }, p, machine), undefined, what);
    assert.equal(matchTemplate({ image: IMAGE }, pool({ warm: [] }), machine), undefined, 'no templates');
    assert.equal(matchTemplate({ image: IMAGE }, pool({ warm: [{ image: IMAGE, size: 0 }] }), machine), undefined, 'size 0');
  });

  test('shapes compare resolved: pool defaults, the machine’s ceiling, the profile’s network', () => {
    const strict = pool({ warm: [{ image: IMAGE, size: 1, security: 'strict', memory: 256 * MiB }] });
    assert.ok(matchTemplate({ image: IMAGE, security: 'strict', memory: 256 * MiB }, strict, machine));
    assert.ok(matchTemplate({ image: IMAGE, security: 'strict', memory: 256 * MiB, network: 'none' }, strict, machine), 'strict means network none');
    const big = pool({ memory: 16 * GiB, warm: [{ image: IMAGE, size: 1 }] });
    assert.ok(matchTemplate({ image: IMAGE, memory: 8 * GiB }, big, machine), 'the pool default capped at the machine equals an explicit 8 GiB');
  });

  test('a sudo template (the shape of e2b sandboxes) is claimed by sudo creates only', () => {
    const sudo = pool({ warm: [{ image: IMAGE, size: 1, security: 'sudo' }] });
    assert.ok(matchTemplate({ image: IMAGE, security: 'sudo' }, sudo, machine));
    assert.equal(matchTemplate({ image: IMAGE }, sudo, machine), undefined, 'a standard create is another shape');
  });

  test('the template key changes with the shape and the pool, not with the size', () => {
    const p = pool();
    const k = templateKey({ image: IMAGE, size: 2 }, p, machine);
    assert.equal(templateKey({ image: IMAGE, size: 9 }, p, machine), k);
    assert.notEqual(templateKey({ image: IMAGE, size: 2, memory: 256 * MiB }, p, machine), k);
    assert.notEqual(templateKey({ image: IMAGE, size: 2 }, pool({ agent: false }), machine), k);
    assert.notEqual(templateKey({ image: IMAGE, size: 2 }, resolvePool({ name: 'other', warm: [] }), machine), k);
  });

  test('a spare’s spec is a cold box’s spec with a spare’s name and labels and no restart policy', () => {
    const p = pool();
    const s = spareSpec({ manager: 'm', pool: p, template: p.warm[0]!, key: 'k1', spareId: 'warm-1', now: 0, machine });
    const opts: CreateOptions = { image: IMAGE };
    const cold = buildContainerSpec({
      record: newBoxRecord({ manager: 'm', id: 'sb-1', owner: 'a', pool: p, opts, now: 0, tokenNonce: 'n' }),
      opts,
      pool: p,
      sbxEnv: {},
      mount: undefined,
      machine,
    });
    assert.equal(s.name, 'sbx-m-warm-1');
    assert.equal(s.labels?.[WARM_LABEL], 'k1');
    assert.equal(s.labels?.['sbx.id'], undefined, 'no identity: recovery never takes a spare for a box');
    for (const key of ['image', 'cmd', 'workDir', 'memory', 'cpus', 'pidsLimit', 'security', 'network'] as const) assert.deepEqual(s[key], cold[key], key);
  });

  test('config: warm templates in YAML take sizes like 256m; bad ones are refused naming the key', () => {
    const dir = mkdtempSync(join(tmpdir(), 'sbx-warm-config-'));
    try {
      const file = join(dir, 'warm.yaml');
      writeFileSync(file, `pools:\n  - name: local\n    warm:\n      - image: ${IMAGE}\n        size: 3\n        memory: 256m\n`);
      const c = resolveConfig(loadConfig({ file, env: {} }), {});
      assert.deepEqual(c.pools[0]!.warm, [{ image: IMAGE, size: 3, memory: 256 * MiB }]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    for (const bad of [
      { image: 'UPPER', size: 1 },
      { image: IMAGE, size: 65 },
      { image: IMAGE, size: 1, cmd: ['x'] },
      { image: IMAGE, size: -1 },
    ]) {
      assert.throws(
        () => resolvePool({ name: 'local', warm: [bad as never] }),
        (e) => isSbxError(e, 'invalid_argument') && String(e.details?.['field']).includes('warm'),
        JSON.stringify(bad),
      );
    }
  });

  test('recovery reads a claimed spare as a box with its claim’s labels, an unclaimed one as a spare', () => {
    const c = (id: string, labels: Record<string, string>) => ({
      id,
      name: id,
      image: IMAGE,
      status: 'running' as const,
      running: true,
      labels,
      createdAt: '',
    });
    const list = [c('cold', { 'sbx.id': 'sb-1' }), c('claimed', { [WARM_LABEL]: 'k' }), c('spare', { [WARM_LABEL]: 'k' })];
    const { boxes, spares } = joinClaims(list, (id) =>
      id === 'claimed' ? { containerId: id, labels: { 'sbx.id': 'sb-2', 'sbx.owner': 'a' }, env: {} } : undefined,
    );
    assert.deepEqual(
      boxes.map((b) => [b.id, b.labels['sbx.id'], b.labels['sbx.owner']]),
      [
        ['cold', 'sb-1', undefined],
        ['claimed', 'sb-2', 'a'],
      ],
    );
    assert.deepEqual(
      spares.map((x) => x.id),
      ['spare'],
    );
  });
});
