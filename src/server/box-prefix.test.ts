/**
 * Box id prefixes on a real server, from the side of another owner: a prefix stands only for a
 * generated id of the caller's own boxes, and every route acts on the box it resolved, never on
 * the raw path id (the VNC bridge and the heartbeat once dialled and touched the path's box).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { testEnv } from '../testing/env.js';
import { startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

const IMAGE = testEnv.baseImage;
let t: TestServer;
let mallory: string;
const p = `pfx${process.pid}`;

before(async () => {
  t = await startTestServer('box-prefix');
  mallory = (await t.call('POST', '/v1/keys', { body: { name: 'mallory', role: 'user' } })).json.key;
  const alice = await t.call('POST', '/v1/boxes', { body: { id: `${p}web`, owner: 'alice', image: IMAGE } });
  assert.equal(alice.status, 201, alice.text);
  const own = await t.call('POST', '/v1/boxes', { key: mallory, body: { id: `${p}web2`, image: IMAGE } });
  assert.equal(own.status, 201, own.text);
});

after(async () => {
  await t?.dispose();
});

test("another owner's chosen id, as a prefix of the caller's own: 404 on every route, nothing of that box touched or shown", async () => {
  const aliceBox = await t.manager.get(`${p}web`);
  const before = (await aliceBox.info()).lastActive;
  const get = await t.call('GET', `/v1/boxes/${p}web`, { key: mallory });
  assert.equal(get.status, 404, 'a chosen id is a name: never a prefix of the caller’s web2');
  const beat = await t.call('POST', `/v1/boxes/${p}web/heartbeat`, { key: mallory, body: { active: true } });
  assert.equal(beat.status, 404);
  const vnc = await t.call('GET', `/v1/boxes/${p}web/vnc/`, { key: mallory });
  assert.equal(vnc.status, 404);
  assert.ok(!vnc.text.includes(aliceBox.containerId), "the answer shows nothing of alice's box");
  assert.equal((await aliceBox.info()).lastActive, before, "alice's box was not marked active");
});

test('a generated id by prefix: the route acts on the resolved box (VNC asks that box, the heartbeat marks it)', async () => {
  const made = await t.call('POST', '/v1/boxes', { key: mallory, body: { image: IMAGE } });
  assert.equal(made.status, 201, made.text);
  const id = made.json.id as string;
  const prefix = id.slice(0, -2);
  const beat = await t.call('POST', `/v1/boxes/${prefix}/heartbeat`, { key: mallory, body: { active: true, processCount: 7 } });
  assert.equal(beat.status, 204, beat.text);
  assert.equal((await t.manager.get(id).then((b) => b.info())).processCount, 7, 'the heartbeat reached the resolved box');
  const vnc = await t.call('GET', `/v1/boxes/${prefix}/vnc/`, { key: mallory });
  assert.equal(vnc.status, 503, vnc.text);
  assert.equal(vnc.json.error.details.reason, 'vnc_not_enabled', 'the resolved box was asked (it has no VNC)');
});
