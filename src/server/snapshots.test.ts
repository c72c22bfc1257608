/**
 * Snapshots over HTTP and the SDK, between owners: alice's snapshot is hers on every route (bob
 * gets the 404 of a missing one, by id, by name, by image reference), an admin sees all and uses
 * one by creating as its owner; wire errors name the field; delete waits for the boxes made from it.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Sbx, SbxError } from '../client/index.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { testEnv } from '../testing/env.js';
import { startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

const IMAGE = testEnv.baseImage;
let t: TestServer;
let alice: Sbx;
let bob: Sbx;
let bobKey: string;
const engine = new DockerRuntime(testEnv.engineAddr);

async function snapshotImages(): Promise<string[]> {
  const repo = `sbx-snapshot/${t.manager.config.name}:`;
  return (await engine.images.list()).flatMap((i) => i.tags.filter((tag) => tag.startsWith(repo)));
}

async function rejectsWith(p: Promise<unknown>, code: string, field?: string): Promise<void> {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof SbxError, String(e));
    assert.equal(e.code, code, e.message);
    if (field !== undefined) assert.equal(e.details?.['field'], field);
    return true;
  });
}

before(async () => {
  t = await startTestServer('snapshots');
  const key = async (name: string) => (await t.call('POST', '/v1/keys', { body: { name, role: 'user', owner: name } })).json.key as string;
  alice = new Sbx({ url: t.url, apiKey: await key('alice') });
  bobKey = await key('bob');
  bob = new Sbx({ url: t.url, apiKey: bobKey });
});

after(async () => {
  const left = await snapshotImages();
  await Promise.all(left.map((ref) => engine.images.remove(ref, { force: true }).catch(() => undefined)));
  await t?.dispose();
  await engine.close();
  assert.deepEqual(left, [], 'snapshot images left behind');
});

test("a snapshot is its owner's on every route; bob gets what a missing one answers; an admin creates from it as its owner", async () => {
  const box = await alice.create({ image: IMAGE });
  assert.equal((await box.exec(['sh', '-c', 'echo from-alice > /tmp/mark'])).exitCode, 0);
  const snap = await box.snapshot({ name: 'mine' });
  assert.equal(snap.owner, 'alice');
  assert.equal(snap.sourceBoxId, box.id);
  assert.deepEqual(await alice.snapshots.get(snap.id), snap);
  assert.deepEqual(await alice.snapshots.get('mine'), snap);
  assert.deepEqual(
    (await alice.snapshots.list()).map((s) => s.id),
    [snap.id],
  );

  assert.deepEqual(await bob.snapshots.list(), []);
  await rejectsWith(bob.snapshots.list({ owner: 'alice' }), 'forbidden', 'owner');
  const missing = await t.call('GET', '/v1/snapshots/snap-000000000000', { key: bobKey });
  const hidden = await t.call('GET', `/v1/snapshots/${snap.id}`, { key: bobKey });
  assert.equal(hidden.status, 404);
  assert.equal(hidden.text, missing.text.replaceAll('snap-000000000000', snap.id), 'the same answer as a missing one');
  await rejectsWith(bob.snapshots.get('mine'), 'not_found');
  await rejectsWith(bob.snapshots.delete(snap.id), 'not_found');
  await rejectsWith(bob.create({ image: snap.id }), 'not_found');
  await rejectsWith(bob.create({ image: snap.image }), 'not_found');
  await rejectsWith(bob.get(box.id), 'not_found');
  const bobSnap = await t.call('POST', `/v1/boxes/${box.id}/snapshots`, { key: bobKey, body: {} });
  assert.equal(bobSnap.status, 404, "bob cannot snapshot alice's box");

  const admin = new Sbx({ url: t.url, apiKey: t.admin });
  assert.deepEqual(
    (await admin.snapshots.list()).map((s) => s.id),
    [snap.id],
  );
  assert.deepEqual(await admin.snapshots.list({ owner: 'bob' }), []);
  assert.equal((await admin.snapshots.get(snap.id)).owner, 'alice');
  await rejectsWith(admin.create({ image: snap.id }), 'not_found');
  const asAlice = await admin.create({ image: snap.id, owner: 'alice' });
  assert.equal((await asAlice.exec(['cat', '/tmp/mark'])).stdout, 'from-alice\n');
  assert.equal(asAlice.image, snap.image);

  await rejectsWith(alice.snapshots.delete(snap.id), 'conflict');
  await asAlice.remove();
  await box.remove();
  await alice.snapshots.delete('mine');
  await rejectsWith(alice.snapshots.get(snap.id), 'not_found');
  await rejectsWith(alice.create({ image: snap.id }), 'not_found');
  assert.deepEqual(await snapshotImages(), []);
});

test('wire errors: bad names and unknown fields are 400 naming the field; a duplicate name is 409', async () => {
  const box = await alice.create({ image: IMAGE });
  try {
    const bad = await t.call('POST', `/v1/boxes/${box.id}/snapshots`, { body: { name: 'has space' } });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.code, 'invalid_argument');
    assert.match(bad.json.error.details.field, /name$/);
    const unknown = await t.call('POST', `/v1/boxes/${box.id}/snapshots`, { body: { nmae: 'x' } });
    assert.equal(unknown.status, 400);
    const noBody = await t.call('POST', `/v1/boxes/${box.id}/snapshots`);
    assert.equal(noBody.status, 201, noBody.text);
    const first = await box.snapshot({ name: 'dup' });
    await rejectsWith(box.snapshot({ name: 'dup' }), 'conflict', 'name');
    await alice.snapshots.delete(first.id);
    await alice.snapshots.delete(noBody.json.id);
  } finally {
    await box.remove();
  }
});
