/**
 * The egress policy above the Runtime seam, on a real engine: validation before any engine call
 * (nothing created), the not_available path of a runtime that enforces no egress, boxes without a
 * network, owner checks, and what the Manager asks of a runtime that enforces egress (create,
 * setNetwork, warm claims, archive and restore), through a recorder that filters no packet
 * (packet-level tests are src/sandbox/egress.test.ts's).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { after, describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { Runtime } from '../runtime/types.js';
import { CountingRuntime } from '../testing/counting-runtime.js';
import { EgressRecorder, withoutEgress } from '../testing/egress-runtimes.js';
import { testEnv, testRunId } from '../testing/env.js';
import { waitFor } from '../testing/wait.js';
import type { PoolConfig } from './config.js';
import { compileEgress } from './egress-policy.js';
import type { EgressPolicy, NetworkPolicy } from './egress-policy.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';

const IMAGE = testEnv.baseImage;
const runId = testRunId('network-policy');
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-network-policy-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const managers: Manager[] = [];
let seq = 0;
/** An SBX_API_URL on another machine: boxes must reach it whatever their policy. */
const API_URL = 'http://203.0.113.7:8080';
const API_ENDPOINT = [{ address: '203.0.113.7', port: 8080 }];

function newManager(runtime: Runtime, pool: Partial<PoolConfig> = {}, name = `np${++seq}-${process.pid}`): Manager {
  const m = new Manager({
    name,
    dataDir,
    apiUrl: API_URL,
    cleanupIntervalMs: 0,
    logger: pino({ level: 'silent' }),
    pools: [{ name: 'local', runtime, ...pool }],
  });
  managers.push(m);
  return m;
}

async function containersOf(m: Manager) {
  return engine.list({ labels: managerSelector(m.config.name) });
}

function invalid(field: string, ...words: string[]) {
  return (e: unknown) => {
    assert.ok(isSbxError(e, 'invalid_argument'), `expected invalid_argument, got ${String(e)}`);
    assert.equal(e.details?.['field'], field);
    for (const w of words) assert.ok(e.message.includes(w), `'${e.message}' should name '${w}'`);
    return true;
  };
}

function noEgress(...words: string[]) {
  return (e: unknown) => {
    assert.ok(isSbxError(e, 'not_available'), `expected not_available, got ${String(e)}`);
    assert.equal(e.details?.['reason'], 'egress');
    assert.equal(e.details?.['pool'], 'local');
    for (const w of words) assert.ok(e.message.includes(w), `'${e.message}' should name '${w}'`);
    return true;
  };
}

