/**
 * The memory-releasing pause over the wire: POST /v1/boxes/:id/pause {memory}, the SDK's
 * box.pause({ memory: 'release' }) and `sbx pause --release-memory`, against a real server and
 * engine with a gVisor pool; the answer says pausedMemory; bad bodies are 400 naming the field, a
 * runc pool 503 not_available.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Sbx, SbxError } from '../client/index.js';
import { runSbx } from '../testing/cli.js';
import { testEnv } from '../testing/env.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

let t: TestServer;
const home = mkdtempSync(join(tmpdir(), 'sbx-pause-memory-home-'));
before(async () => {
  t = await startTestServer('pausemem', {
    config: {
      pools: [
        { name: 'local', addr: testEnv.engineAddr },
        { name: 'gvisor', addr: testEnv.engineAddr, ociRuntime: testEnv.gvisorRuntime },
      ],
    },
  });
});
after(async () => {
  await t.dispose();
  rmSync(home, { recursive: true, force: true });
});

/** A shell that keeps a random nonce in its memory only; `report` asks for it. */
const HOLDER = [
  'sh',
  '-c',
  'n=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d " \\n"); trap \'echo $n > /tmp/n\' USR1; echo $$ > /tmp/pid; while :; do sleep 0.05; done',
];
const REPORT = [
  'sh',
  '-c',
  'until [ -s /tmp/pid ]; do sleep 0.01; done; rm -f /tmp/n; kill -USR1 $(cat /tmp/pid); until [ -s /tmp/n ]; do sleep 0.01; done; cat /tmp/n',
];

test('HTTP and the SDK: pause with memory released answers pausedMemory released; a use restores the same process', async () => {
  const sbx = new Sbx({ url: t.url, apiKey: t.admin });
  await using box = await sbx.create({ image: IMAGE, pool: 'gvisor', cmd: HOLDER });
  const nonce = (await box.exec(REPORT)).stdout;
  assert.match(nonce, /^[0-9a-f]{24}\n$/);

  const r = await t.call('POST', `/v1/boxes/${box.id}/pause`, { body: { memory: 'release' } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.status, 'paused');
  assert.equal(r.json.pausedMemory, 'released');
  assert.equal((await box.exec(REPORT)).stdout, nonce, 'restored on use: the same process');
  assert.equal((await box.info()).pausedMemory, null);

  await box.pause({ memory: 'release' });
  assert.equal(box.status, 'paused');
  assert.equal((await box.info()).pausedMemory, 'released');
  await box.resume();
  assert.equal((await box.exec(REPORT)).stdout, nonce);

  // A plain pause (no body, as before) holds the memory.
  const held = await t.call('POST', `/v1/boxes/${box.id}/pause`);
  assert.equal(held.status, 200, held.text);
  assert.equal(held.json.pausedMemory, 'held');
  // Thawed before its removal: force-removing a frozen gVisor box fails now and then ("PID … is
  // zombie"), a matter of gVisor under the freezer, not of checkpoints.
  await box.resume();
});

test('the CLI: sbx pause --release-memory, sbx info says so; sbx pools add --pause-memory', async () => {
  const box = await t.manager.create({ image: IMAGE, pool: 'gvisor', owner: 'admin', cmd: HOLDER });
  try {
    const opts = { url: t.url, apiKey: t.admin, home };
    const run = await runSbx(['pause', '--release-memory', '--json', box.id], opts);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), [{ id: box.id, ok: true, status: 'paused' }]);
    assert.equal((await box.info()).pausedMemory, 'released');
    const info = await runSbx(['info', box.id], opts);
    assert.match(info.stdout, /paused \(memory released: checkpointed to disk\)/);
    const added = await runSbx(['pools', 'add', 'gvisor2', 'local', '--oci-runtime', testEnv.gvisorRuntime, '--pause-memory', 'release', '--json'], opts);
    assert.equal(added.code, 0, added.stderr);
    assert.equal((JSON.parse(added.stdout) as { pauseMemory?: string }).pauseMemory, 'release');
    await t.manager.removePool('gvisor2');
  } finally {
    await box.remove();
  }
});

test('bad bodies are 400 naming the field; a runc pool is 503 not_available and the box runs on', async () => {
  const box = await t.manager.create({ image: IMAGE, owner: 'admin' });
  try {
    for (const body of [{ memory: 'drop' }, { memory: true }, { memroy: 'release' }]) {
      const r = await t.call('POST', `/v1/boxes/${box.id}/pause`, { body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.code, 'invalid_argument');
    }
    const r = await t.call('POST', `/v1/boxes/${box.id}/pause`, { body: { memory: 'release' } });
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.error.code, 'not_available');
    assert.equal(r.json.error.details.reason, 'checkpoint_unsupported');
    const sdk = new Sbx({ url: t.url, apiKey: t.admin });
    await assert.rejects((await sdk.get(box.id)).pause({ memory: 'release' }), (e) => e instanceof SbxError && e.code === 'not_available');
    assert.equal((await box.info()).status, 'running');
  } finally {
    await box.remove();
  }
});
