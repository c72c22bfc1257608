/**
 * Which network a box may name, over the wire (issue 23 item 3, the review's first hole): a user key
 * that names Docker's default `bridge` (or any network the operator did not list) would leave sbx's
 * isolated network for one where boxes and the host's services are open to it. Only `none` and the
 * networks a pool lists (`networks`) are accepted; the rest is 400 and creates nothing.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import Docker from 'dockerode';
import { testEnv } from '../testing/env.js';
import { IMAGE, removeContainersOf, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

const name = `srv-boxnet-${process.pid}`;
let t: TestServer;
let user: string;
before(async () => {
  t = await startTestServer('box-networks', {
    name,
    config: {
      pools: [
        { name: 'local', addr: testEnv.engineAddr },
        { name: 'open', addr: testEnv.engineAddr, networks: ['bridge'] },
      ],
    },
  });
  user = (await t.server.keys.create({ name: 'mallory', role: 'user' })).key;
});
after(async () => t.dispose());

/** The engine network a box's container is on. */
async function networkOf(id: string): Promise<string> {
  const docker = new Docker();
  const [c] = await docker.listContainers({ all: true, filters: { label: [`sbx.id=${id}`] } });
  assert.ok(c, `no container for box ${id}`);
  return Object.keys(c.NetworkSettings.Networks).join(',');
}

test("a user's box that names an unlisted network is 400 invalid_argument naming network, and nothing is created", async () => {
  for (const network of ['bridge', 'sbx-boxes', 'some-app_default']) {
    const r = await t.call('POST', '/v1/boxes', { key: user, body: { image: IMAGE, network } });
    assert.equal(r.status, 400, `${network}: ${r.text}`);
    const err = (r.json as { error: { code: string; message: string; details?: { field?: string } } }).error;
    assert.deepEqual([err.code, err.details?.field], ['invalid_argument', 'network'], network);
    assert.match(err.message, /lists for the pool/);
  }
  const listed = await t.call('GET', '/v1/boxes', { key: user });
  assert.deepEqual((listed.json as { boxes: unknown[] }).boxes, []);
  assert.equal(await removeContainersOf(name), 0, 'a container was made for a refused create');
});

test("a network the pool lists is accepted; 'none' always is", async () => {
  const listed = await t.call('POST', '/v1/boxes', { key: user, body: { image: IMAGE, pool: 'open', network: 'bridge' } });
  assert.equal(listed.status, 201, listed.text);
  const none = await t.call('POST', '/v1/boxes', { key: user, body: { image: IMAGE, network: 'none' } });
  assert.equal(none.status, 201, none.text);
  const plain = await t.call('POST', '/v1/boxes', { key: user, body: { image: IMAGE } });
  assert.equal(plain.status, 201, plain.text);
  const ids = [listed, none, plain].map((r) => (r.json as { id: string }).id);
  try {
    assert.equal(await networkOf(ids[0]!), 'bridge');
    assert.equal(await networkOf(ids[1]!), 'none');
    assert.equal(await networkOf(ids[2]!), 'sbx-boxes', 'a box that names none joins the isolated network');
  } finally {
    for (const id of ids) await t.call('DELETE', `/v1/boxes/${id}`, { key: user });
  }
});

test('pools report their networks; POST /v1/pools takes them and refuses host and a warm template on an unlisted network', async () => {
  const pools = (await t.call('GET', '/v1/pools')).json as { pools: { name: string; networks: string[] }[] };
  assert.deepEqual(
    pools.pools.map((p) => [p.name, p.networks]),
    [
      ['local', []],
      ['open', ['bridge']],
    ],
  );
  const bad = [
    [{ name: 'h', addr: testEnv.engineAddr, networks: ['host'] }, 'networks.0'],
    [{ name: 'w', addr: testEnv.engineAddr, warm: [{ image: IMAGE, size: 0, network: 'bridge' }] }, 'warm.0.network'],
  ] as const;
  for (const [body, field] of bad) {
    const r = await t.call('POST', '/v1/pools', { body });
    assert.equal(r.status, 400, r.text);
    assert.match(r.text, new RegExp(field.replace('.', '\\.')));
  }
  const added = await t.call('POST', '/v1/pools', {
    body: { name: 'more', addr: testEnv.engineAddr, networks: ['bridge'], warm: [{ image: IMAGE, size: 0, network: 'bridge' }] },
  });
  assert.equal(added.status, 201, added.text);
  assert.deepEqual((added.json as { networks: string[] }).networks, ['bridge']);
});