after(async () => {
  await Promise.all(managers.map((m) => m.close()));
  const left = (await Promise.all(managers.map(containersOf))).flat();
  await Promise.all(left.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(
    left.map((c) => c.name),
    [],
    'containers left behind by the network policy tests',
  );
});

describe(`network policies on a real engine (${runId})`, () => {
  test('a bad policy is invalid_argument naming the entry, before any engine call: nothing is created', async () => {
    const counting = new CountingRuntime(new DockerRuntime(testEnv.engineAddr));
    const m = newManager(new EgressRecorder(counting).runtime);
    await assert.rejects(
      m.create({ image: IMAGE, networkPolicy: { egress: { allow: ['pypi.org:443', 'bad_name.org'] } } }),
      invalid('networkPolicy.egress.allow[1]', 'bad_name.org'),
    );
    await assert.rejects(
      m.create({ image: IMAGE, networkPolicy: { egress: { allow: [], deny: ['198.18.0.1/15'] } } }),
      invalid('networkPolicy.egress.deny[0]', '198.18.0.0/15'),
    );
    const many = Array.from({ length: 100_000 }, (_, i) => `h${i}.example.com`);
    await assert.rejects(m.create({ image: IMAGE, networkPolicy: { egress: { allow: many } } }), invalid('networkPolicy.egress', '100000 entries', '1000'));
    await assert.rejects(m.create({ image: IMAGE, networkPolicy: { egress: 'some' } as never }), invalid('networkPolicy.egress'));
    await assert.rejects(m.create({ image: IMAGE, networkPolicy: { egress: 'all', extra: 1 } as never }), invalid('networkPolicy', 'extra'));
    assert.equal(counting.total(), 0, `refused before any engine call: ${JSON.stringify(counting.counts())}`);
    assert.deepEqual(await containersOf(m), []);
  });

  test("a runtime that enforces no egress: anything but 'all' is not_available (reason egress) before any engine call; 'all' works", async () => {
    const counting = new CountingRuntime(new DockerRuntime(testEnv.engineAddr));
    const m = newManager(withoutEgress(counting));
    const refused: EgressPolicy[] = ['none', { allow: ['pypi.org'] }, { deny: ['10.0.0.0/8'] }];
    for (const egress of refused) {
      await assert.rejects(m.create({ image: IMAGE, owner: 'alice', networkPolicy: { egress } }), noEgress('cannot enforce egress'));
    }
    assert.equal(counting.total(), 0, `refused before any engine call: ${JSON.stringify(counting.counts())}`);
    assert.deepEqual(await containersOf(m), []);

    const box = await m.create({ image: IMAGE, owner: 'alice', networkPolicy: { egress: 'all' } });
    assert.deepEqual((await box.info()).networkPolicy, { egress: 'all' });
    counting.reset();
    await assert.rejects(box.setNetwork({ egress: 'none' }), noEgress());
    assert.equal(counting.total(), 0);
    await box.setNetwork({ egress: 'all' });
    assert.deepEqual((await box.info()).networkPolicy, { egress: 'all' });
    await box.remove();
  });

  test("a pool defaulting to a policy its runtime cannot enforce refuses creates that name none, saying it is the pool's", async () => {
    const m = newManager(withoutEgress(new DockerRuntime(testEnv.engineAddr)), { networkPolicy: { egress: { allow: ['pypi.org'] } } });
    assert.deepEqual((await m.pools())[0]!.networkPolicy, { egress: { allow: ['pypi.org'] } });
    await assert.rejects(m.create({ image: IMAGE }), noEgress("pool 'local' defaults to egress policy"));
    // A box's own 'all' overrides the pool's.
    const box = await m.create({ image: IMAGE, networkPolicy: { egress: 'all' } });
    await box.remove();
    assert.deepEqual(await containersOf(m), []);
  });

  test("a box without a network takes only 'all' or 'none', and a pool's allowlist becomes 'none' there", async () => {
    const rec = new EgressRecorder(new DockerRuntime(testEnv.engineAddr));
    const m = newManager(rec.runtime, { networkPolicy: { egress: { allow: ['pypi.org'] } } });
    await assert.rejects(
      m.create({ image: IMAGE, security: 'strict', networkPolicy: { egress: { allow: ['pypi.org'] } } }),
      invalid('networkPolicy.egress', 'no network', "only 'all' or 'none'"),
    );
    await assert.rejects(m.create({ image: IMAGE, network: 'none', networkPolicy: { egress: { deny: ['10.0.0.0/8'] } } }), invalid('networkPolicy.egress'));
    assert.deepEqual(await containersOf(m), []);
    const box = await m.create({ image: IMAGE, security: 'strict' });
    assert.deepEqual((await box.info()).networkPolicy, { egress: 'none' });
    await assert.rejects(box.setNetwork({ egress: { allow: ['pypi.org'] } }), invalid('networkPolicy.egress', `box '${box.id}' has no network`));
    await box.setNetwork({ egress: 'all' });
    assert.deepEqual((await box.info()).networkPolicy, { egress: 'all' });
    await box.remove();
  });

  test('a restarted Manager still knows a box has no network (label sbx.box-network)', async () => {
    const rec = new EgressRecorder(new DockerRuntime(testEnv.engineAddr));
    const first = newManager(rec.runtime);
    const box = await first.create({ image: IMAGE, network: 'none' });
    await first.close();
    const again = newManager(rec.runtime, {}, first.config.name);
    await again.start();
    await assert.rejects(again.setNetwork(box.id, { egress: { allow: ['pypi.org'] } }), invalid('networkPolicy.egress', 'has no network'));
    await again.setNetwork(box.id, { egress: 'none' });
    await again.remove(box.id);
  });

  test("setNetwork names only the caller's boxes: another owner's box is not_found, as a missing one", async () => {
    const rec = new EgressRecorder(new DockerRuntime(testEnv.engineAddr));
    const m = newManager(rec.runtime);
    const box = await m.create({ image: IMAGE, owner: 'alice' });
    await assert.rejects(m.setNetwork(box.id, { egress: 'none' }, { owner: 'bob' }), (e) => isSbxError(e, 'not_found') && !e.message.includes('alice'));
    await assert.rejects(m.setNetwork('sb-nothere', { egress: 'none' }, { owner: 'bob' }), (e) => isSbxError(e, 'not_found'));
    assert.deepEqual(rec.setCalls(box.containerId), [], 'nothing was asked of the runtime');
    await m.setNetwork(box.id, { egress: 'none' }, { owner: 'alice' });
    assert.deepEqual((await box.info()).networkPolicy, { egress: 'none' });
    await box.remove();
  });

  test('a runtime that enforces egress gets the compiled policy with sbx’s endpoints at create and at setNetwork; info reads it back', async () => {
    const rec = new EgressRecorder(new DockerRuntime(testEnv.engineAddr));
    const m = newManager(rec.runtime);
    const policy: NetworkPolicy = { egress: { allow: ['PyPI.org:443', '*.pythonhosted.org', '198.18.0.0/15'], deny: ['198.18.0.9'] } };
    const box = await m.create({ image: IMAGE, owner: 'alice', networkPolicy: policy });
    const normal: NetworkPolicy = { egress: { allow: ['pypi.org:443', '*.pythonhosted.org', '198.18.0.0/15'], deny: ['198.18.0.9'] } };
    assert.deepEqual(rec.egressOf(box.containerId), compileEgress(normal, API_ENDPOINT));
    assert.deepEqual(rec.egressOf(box.containerId)!.endpoints, [{ host: '203.0.113.7/32', ports: [8080, 8080], protocol: 'tcp' }]);
    assert.deepEqual((await box.info()).networkPolicy, normal);

    await assert.rejects(box.setNetwork({ egress: { deny: ['ok.test', 'x..test'] } }), invalid('networkPolicy.egress.deny[1]', 'x..test'));
    assert.deepEqual(rec.setCalls(box.containerId), []);
    await box.setNetwork({ egress: { deny: ['10.0.0.0/8'] } });
    assert.deepEqual(rec.setCalls(box.containerId), [compileEgress({ egress: { deny: ['10.0.0.0/8'] } }, API_ENDPOINT)]);
    assert.deepEqual((await box.info()).networkPolicy, { egress: { deny: ['10.0.0.0/8'] } });
    // A box that is no default gets the pool's policy, 'all' unless configured.
    const plain = await m.create({ image: IMAGE, owner: 'alice' });
    assert.deepEqual(rec.egressOf(plain.containerId), compileEgress({ egress: 'all' }, API_ENDPOINT));
    await Promise.all([box.remove(), plain.remove()]);
  });

  test('warm spares are made with the pool’s policy (the template key does not depend on it); a claim asking for another sets it before the hand-out', async () => {
    const rec = new EgressRecorder(new DockerRuntime(testEnv.engineAddr));
    const poolPolicy: NetworkPolicy = { egress: { allow: ['pypi.org'] } };
    const m = newManager(rec.runtime, { warm: [{ image: IMAGE, size: 1 }], networkPolicy: poolPolicy });
    const other = newManager(withoutEgress(new DockerRuntime(testEnv.engineAddr)), { warm: [{ image: IMAGE, size: 0 }] });
    await Promise.all([m.start(), other.start()]);
    const ready = async () => waitFor(async () => ((await m.warm())[0]!.ready === 1 ? true : undefined), { what: 'a spare ready' });
    await ready();
    assert.equal((await m.warm())[0]!.key, (await other.warm())[0]!.key, 'the key is the shape’s, not the policy’s');
    const spare = rec.calls.find((c) => c.op === 'create')!;
    assert.deepEqual(spare.egress, compileEgress(poolPolicy, API_ENDPOINT));

    const same = await m.create({ image: IMAGE, owner: 'alice' });
    assert.equal(same.containerId, spare.id, 'claimed the spare');
    assert.deepEqual(rec.setCalls(same.containerId), [], 'the spare had the policy already');
    assert.deepEqual((await same.info()).networkPolicy, poolPolicy);

    await ready();
    const second = rec.calls.filter((c) => c.op === 'create')[1]!;
    const own = await m.create({ image: IMAGE, owner: 'alice', networkPolicy: { egress: 'none' } });
    assert.equal(own.containerId, second.id, 'claimed the second spare');
    assert.deepEqual(rec.setCalls(own.containerId), [compileEgress({ egress: 'none' }, API_ENDPOINT)]);
    assert.deepEqual((await own.info()).networkPolicy, { egress: 'none' });
    await Promise.all([same.remove(), own.remove()]);
    // The filler's next spare goes with the test.
    await m.close();
    await Promise.all((await containersOf(m)).map((c) => engine.remove(c.id, { force: true })));
  });

  test('an archived box keeps its policy (set before the archive, or while archived) and its restore is made with it', async () => {
    const rec = new EgressRecorder(new DockerRuntime(testEnv.engineAddr));
    const m = newManager(rec.runtime);
    const box = await m.create({ image: IMAGE, owner: 'alice', networkPolicy: { egress: { allow: ['a.test'] } } });
    await box.setNetwork({ egress: { deny: ['10.0.0.0/8'] } });
    await box.archive();
    assert.equal(box.status, 'archived');
    assert.deepEqual((await box.info()).networkPolicy, { egress: { deny: ['10.0.0.0/8'] } });
    await box.setNetwork({ egress: { allow: ['b.test:443'] } });
    assert.deepEqual((await box.info()).networkPolicy, { egress: { allow: ['b.test:443'] } });
    await box.resume();
    assert.equal(box.status, 'running');
    const made = rec.calls.filter((c) => c.op === 'create').at(-1)!;
    assert.equal(made.id, box.containerId, 'the restore made a new container');
    assert.deepEqual(made.egress, compileEgress({ egress: { allow: ['b.test:443'] } }, API_ENDPOINT));
    assert.deepEqual((await box.info()).networkPolicy, { egress: { allow: ['b.test:443'] } });
    await box.remove();
  });
});
