/**
 * Egress policies over the wire: the create body's `networkPolicy`, PUT /v1/boxes/:id/network and
 * the SDK's box.setNetwork, against real servers and the engine: one whose pool's runtime enforces
 * no egress (the not_available path) and one whose runtime records what it is asked (no packet
 * is filtered here). Bad policies are 400 naming the entry with nothing created; another owner's
 * box is 404.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Sbx, SbxError } from '../client/index.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { compileEgress } from '../sandbox/egress-policy.js';
import { managerSelector } from '../sandbox/labels.js';
import { EgressRecorder, withoutEgress } from '../testing/egress-runtimes.js';
import { testEnv } from '../testing/env.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

const engine = new DockerRuntime(testEnv.engineAddr);
const rec = new EgressRecorder(new DockerRuntime(testEnv.engineAddr));
const plain = new DockerRuntime(testEnv.engineAddr);
let enforcing: TestServer;
let open: TestServer;

before(async () => {
  [enforcing, open] = await Promise.all([
    startTestServer('egress-rec', { config: { apiUrl: 'http://203.0.113.7:8080', pools: [{ name: 'local', runtime: rec.runtime }] } }),
    startTestServer('egress-none', { config: { pools: [{ name: 'local', runtime: withoutEgress(plain) }] } }),
  ]);
});
after(async () => {
  await Promise.all([enforcing?.dispose(), open?.dispose()]);
  await Promise.all([engine.close(), rec.inner.close(), plain.close()]);
});

async function containersOf(t: TestServer) {
  return engine.list({ labels: managerSelector(t.manager.config.name) });
}

describe('egress policies over HTTP and the SDK', () => {
  test('create with a networkPolicy, then PUT /v1/boxes/:id/network: 200 with the box info, the runtime gets each', async () => {
    const r = await enforcing.call('POST', '/v1/boxes', { body: { image: IMAGE, networkPolicy: { egress: { allow: ['PyPI.org:443'] } } } });
    assert.equal(r.status, 201, r.text);
    assert.deepEqual(r.json.networkPolicy, { egress: { allow: ['pypi.org:443'] } });
    const id: string = r.json.id;
    const endpoints = [{ address: '203.0.113.7', port: 8080 }];
    assert.deepEqual(rec.egressOf(r.json.containerId), compileEgress({ egress: { allow: ['pypi.org:443'] } }, endpoints));
    const put = await enforcing.call('PUT', `/v1/boxes/${id}/network`, { body: { egress: { deny: ['10.0.0.0/8', '[2001:db8::1]:53/udp'] } } });
    assert.equal(put.status, 200, put.text);
    assert.equal(put.json.id, id);
    assert.deepEqual(put.json.networkPolicy, { egress: { deny: ['10.0.0.0/8', '[2001:db8::1]:53/udp'] } });
    assert.deepEqual(rec.setCalls(r.json.containerId), [compileEgress(put.json.networkPolicy, endpoints)]);
    const got = await enforcing.call('GET', `/v1/boxes/${id}`);
    assert.deepEqual(got.json.networkPolicy, put.json.networkPolicy);
    const pools = await enforcing.call('GET', '/v1/pools');
    assert.deepEqual(pools.json.pools[0].networkPolicy, { egress: 'all' });
    assert.equal((await enforcing.call('DELETE', `/v1/boxes/${id}`)).status, 204);
  });

  test('the SDK: a create option and box.setNetwork; the box’s fields follow', async () => {
    const sbx = new Sbx({ url: enforcing.url, apiKey: enforcing.admin });
    await using box = await sbx.create({ image: IMAGE, networkPolicy: { egress: 'none' } });
    assert.deepEqual((await box.info()).networkPolicy, { egress: 'none' });
    await box.setNetwork({ egress: { allow: ['*.example.com'] } });
    assert.deepEqual((await box.info()).networkPolicy, { egress: { allow: ['*.example.com'] } });
    await assert.rejects(
      box.setNetwork({ egress: { allow: ['a..b'] } }),
      (e) => e instanceof SbxError && e.code === 'invalid_argument' && e.details?.['field'] === 'egress.allow[0]',
    );
  });

  test('bad policies are 400 naming the field and the entry; nothing is created and nothing is asked of the runtime', async () => {
    const before = rec.calls.length;
    const bodies: Array<[unknown, string, string]> = [
      [{ egress: { allow: ['ok.test', 'bad_name.test'] } }, 'networkPolicy.egress.allow[1]', 'bad_name.test'],
      [{ egress: { deny: ['10.0.0.1/8'] } }, 'networkPolicy.egress.deny[0]', '10.0.0.0/8'],
      [{ egress: { allow: Array.from({ length: 1001 }, (_, i) => `h${i}.test`) } }, 'networkPolicy.egress', 'at most 1000'],
      [{ egress: 'some' }, 'networkPolicy.egress', ''],
      [{ egress: { allow: [] }, other: 1 }, 'networkPolicy.other', 'other'],
    ];
    for (const [networkPolicy, field, words] of bodies) {
      const r = await enforcing.call('POST', '/v1/boxes', { body: { image: IMAGE, networkPolicy } });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.code, 'invalid_argument');
      assert.equal(r.json.error.details.field, field, r.text);
      assert.ok(r.json.error.message.includes(words), r.text);
    }
    assert.deepEqual(await containersOf(enforcing), []);
    const box = await enforcing.manager.create({ image: IMAGE, owner: 'admin' });
    try {
      for (const [body, field, words] of bodies) {
        const r = await enforcing.call('PUT', `/v1/boxes/${box.id}/network`, { body });
        assert.equal(r.status, 400, r.text);
        // The body is the policy: its fields are named from `egress`.
        assert.equal(r.json.error.details.field, field.replace(/^networkPolicy\./, ''), r.text);
        assert.ok(r.json.error.message.includes(words), r.text);
      }
      assert.equal(rec.calls.length, before + 1, 'only the create reached the runtime');
    } finally {
      await box.remove();
    }
  });

  test("another owner's box is 404 on PUT, as a missing one; the owner's own works", async () => {
    const box = await enforcing.manager.create({ image: IMAGE, owner: 'alice' });
    try {
      const eve = (await enforcing.server.keys.create({ name: 'eve', role: 'user' })).key;
      const alice = (await enforcing.server.keys.create({ name: 'alice', role: 'user' })).key;
      const r = await enforcing.call('PUT', `/v1/boxes/${box.id}/network`, { body: { egress: 'none' }, key: eve });
      assert.equal(r.status, 404, r.text);
      assert.equal(r.json.error.code, 'not_found');
      assert.equal((await enforcing.call('PUT', '/v1/boxes/sb-000000000000/network', { body: { egress: 'none' }, key: eve })).status, 404);
      assert.deepEqual(rec.setCalls(box.containerId), []);
      const ok = await enforcing.call('PUT', `/v1/boxes/${box.id}/network`, { body: { egress: 'none' }, key: alice });
      assert.equal(ok.status, 200, ok.text);
      assert.deepEqual(ok.json.networkPolicy, { egress: 'none' });
    } finally {
      await box.remove();
    }
  });

  test("a pool whose runtime enforces no egress: anything but 'all' is 503 not_available (reason egress), nothing created", async () => {
    const r = await open.call('POST', '/v1/boxes', { body: { image: IMAGE, networkPolicy: { egress: { allow: ['pypi.org'] } } } });
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.error.code, 'not_available');
    assert.equal(r.json.error.details.reason, 'egress');
    assert.deepEqual(await containersOf(open), []);
    const made = await open.call('POST', '/v1/boxes', { body: { image: IMAGE, networkPolicy: { egress: 'all' } } });
    assert.equal(made.status, 201, made.text);
    assert.deepEqual(made.json.networkPolicy, { egress: 'all' });
    const put = await open.call('PUT', `/v1/boxes/${made.json.id}/network`, { body: { egress: 'none' } });
    assert.equal(put.status, 503, put.text);
    assert.equal(put.json.error.details.reason, 'egress');
    assert.equal((await open.call('PUT', `/v1/boxes/${made.json.id}/network`, { body: { egress: 'all' } })).status, 200);
    assert.equal((await open.call('DELETE', `/v1/boxes/${made.json.id}`)).status, 204);
  });
});
