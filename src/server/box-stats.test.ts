/**
 * A box's CPU and memory use over the wire: GET /v1/boxes/:id/stats, the SDK's box.stats() and
 * sbx.stats(id), `sbx stats`, and the library's box.stats(), against a real server and engine.
 * Reading stats is not use, and the owner scoping of every box route applies.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Sbx, SbxError } from '../client/index.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { ContainerStats, Runtime } from '../runtime/types.js';
import { testEnv } from '../testing/env.js';
import type { BoxStats } from '../client/index.js';
import { runSbx } from '../testing/cli.js';
import { IMAGE, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';
import { waitFor } from '../testing/wait.js';
import { STATS_CONCURRENCY } from './routes-box-stats.js';

const MiB = 1024 * 1024;
const KEYS = ['cpuPercent', 'diskUsedBytes', 'memoryBytes', 'memoryCacheBytes', 'memoryLimitBytes', 'pids', 'sampledAt', 'status'];
const home = mkdtempSync(join(tmpdir(), 'sbx-box-stats-'));
let t: TestServer;
let sdk: Sbx;

before(async () => {
  t = await startTestServer('stats');
  sdk = new Sbx({ url: t.url, apiKey: t.admin });
});
after(async () => {
  await t?.dispose();
  rmSync(home, { recursive: true, force: true });
});

const cli = (args: string[]) => runSbx(args, { url: t.url, apiKey: t.admin, home });

async function httpStats(id: string, key?: string): Promise<BoxStats> {
  const r = await t.call('GET', `/v1/boxes/${id}/stats`, key === undefined ? {} : { key });
  assert.equal(r.status, 200, r.text);
  return r.json as BoxStats;
}

test('a busy box: CPU above 0 once a sample saw it, memory and its limit, the same shape from HTTP, SDK, CLI and the library', async () => {
  await using box = await sdk.create({ image: IMAGE, memory: 96 * MiB, cmd: ['sh', '-c', 'while :; do :; done'] });
  // Each read is one engine sample (about 1 s on Docker): poll until one saw the loop run.
  const busy = await waitFor(
    async () => {
      const s = await httpStats(box.id);
      return (s.cpuPercent ?? 0) > 0 && s;
    },
    { what: 'a CPU rate above 0 for a busy box', intervalMs: 0 },
  );
  assert.equal(busy.status, 'running');
  assert.ok(busy.memoryBytes! > 0, `memoryBytes ${busy.memoryBytes}`);
  assert.equal(busy.memoryLimitBytes, 96 * MiB);
  assert.ok(busy.pids! >= 1);
  assert.ok(Math.abs(Date.parse(busy.sampledAt) - Date.now()) < 3_600_000, busy.sampledAt);
  assert.deepEqual(Object.keys(busy).sort(), KEYS);

  const fromBox = await box.stats();
  const fromId = await sdk.stats(box.id);
  const lib = await (await t.manager.get(box.id)).stats();
  const cliJson = await cli(['stats', box.id, '--json']);
  assert.equal(cliJson.code, 0, cliJson.stderr);
  const fromCli = JSON.parse(cliJson.stdout) as BoxStats;
  for (const s of [fromBox, fromId, lib, fromCli]) {
    assert.deepEqual(Object.keys(s).sort(), KEYS);
    assert.equal(s.status, 'running');
    assert.equal(s.memoryLimitBytes, 96 * MiB);
    assert.equal(typeof s.cpuPercent, 'number');
    assert.equal(typeof s.memoryBytes, 'number');
  }
  const text = await cli(['stats', box.id]);
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, /CPU:\s+\d+\.\d%/);
  assert.match(text.stdout, /Memory:\s+[\d.]+ (B|KiB|MiB) \/ 96 MiB/);
});

test('an idle box has numbers; reading them is not use (lastActive stays), a paused box stays paused', async () => {
  await using box = await sdk.create({ image: IMAGE });
  const was = (await box.info()).lastActive;
  // A clock tick past the last use, so that a read that touched the box would show.
  await waitFor(() => Date.now() > Date.parse(was) + 5, { what: 'the clock to move past lastActive' });
  const idle = await httpStats(box.id);
  assert.equal(typeof idle.cpuPercent, 'number');
  assert.equal(typeof idle.memoryBytes, 'number');
  assert.equal(typeof idle.memoryLimitBytes, 'number');
  await sdk.stats(box.id);
  assert.equal((await box.info()).lastActive, was, 'stats moved lastActive');

  await t.manager.get(box.id).then((b) => b.pause());
  const paused = await httpStats(box.id);
  assert.equal(paused.status, 'paused');
  assert.ok(paused.memoryBytes! > 0, 'a paused box keeps its memory');
  assert.equal((await box.info()).status, 'paused', 'stats resumed the box');
});

test('a stopped box answers its status and nulls; unknown ids and other owners get 404', async () => {
  await using box = await sdk.create({ image: IMAGE });
  await box.stop();
  const stopped = await httpStats(box.id);
  assert.deepEqual(
    { ...stopped, sampledAt: '' },
    {
      status: 'stopped',
      cpuPercent: null,
      memoryBytes: null,
      memoryLimitBytes: null,
      pids: null,
      memoryCacheBytes: null,
      diskUsedBytes: null,
      sampledAt: '',
    },
  );
  assert.equal((await box.info()).status, 'stopped', 'stats started the box');
  const text = await cli(['stats', box.id]);
  assert.match(text.stdout, /CPU:\s+-\n/);

  const unknown = await t.call('GET', '/v1/boxes/sb-nosuchbox/stats');
  assert.equal(unknown.status, 404);
  assert.equal(unknown.json.error.code, 'not_found');
  const eve = (await t.server.keys.create({ name: 'eve', role: 'user' })).key;
  const other = await t.call('GET', `/v1/boxes/${box.id}/stats`, { key: eve });
  assert.equal(other.status, 404);
  assert.equal(other.json.error.code, 'not_found');
  await assert.rejects(new Sbx({ url: t.url, apiKey: eve }).stats(box.id), (e) => e instanceof SbxError && e.code === 'not_found');
  const cliOther = await cli(['stats', box.id, '--api-key', eve]);
  assert.notEqual(cliOther.code, 0);
  assert.match(cliOther.stderr, /not found/);
  // Her own box she reads.
  const mine = await new Sbx({ url: t.url, apiKey: eve }).create({ image: IMAGE });
  try {
    assert.equal((await httpStats(mine.id, eve)).status, 'running');
  } finally {
    await mine.remove();
  }
});

test('reads of many boxes at once: at most STATS_CONCURRENCY engine calls in flight, reads of one box share one call', async () => {
  // The pool's runtime, its stats calls counted (everything else passed through).
  const inner = new DockerRuntime(testEnv.engineAddr);
  let calls = 0;
  let inFlight = 0;
  let most = 0;
  const stats = async (id: string): Promise<ContainerStats> => {
    calls++;
    most = Math.max(most, ++inFlight);
    try {
      return await inner.stats(id);
    } finally {
      inFlight--;
    }
  };
  const counted = new Proxy(inner, {
    get: (target, key) => {
      if (key === 'stats') return stats;
      const v = Reflect.get(target, key) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as Runtime;
  const s = await startTestServer('stats-many', { config: { pools: [{ name: 'local', runtime: counted }] } });
  try {
    const boxes = await Promise.all(Array.from({ length: STATS_CONCURRENCY + 2 }, () => s.manager.create({ image: IMAGE })));
    // Two reads of each box, all sent at once (as two console tabs polling the list).
    const answers = await Promise.all(boxes.flatMap((b) => [0, 1].map(() => s.call('GET', `/v1/boxes/${b.id}/stats`))));
    for (const r of answers) assert.equal(r.status, 200, r.text);
    assert.ok(most <= STATS_CONCURRENCY, `${most} engine stats calls in flight at once`);
    assert.ok(calls < answers.length, `${calls} engine calls for ${answers.length} reads: reads of one box in flight share one`);
  } finally {
    await s.dispose();
    await inner.close();
  }
});
