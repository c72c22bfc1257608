/**
 * e2b's sandbox metrics (`sandbox.getMetrics`, GET /sandboxes/:id/metrics) against a real server
 * and engine with the e2b SDK 2.51 and 2.31: samples of the engine's stats over time, a first
 * one at once, the start/end window, disk written, owners; sampling is no use and leaves a paused
 * sandbox paused.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as e2b from 'e2b';
import * as e2bV231 from 'e2b-v231';
import { testEnv } from '../../../testing/env.js';
import { startTestServer } from '../../../testing/server.js';
import type { TestServer } from '../../../testing/server.js';
import { waitFor } from '../../../testing/wait.js';

const SDKS = [
  { name: 'e2b 2.51', mod: e2b as unknown as typeof e2b },
  { name: 'e2b 2.31', mod: e2bV231 as unknown as typeof e2b },
];
/** Short, so "over time" takes a moment here; the server's default is e2b's 5 s. */
const INTERVAL_MS = 250;

let t: TestServer;
let alice: string;
let bob: string;

before(async () => {
  t = await startTestServer('e2b-metrics', { serve: { e2b: { templates: { base: testEnv.e2bImage }, metricsIntervalMs: INTERVAL_MS } } });
  alice = (await t.server.keys.create({ name: 'alice', role: 'user' })).e2bKey;
  bob = (await t.server.keys.create({ name: 'bob', role: 'user' })).e2bKey;
});
after(async () => {
  await t?.dispose();
});

function opts(apiKey: string) {
  return { apiUrl: `${t.url}/e2b/api`, sandboxUrl: `${t.url}/e2b/envd`, apiKey, requestTimeoutMs: 60_000 };
}

for (const { name, mod } of SDKS) {
  const { Sandbox, SandboxNotFoundError } = mod;

  describe(`${name} getMetrics against sbx`, () => {
    test('a fresh sandbox has a sample at once; samples follow over time, with the disk it wrote', async () => {
      const sbx = await Sandbox.create('base', opts(alice));
      try {
        const first = await sbx.getMetrics();
        assert.ok(first.length >= 1, 'a sample right after create');
        const m = first[0]!;
        assert.ok(m.timestamp instanceof Date && Math.abs(m.timestamp.getTime() - Date.now()) < 60_000);
        assert.ok(Number.isInteger(m.cpuCount) && m.cpuCount >= 1);
        assert.ok(m.cpuUsedPct >= 0);
        assert.ok(m.memUsed > 0 && m.memTotal >= m.memUsed, JSON.stringify(m));
        assert.equal(m.diskTotal, 0, 'no disk size per sandbox');
        // 4 MiB written: the next samples say so.
        await sbx.commands.run('head -c 4194304 /dev/urandom > /home/user/blob');
        const later = await waitFor(
          async () => {
            const all = await Sandbox.getMetrics(sbx.sandboxId, opts(alice));
            return all.length >= 3 && all.at(-1)!.diskUsed >= 4 * 1024 * 1024 ? all : undefined;
          },
          { what: 'three samples, the last with the 4 MiB written' },
        );
        const times = later.map((x) => x.timestamp.getTime());
        assert.deepEqual(
          times,
          [...times].sort((a, b) => a - b),
          'in time order',
        );
        // The window, in whole seconds as the SDK sends it.
        assert.deepEqual(await sbx.getMetrics({ start: new Date(Date.now() + 3_600_000) }), []);
        assert.deepEqual(await sbx.getMetrics({ end: new Date(times[0]! - 3_600_000) }), []);
        // A whole second (the 2.51 SDK rounds to the nearest one): the samples taken within it.
        const lastSecond = new Date(Math.floor(times.at(-1)! / 1000) * 1000);
        const windowed = await sbx.getMetrics({ start: lastSecond, end: lastSecond });
        assert.ok(windowed.length >= 1 && windowed.every((x) => Math.floor(x.timestamp.getTime() / 1000) === Math.floor(times.at(-1)! / 1000)));
        await assert.rejects(Sandbox.getMetrics(sbx.sandboxId, opts(bob)), SandboxNotFoundError);
      } finally {
        await sbx.kill();
      }
      await assert.rejects(Sandbox.getMetrics(sbx.sandboxId, opts(alice)), SandboxNotFoundError);
    });

    test('reading and sampling are no use: a paused sandbox stays paused and is not sampled', async () => {
      const [paused, running] = await Promise.all([Sandbox.create('base', opts(alice)), Sandbox.create('base', opts(alice))]);
      try {
        const box = await t.manager.get(paused.sandboxId);
        const activeBefore = (await box.info()).lastActive;
        await Sandbox.getMetrics(paused.sandboxId, opts(alice));
        await Sandbox.getMetrics(paused.sandboxId, opts(alice));
        assert.equal((await box.info()).lastActive, activeBefore, 'reading metrics does not touch the sandbox');
        assert.equal(await paused.pause(), true);
        const whenPaused = (await Sandbox.getMetrics(paused.sandboxId, opts(alice))).length;
        // Passes go on (the running sandbox gets three more samples) while the paused one gets none.
        const base = (await running.getMetrics()).length;
        await waitFor(async () => (await running.getMetrics()).length >= base + 3, { what: 'three more sampling passes' });
        assert.equal((await Sandbox.getMetrics(paused.sandboxId, opts(alice))).length, whenPaused);
        assert.equal((await t.manager.get(paused.sandboxId)).status, 'paused');
        assert.equal((await paused.getInfo()).state, 'paused');
      } finally {
        await Promise.all([paused.kill(), running.kill()]);
      }
    });
  });
}

test('the wire: start and end must be whole seconds', async () => {
  const sbx = await e2b.Sandbox.create('base', opts(alice));
  try {
    const res = await fetch(`${t.url}/e2b/api/sandboxes/${sbx.sandboxId}/metrics?start=soon`, { headers: { 'x-api-key': alice } });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { message: string }).message, /start/);
    const ok = await fetch(`${t.url}/e2b/api/sandboxes/${sbx.sandboxId}/metrics?start=0&end=99999999999`, { headers: { 'x-api-key': alice } });
    const body = (await ok.json()) as Record<string, unknown>[];
    assert.ok(body.length >= 1);
    assert.deepEqual(Object.keys(body[0]!).sort(), [
      'cpuCount',
      'cpuUsedPct',
      'diskTotal',
      'diskUsed',
      'memCache',
      'memTotal',
      'memUsed',
      'timestamp',
      'timestampUnix',
    ]);
    assert.equal(body[0]!['timestampUnix'], Math.floor(Date.parse(body[0]!['timestamp'] as string) / 1000));
  } finally {
    await sbx.kill();
  }
});
