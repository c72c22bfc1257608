/**
 * box.renewLifetime over the wire: POST /v1/boxes/:id/renew-lifetime and the SDK's RemoteBox,
 * against a real server and engine; the owner scoping of every box route applies.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Sbx, SbxError } from '../client/index.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

let t: TestServer;
before(async () => {
  t = await startTestServer('renew');
});
after(async () => t.dispose());

test('the SDK renews a box lifetime; the answer and info() show the new maxLifetimeMs', async () => {
  const sbx = new Sbx({ url: t.url, apiKey: t.admin });
  await using box = await sbx.create({ image: IMAGE, maxLifetimeMs: 60_000 });
  const before = Date.now();
  await box.renewLifetime(600_000);
  const info = await box.info();
  const deadline = Date.parse(info.createdAt) + info.maxLifetimeMs;
  assert.ok(deadline >= before + 600_000 - 1_000 && deadline <= Date.now() + 600_000 + 1_000, `deadline ${new Date(deadline).toISOString()}`);
  // The server's Manager holds the same record.
  assert.equal((await (await t.manager.get(box.id)).info()).maxLifetimeMs, info.maxLifetimeMs);
});

test('bad bodies are 400 naming the field; another owner gets 404', async () => {
  const box = await t.manager.create({ image: IMAGE, owner: 'admin' });
  try {
    for (const body of [{}, { lifetimeMs: 0 }, { lifetimeMs: 1.5 }, { lifetimeMs: '1000' }, { lifetimeMs: 1000, extra: 1 }]) {
      const r = await t.call('POST', `/v1/boxes/${box.id}/renew-lifetime`, { body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.code, 'invalid_argument');
    }
    const other = (await t.server.keys.create({ name: 'eve', role: 'user' })).key;
    const r = await t.call('POST', `/v1/boxes/${box.id}/renew-lifetime`, { body: { lifetimeMs: 1000 }, key: other });
    assert.equal(r.status, 404);
    const sdk = new Sbx({ url: t.url, apiKey: other });
    await assert.rejects((async () => (await sdk.get(box.id)).renewLifetime(1000))(), (e) => e instanceof SbxError && e.code === 'not_found');
  } finally {
    await box.remove();
  }
});
