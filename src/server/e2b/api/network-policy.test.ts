/**
 * e2b's egress options against a real server and engine with the e2b SDK 2.51: `allowInternetAccess:
 * false` is egress `'none'` (the sandbox keeps its network: its agent, inbound), `network.allowOut /
 * denyOut` map through fromE2bNetwork, the sandbox info echoes them, `sandbox.updateNetwork`
 * replaces the whole config, forks keep the policy. The pool's runtime records the rules it is
 * given (no packet is filtered here); a second server's runtime enforces no egress.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as e2b from 'e2b';
import { DockerRuntime } from '../../../runtime/docker/runtime.js';
import { compileEgress } from '../../../sandbox/egress-policy.js';
import { managerSelector } from '../../../sandbox/labels.js';
import { EgressRecorder, withoutEgress } from '../../../testing/egress-runtimes.js';
import { testEnv } from '../../../testing/env.js';
import { fakenet } from '../../../testing/fakenet.js';
import { startTestServer } from '../../../testing/server.js';
import type { TestServer } from '../../../testing/server.js';

const { Sandbox, SandboxNotFoundError, ALL_TRAFFIC } = e2b;

const engine = new DockerRuntime(testEnv.engineAddr);
const rec = new EgressRecorder(new DockerRuntime(testEnv.engineAddr));
const plain = new DockerRuntime(testEnv.engineAddr);
let t: TestServer;
let open: TestServer;
let alice: string;
let bob: string;

before(async () => {
  const e2bOpts = { e2b: { templates: { base: testEnv.e2bImage } } };
  [t, open] = await Promise.all([
    startTestServer('e2b-egress', { config: { pools: [{ name: 'local', runtime: rec.runtime }] }, serve: e2bOpts }),
    startTestServer('e2b-noegress', { config: { pools: [{ name: 'local', runtime: withoutEgress(plain) }] }, serve: e2bOpts }),
  ]);
  alice = (await t.server.keys.create({ name: 'alice', role: 'user' })).e2bKey;
  bob = (await t.server.keys.create({ name: 'bob', role: 'user' })).e2bKey;
});
after(async () => {
  await Promise.all([t?.dispose(), open?.dispose()]);
  await Promise.all([engine.close(), rec.inner.close(), plain.close()]);
});

function opts(apiKey: string, server = t) {
  return { apiUrl: `${server.url}/e2b/api`, sandboxUrl: `${server.url}/e2b/envd`, apiKey, requestTimeoutMs: 120_000 };
}

async function raw(server: TestServer, method: string, path: string, key: string, body?: unknown) {
  const res = await fetch(`${server.url}/e2b/api${path}`, {
    method,
    headers: { 'x-api-key': key, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as { code: number; message: string }) : undefined };
}

describe('e2b 2.51 egress options against sbx', () => {
  test('allowInternetAccess: false is egress none on a box that keeps its network (agent, inbound); the info says so', async () => {
    const sbx = await Sandbox.create('base', { ...opts(alice), allowInternetAccess: false });
    try {
      const info = await (await t.manager.get(sbx.sandboxId)).info();
      assert.deepEqual(info.networkPolicy, { egress: 'none' });
      assert.equal(info.execPath, 'agent', 'the box has its interface: the agent serves it (network none would not)');
      assert.deepEqual(rec.egressOf(info.containerId)?.mode, 'none');
      assert.equal((await sbx.commands.run('echo inside')).stdout, 'inside\n');
      const got = await Sandbox.getInfo(sbx.sandboxId, opts(alice));
      assert.equal(got.allowInternetAccess, false);
      assert.deepEqual(got.network?.denyOut, [ALL_TRAFFIC]);
    } finally {
      await sbx.kill();
    }
  });

  test('network.allowOut with the catch-all denied is an allowlist; getInfo echoes allowOut and denyOut', async () => {
    const sbx = await Sandbox.create('base', { ...opts(alice), network: { allowOut: ['PyPI.org', '8.8.8.0/24'], denyOut: ({ allTraffic }) => [allTraffic] } });
    try {
      const box = await t.manager.get(sbx.sandboxId);
      assert.deepEqual((await box.info()).networkPolicy, { egress: { allow: ['pypi.org', '8.8.8.0/24'] } });
      assert.deepEqual(rec.egressOf(box.containerId), compileEgress({ egress: { allow: ['pypi.org', '8.8.8.0/24'] } }, []));
      const got = await sbx.getInfo();
      assert.equal(got.allowInternetAccess, true);
      assert.deepEqual(got.network?.allowOut, ['pypi.org', '8.8.8.0/24']);
      assert.deepEqual(got.network?.denyOut, [ALL_TRAFFIC]);
      const denied = await Sandbox.create('base', { ...opts(alice), network: { denyOut: ['10.0.0.0/8'] } });
      try {
        assert.deepEqual((await (await t.manager.get(denied.sandboxId)).info()).networkPolicy, { egress: { deny: ['10.0.0.0/8'] } });
        assert.deepEqual((await denied.getInfo()).network?.denyOut, ['10.0.0.0/8']);
      } finally {
        await denied.kill();
      }
    } finally {
      await sbx.kill();
    }
  });

  test('updateNetwork replaces the whole config (omitted fields cleared); rules and egressProxy are a 400 naming them; 404 for unknown and others’ sandboxes', async () => {
    const sbx = await Sandbox.create('base', { ...opts(alice), allowInternetAccess: false });
    try {
      const box = await t.manager.get(sbx.sandboxId);
      await sbx.updateNetwork({ allowOut: ['a.test'], denyOut: [ALL_TRAFFIC] });
      assert.deepEqual((await box.info()).networkPolicy, { egress: { allow: ['a.test'] } });
      assert.deepEqual(rec.setCalls(box.containerId).at(-1), compileEgress({ egress: { allow: ['a.test'] } }, []));
      await sbx.updateNetwork({ denyOut: ['10.0.0.0/8'] });
      assert.deepEqual((await box.info()).networkPolicy, { egress: { deny: ['10.0.0.0/8'] } });
      await sbx.updateNetwork({});
      assert.deepEqual((await box.info()).networkPolicy, { egress: 'all' }, 'an update naming nothing clears every rule');
      await Sandbox.updateNetwork(sbx.sandboxId, { allowInternetAccess: false }, opts(alice));
      assert.deepEqual((await box.info()).networkPolicy, { egress: 'none' });

      const calls = rec.setCalls(box.containerId).length;
      await assert.rejects(
        sbx.updateNetwork({ allowOut: ['a.test'], rules: { 'a.test': [{ transform: { headers: { authorization: 'x' } } }] } }),
        (e) => e instanceof e2b.SandboxError && /400/.test(e.message) && /rules/.test(e.message),
      );
      await assert.rejects(
        sbx.updateNetwork({ egressProxy: { address: 'proxy.example.com:1080' } }),
        (e) => e instanceof e2b.SandboxError && /egressProxy/.test(e.message),
      );
      await assert.rejects(
        sbx.updateNetwork({ allowOut: ['bad_name'], denyOut: [ALL_TRAFFIC] }),
        (e) => e instanceof e2b.SandboxError && /allowOut\[0\]/.test(e.message),
      );
      const bad = await raw(t, 'PUT', `/sandboxes/${sbx.sandboxId}/network`, alice, { denyOut: ['10.0.0.0/8'], allowOut: ['10.1.2.3'] });
      assert.equal(bad.status, 400);
      assert.match(bad.json!.message, /allowOut\[0\]: '10\.1\.2\.3' lies in the denied '10\.0\.0\.0\/8'/);
      assert.equal(rec.setCalls(box.containerId).length, calls, 'nothing refused reached the runtime');
      assert.deepEqual((await box.info()).networkPolicy, { egress: 'none' });

      await assert.rejects(Sandbox.updateNetwork(sbx.sandboxId, {}, opts(bob)), (e) => e instanceof SandboxNotFoundError);
      await assert.rejects(Sandbox.updateNetwork('sb-000000000000', {}, opts(alice)), (e) => e instanceof SandboxNotFoundError);
      assert.equal(rec.setCalls(box.containerId).length, calls);
    } finally {
      await sbx.kill();
    }
  });

  test('a create with a bad entry or rules is a 400 naming it, and nothing is made', async () => {
    const before = (await engine.list({ labels: managerSelector(t.manager.config.name) })).length;
    for (const [network, words] of [
      [{ allowOut: ['ok.test', 'x..test'], denyOut: [ALL_TRAFFIC] }, /network\.allowOut\[1\]/],
      [{ denyOut: ['10.0.0.1/8'] }, /network\.denyOut\[0\].*10\.0\.0\.0\/8/],
      [{ rules: { 'a.test': [{ transform: { headers: { a: 'b' } } }] } }, /network\.rules/],
      [{ egressProxy: { address: 'proxy.example.com:1080' } }, /network\.egressProxy/],
    ] as const) {
      await assert.rejects(
        Sandbox.create('base', { ...opts(alice), network: network as e2b.SandboxNetworkOpts }),
        (e) => e instanceof e2b.SandboxError && /400/.test(e.message) && words.test(e.message),
      );
    }
    assert.equal((await engine.list({ labels: managerSelector(t.manager.config.name) })).length, before);
  });

  test("forks keep the source's egress policy", async () => {
    const source = await Sandbox.create('base', { ...opts(alice), network: { allowOut: ['pypi.org:443'], denyOut: [ALL_TRAFFIC] } });
    const forks: e2b.Sandbox[] = [];
    try {
      await source.updateNetwork({ allowOut: ['files.pythonhosted.org'], denyOut: [ALL_TRAFFIC] });
      const results = await Sandbox.fork(source.sandboxId, { ...opts(alice), count: 1 });
      for (const r of results) {
        assert.ok(r instanceof Sandbox, `the fork failed: ${String(r)}`);
        forks.push(r);
      }
      const fork = await t.manager.get(forks[0]!.sandboxId);
      const want = { egress: { allow: ['files.pythonhosted.org'] } };
      assert.deepEqual((await fork.info()).networkPolicy, want);
      assert.deepEqual(rec.egressOf(fork.containerId), compileEgress(want, []));
    } finally {
      await Promise.all([source.kill(), ...forks.map((f) => f.kill())]);
    }
  });

  test("a pool whose runtime enforces no egress: allowInternetAccess false and allowlists are 503 not_available; 'all' works, and an update to none is refused", async () => {
    for (const body of [
      { templateID: 'base', allow_internet_access: false },
      { templateID: 'base', network: { allowOut: ['pypi.org'], denyOut: ['0.0.0.0/0'] } },
    ]) {
      const r = await raw(open, 'POST', '/v2/sandboxes', open.admin, body);
      assert.equal(r.status, 503, JSON.stringify(r.json));
      assert.match(r.json!.message, /cannot enforce egress/);
    }
    assert.deepEqual(await engine.list({ labels: managerSelector(open.manager.config.name) }), []);
    const made = await raw(open, 'POST', '/v2/sandboxes', open.admin, { templateID: 'base', network: { allowOut: ['pypi.org'] } });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const id = (made.json as unknown as { sandboxID: string }).sandboxID;
    const put = await raw(open, 'PUT', `/sandboxes/${id}/network`, open.admin, { allow_internet_access: false });
    assert.equal(put.status, 503);
    assert.equal((await raw(open, 'PUT', `/sandboxes/${id}/network`, open.admin, {})).status, 204);
    assert.equal((await raw(open, 'DELETE', `/sandboxes/${id}`, open.admin)).status, 204);
  });

  test("real packets: on an enforcing pool the SDK's options filter what the sandbox reaches, and updateNetwork changes it at once", async () => {
    const net = await fakenet();
    const real = await startTestServer('e2b-egress-real', {
      config: { pools: [{ name: 'local', addr: testEnv.engineAddr, runtimeOptions: { egressDns: [net.dns] } }] },
      serve: { e2b: { templates: { base: testEnv.e2bImage } } },
    });
    try {
      const key = (await real.server.keys.create({ name: 'carol', role: 'user' })).e2bKey;
      /** curl's exit: 0 when the fake host answered (the SDK throws on a non-zero exit). */
      const reach = async (sbx: e2b.Sandbox, url: string) => {
        const r = await sbx.commands.run(`curl -sS -m 4 -o /dev/null ${url}; echo "exit=$?"`);
        return /exit=0\s*$/.test(r.stdout);
      };
      const sbx = await Sandbox.create('base', { ...opts(key, real), network: { allowOut: [net.ok.address], denyOut: [ALL_TRAFFIC] } });
      const offline = await Sandbox.create('base', { ...opts(key, real), allowInternetAccess: false });
      try {
        assert.equal(await reach(sbx, `http://${net.ok.address}/`), true, 'the allowed address');
        assert.equal(await reach(sbx, `http://${net.other.address}/`), false, 'another address');
        assert.equal(await reach(offline, `http://${net.ok.address}/`), false, 'allowInternetAccess: false');
        await sbx.updateNetwork({ allowOut: [net.ok.name], denyOut: [ALL_TRAFFIC] });
        assert.equal(await reach(sbx, `http://${net.ok.name}/`), true, 'an allowed name, resolved through sbx');
        assert.equal(await reach(sbx, `http://${net.other.address}/`), false);
        await sbx.updateNetwork({});
        assert.equal(await reach(sbx, `http://${net.other.address}/`), true, 'everything, once the config is cleared');
        assert.equal(await reach(sbx, `http://${net.metadata}/`), false, 'but the metadata address');
      } finally {
        await Promise.all([sbx.kill(), offline.kill()]);
      }
    } finally {
      await real.dispose();
    }
  });
});
