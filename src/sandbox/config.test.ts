import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { parseDuration } from '../util/duration.js';
import { loadConfig, resolveConfig } from './config.js';
import { BoxTokenService } from './tokens.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-config-'));
after(() => rmSync(dir, { recursive: true, force: true }));
function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

describe('config', () => {
  test('durations: numbers are milliseconds; strings need a unit (a bare 0 aside), never milliseconds silently', () => {
    assert.equal(parseDuration(1500), 1500);
    assert.throws(() => parseDuration('1500'), /'1500' has no unit: write 1500s, 1500m or 1500ms/);
    assert.throws(
      () => parseDuration('5'),
      (e) => isSbxError(e, 'invalid_argument') && /30s, 5m, 2h/.test((e as Error).message),
    );
    assert.equal(parseDuration('0'), 0);
    assert.equal(parseDuration('30m'), 1_800_000);
    assert.equal(parseDuration('1h30m'), 5_400_000);
    assert.equal(parseDuration('250ms'), 250);
    assert.throws(() => parseDuration('soon'));
    assert.throws(() => parseDuration('5 minutes'));
  });

  test("a pool's idle ladder: a YAML file's idlePause and idleArchive; out of order refused naming the key", () => {
    const ok = loadConfig({ file: file('ladder.yaml', 'pools:\n  - name: local\n    idlePause: 5m\n    idleArchive: 2h\n    idleTimeout: 1d\n') });
    const pool = resolveConfig(ok).pools[0];
    assert.deepEqual([pool?.idlePauseMs, pool?.idleArchiveMs], [300_000, 7_200_000]);
    assert.throws(
      () => resolveConfig({ pools: [{ name: 'local', idleArchiveMs: 3_600_000, idleTimeoutMs: 1_800_000 }] }),
      (e) => isSbxError(e, 'invalid_argument') && /idleArchiveMs/.test((e as Error).message),
    );
  });

  test('no config at all is one pool local on the local engine', () => {
    const c = resolveConfig({}, {});
    assert.equal(c.pools.length, 1);
    assert.equal(c.pools[0]?.name, 'local');
    assert.equal(c.pools[0]?.addr, 'local');
    assert.equal(c.cleanupIntervalMs, 60_000);
  });

  test('a YAML file is loaded and its durations resolved', () => {
    const p = file(
      'ok.yaml',
      'name: prod\ncleanupInterval: 30s\npools:\n  - name: local\n    addr: local\n    maxTotal: 20\n    idleTimeout: 30m\n  - name: gpu\n    addr: tcp://10.0.0.9:2375\n    maxPerUser: 1\n    maxLifetime: 2h\n',
    );
    const c = resolveConfig(loadConfig({ file: p, env: {} }), {});
    assert.equal(c.name, 'prod');
    assert.equal(c.cleanupIntervalMs, 30_000);
    assert.deepEqual(
      c.pools.map((x) => [x.name, x.maxTotal, x.maxPerUser, x.idleTimeoutMs, x.maxLifetimeMs]),
      [
        ['local', 20, 100, 1_800_000, 0], // maxPerUser: the default bound
        ['gpu', 0, 1, 1_800_000, 7_200_000],
      ],
    );
  });

  test('a bad key is named with its line', () => {
    const p = file('bad.yaml', 'pools:\n  - name: local\n    maxTotal: -3\n');
    assert.throws(
      () => loadConfig({ file: p, env: {} }),
      (e) => isSbxError(e, 'invalid_argument') && /pools\.0\.maxTotal/.test(e.message) && /bad\.yaml:3/.test(e.message),
    );
    const q = file('typo.yaml', 'pools:\n  - name: local\n    idleTimout: 5m\n');
    assert.throws(
      () => loadConfig({ file: q, env: {} }),
      (e) => isSbxError(e, 'invalid_argument') && /idleTimout/.test(e.message),
    );
    const r = file('dur.yaml', 'cleanupInterval: often\n');
    assert.throws(
      () => loadConfig({ file: r, env: {} }),
      (e) => isSbxError(e, 'invalid_argument') && /cleanupInterval/.test(e.message) && /dur\.yaml:1/.test(e.message),
    );
  });

  test('a duration without a unit is refused in a file and in a variable, as in flags; 0 needs none', () => {
    const p = file('bare.yaml', 'cleanupInterval: 0\npools:\n  - name: local\n    idleTimeout: 300\n');
    assert.throws(
      () => loadConfig({ file: p, env: {} }),
      (e) => isSbxError(e, 'invalid_argument') && /pools\.0\.idleTimeout: '300' has no unit/.test(e.message) && /bare\.yaml:4/.test(e.message),
    );
    assert.throws(
      () => loadConfig({ env: { SBX_POOL_LOCAL_IDLE_TIMEOUT: '5' } }),
      (e) => isSbxError(e, 'invalid_argument') && /'5' has no unit/.test(e.message),
    );
    assert.equal(loadConfig({ file: file('zero.yaml', 'cleanupInterval: 0\n'), env: {} }).cleanupIntervalMs, 0);
  });

  test('SBX_* variables override the file', () => {
    const p = file('env.yaml', 'pools:\n  - name: local\n    maxTotal: 20\n');
    const env = { SBX_CLEANUP_INTERVAL: '5s', SBX_POOL_LOCAL_MAX_TOTAL: '3', SBX_POOL_LOCAL_IDLE_TIMEOUT: '1m' };
    const c = resolveConfig(loadConfig({ file: p, env }), env);
    assert.equal(c.cleanupIntervalMs, 5000);
    assert.equal(c.pools[0]?.maxTotal, 3);
    assert.equal(c.pools[0]?.idleTimeoutMs, 60_000);
    assert.throws(
      () => loadConfig({ file: p, env: { SBX_POOL_NOPE_MAX_TOTAL: '1' } }),
      (e) => isSbxError(e, 'invalid_argument') && /no pool named 'nope'/.test(e.message),
    );
  });

  test('SBX_POOL_<NAME>_AGENT turns the in-box agent off or on; anything but a boolean is refused', () => {
    const p = file('agent.yaml', 'pools:\n  - name: local\n  - name: other\n    agent: false\n');
    const c = resolveConfig(loadConfig({ file: p, env: { SBX_POOL_LOCAL_AGENT: 'false', SBX_POOL_OTHER_AGENT: '1' } }), {});
    assert.deepEqual(
      c.pools.map((x) => [x.name, x.agent]),
      [
        ['local', false],
        ['other', true],
      ],
    );
    assert.equal(resolveConfig(loadConfig({ file: p, env: {} }), {}).pools[0]?.agent, true, 'on by default');
    assert.throws(
      () => loadConfig({ file: p, env: { SBX_POOL_LOCAL_AGENT: 'maybe' } }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'SBX_POOL_LOCAL_AGENT',
    );
  });

  test('a Kubernetes pool: agentImage, readyTimeout and storageClass from the file and SBX_POOL_* variables', () => {
    const p = file('kube.yaml', "pools:\n  - name: kube\n    addr: 'k8s://?namespace=sbx'\n    agentImage: sbx-agent:latest\n    readyTimeout: 90s\n");
    const c = resolveConfig(loadConfig({ file: p, env: { SBX_POOL_KUBE_STORAGE_CLASS: 'fast-ssd' } }), {});
    const kube = c.pools[0]!;
    assert.deepEqual([kube.agentImage, kube.readyTimeoutMs, kube.storageClass], ['sbx-agent:latest', 90_000, 'fast-ssd']);
    const env = resolveConfig(loadConfig({ file: p, env: { SBX_POOL_KUBE_AGENT_IMAGE: 'reg.example/sbx-agent:1', SBX_POOL_KUBE_READY_TIMEOUT: '2m' } }), {});
    assert.deepEqual([env.pools[0]!.agentImage, env.pools[0]!.readyTimeoutMs], ['reg.example/sbx-agent:1', 120_000]);
    assert.throws(
      () => resolveConfig({ pools: [{ name: 'kube', addr: 'k8s://', storageClass: 'Not A Class' }] }, {}),
      (e) => isSbxError(e, 'invalid_argument') && /storageClass/.test(e.message),
    );
    assert.throws(
      () => resolveConfig({ pools: [{ name: 'kube', addr: 'k8s://', readyTimeoutMs: 0 }] }, {}),
      (e) => isSbxError(e, 'invalid_argument') && /readyTimeoutMs/.test(e.message),
    );
  });

  test('a Kubernetes pool: agentDelivery from the file and SBX_POOL_<NAME>_AGENT_DELIVERY, into the pool runtime and its info; another value is refused', () => {
    const p = file('kube-delivery.yaml', "pools:\n  - name: kube\n    addr: 'k8s://?namespace=sbx'\n    agentDelivery: init-container\n");
    assert.equal(resolveConfig(loadConfig({ file: p, env: {} }), {}).pools[0]!.agentDelivery, 'init-container');
    const env = resolveConfig(loadConfig({ file: p, env: { SBX_POOL_KUBE_AGENT_DELIVERY: 'image-volume' } }), {});
    assert.equal(env.pools[0]!.agentDelivery, 'image-volume');
    assert.equal(resolveConfig({}, {}).pools[0]!.agentDelivery, undefined);
    assert.throws(
      () => resolveConfig({ pools: [{ name: 'kube', addr: 'k8s://', agentDelivery: 'hostpath' as 'auto' }] }, {}),
      (e) => isSbxError(e, 'invalid_argument') && /agentDelivery/.test(e.message),
    );
  });

  test('SBX_POOL_<NAME>_IDLE_PAUSE and _IDLE_ARCHIVE set the embedded pool, together (both were once lost: one ignored, one dropping the other)', () => {
    const c = resolveConfig(loadConfig({ env: { SBX_POOL_LOCAL_IDLE_PAUSE: '5m', SBX_POOL_LOCAL_IDLE_ARCHIVE: '10m' } }), {});
    assert.deepEqual([c.pools[0]!.idlePauseMs, c.pools[0]!.idleArchiveMs], [300_000, 600_000]);
  });

  test('networks a pool lets boxes name: default none, from the file and SBX_POOL_<NAME>_NETWORKS; a warm template is held to them', () => {
    assert.deepEqual(resolveConfig({}, {}).pools[0]!.networks, []);
    const p = file(
      'nets.yaml',
      'pools:\n  - name: local\n    networks: [bridge]\n    warm:\n      - image: sbx-base:latest\n        size: 1\n        network: bridge\n',
    );
    assert.deepEqual(resolveConfig(loadConfig({ file: p, env: {} }), {}).pools[0]!.networks, ['bridge']);
    const env = resolveConfig(loadConfig({ env: { SBX_POOL_LOCAL_NETWORKS: 'bridge, app_net' } }), {});
    assert.deepEqual(env.pools[0]!.networks, ['bridge', 'app_net']);
    const unlisted = file('unlisted.yaml', 'pools:\n  - name: local\n    warm:\n      - image: sbx-base:latest\n        size: 1\n        network: bridge\n');
    assert.throws(
      () => loadConfig({ file: unlisted, env: {} }),
      (e) => isSbxError(e, 'invalid_argument') && /pools\.0\.warm\.0\.network/.test(e.message) && /unlisted\.yaml:6/.test(e.message),
    );
    assert.doesNotThrow(() => resolveConfig({ pools: [{ name: 'a', warm: [{ image: 'sbx-base:latest', size: 1, network: 'none' }] }] }, {}));
    assert.throws(
      () => resolveConfig({ pools: [{ name: 'a', networks: ['host'] }] }, {}),
      (e) => isSbxError(e, 'invalid_argument') && /networks\.0/.test(e.message),
    );
  });

  test("a pool's default egress policy: 'all' unless set, from the file in canonical form; a bad entry named with its pool", () => {
    assert.deepEqual(resolveConfig({}).pools[0]?.networkPolicy, { egress: 'all' });
    const yaml = 'pools:\n  - name: local\n    networkPolicy:\n      egress:\n        allow: [PyPI.org, "10.0.0.0/8:443/tcp"]\n        deny: ["10.0.0.1"]\n';
    assert.deepEqual(resolveConfig(loadConfig({ file: file('egress.yaml', yaml) })).pools[0]?.networkPolicy, {
      egress: { allow: ['pypi.org', '10.0.0.0/8:443/tcp'], deny: ['10.0.0.1'] },
    });
    assert.throws(
      () => resolveConfig({ pools: [{ name: 'a' }, { name: 'b', networkPolicy: { egress: { deny: ['bad_name'] } } }] }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'pools.1.networkPolicy.egress.deny[0]' && /bad_name/.test(e.message),
    );
    assert.throws(
      () => loadConfig({ file: file('egress-bad.yaml', 'pools:\n  - name: local\n    networkPolicy: { egress: some }\n') }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'pools.0.networkPolicy.egress' && /egress-bad\.yaml/.test(e.message),
    );
  });

  test('duplicate pool names are refused', () => {
    assert.throws(
      () => resolveConfig({ pools: [{ name: 'a' }, { name: 'a' }] }, {}),
      (e) => isSbxError(e, 'invalid_argument') && /duplicate/.test(e.message),
    );
  });
});

describe('box tokens', () => {
  const secret = Buffer.alloc(32, 7);
  let now = 1_000_000;
  const tokens = new BoxTokenService(secret, () => now);

  test('a token names its box and nonce', () => {
    const t = tokens.issue('sb.with.dots', 'nonce1', 60_000);
    assert.deepEqual(tokens.verify(t), { boxId: 'sb.with.dots', nonce: 'nonce1', expiresAt: 1_060_000 });
  });

  test('a tampered token is refused', () => {
    const t = tokens.issue('sb-1', 'n', 60_000);
    const forged = t.replace('sb-1', 'sb-2');
    assert.throws(
      () => tokens.verify(forged),
      (e) => isSbxError(e, 'unauthorized'),
    );
    assert.throws(
      () => new BoxTokenService(Buffer.alloc(32, 8)).verify(t),
      (e) => isSbxError(e, 'unauthorized'),
    );
    assert.throws(
      () => tokens.verify('garbage'),
      (e) => isSbxError(e, 'unauthorized'),
    );
  });

  test('an expired token is refused', () => {
    const t = tokens.issue('sb-1', 'n', 1000);
    now += 1001;
    assert.throws(
      () => tokens.verify(t),
      (e) => isSbxError(e, 'unauthorized') && /expired/.test(e.message),
    );
  });
});
