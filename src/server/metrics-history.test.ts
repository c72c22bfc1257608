/**
 * The metrics history's sampler, driven by hand: a real ServerMetrics registry over a fake
 * source, a manual clock, one tick per sample. Rates come from the counters' differences, latency
 * quantiles from the histogram's bucket differences, and the ring keeps only its capacity. Then
 * the route on a real server: samples arrive on their own, and closing the server stops the timer.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../testing/clock.js';
import { runProcess } from '../testing/run-process.js';
import { startTestServer } from '../testing/server.js';
import { waitFor } from '../testing/wait.js';
import type { WarmInfo } from '../sandbox/types.js';
import { MetricsHistory, Ring, histogramQuantile, readRegistry } from './metrics-history.js';
import type { MetricsHistoryJson } from './metrics-history.js';
import { ServerMetrics } from './metrics.js';

function fixture(opts: { intervalMs?: number; keepMs?: number } = {}) {
  const boxes: Array<{ pool: string; status: string }> = [];
  const warm: WarmInfo[] = [];
  const metrics = new ServerMetrics({
    boxes: async () => boxes,
    pools: async () => [{ name: 'local', connected: true }],
    cleanupStats: () => undefined,
    warm: async () => warm,
  });
  const clock = new ManualClock();
  const history = new MetricsHistory((atMs) => readRegistry(metrics.registry, atMs), { ...opts, now: clock.now });
  return { boxes, warm, metrics, clock, history };
}

describe('metrics history', () => {
  test('rates per minute from the counters across samples; boxes by status; latency quantiles of the interval only', async () => {
    const { boxes, warm, metrics, clock, history } = fixture({ intervalMs: 10_000 });
    const template: WarmInfo = { pool: 'local', image: 'sbx-base', key: 'k1', size: 2, ready: 2, hits: 0, misses: 0, replaced: 0, failures: 0 };
    warm.push(template);
    metrics.creates.inc({ pool: 'local' }, 5); // before the baseline: not counted
    await history.tick(); // the baseline
    assert.deepEqual(history.samples(), [], 'the first reading is only the baseline');

    clock.advance(10_000);
    metrics.creates.inc({ pool: 'local' }, 3);
    metrics.execs.inc({ transport: 'http', outcome: 'ok' }, 4);
    metrics.execs.inc({ transport: 'ws', outcome: 'ok' }, 1);
    for (let i = 0; i < 90; i++) metrics.requests.observe({ method: 'GET', route: '/a', status: '200' }, 0.003); // (0.0025, 0.005]
    for (let i = 0; i < 10; i++) metrics.requests.observe({ method: 'POST', route: '/b', status: '201' }, 0.4); // (0.25, 0.5]
    template.hits = 2;
    template.ready = 1;
    boxes.push({ pool: 'local', status: 'running' }, { pool: 'local', status: 'running' }, { pool: 'local', status: 'stopped' });
    await history.tick();

    const [first] = history.samples();
    assert.ok(first);
    assert.equal(first.at, new Date(clock.now()).toISOString());
    assert.equal(first.boxes, 3);
    assert.deepEqual(first.boxesByStatus, { running: 2, stopped: 1 });
    assert.equal(first.createsPerMin, 18, '3 creates in 10 s');
    assert.equal(first.execsPerMin, 30, '5 execs in 10 s, every transport');
    assert.equal(first.requestsPerMin, 600);
    assert.equal(first.warmHitsPerMin, 12);
    assert.equal(first.warmReady, 1);
    assert.ok(first.latencyMsP50! > 2.5 && first.latencyMsP50! <= 5, `p50 ${first.latencyMsP50}`);
    assert.ok(first.latencyMsP95! > 250 && first.latencyMsP95! <= 500, `p95 ${first.latencyMsP95}`);
    assert.ok(Math.abs(first.latencyMsMean! - 42.7) < 0.1, `mean ${first.latencyMsMean}`);

    // A quiet minute: rates fall to 0, latency is unknown (not the last interval's again), boxes stay.
    clock.advance(60_000);
    await history.tick();
    const second = history.samples()[1]!;
    assert.equal(second.createsPerMin, 0);
    assert.equal(second.execsPerMin, 0);
    assert.equal(second.latencyMsP50, null);
    assert.equal(second.latencyMsMean, null);
    assert.equal(second.boxes, 3);

    // Only the fast requests of the next interval count for its quantiles.
    clock.advance(30_000);
    for (let i = 0; i < 20; i++) metrics.requests.observe({ method: 'GET', route: '/a', status: '200' }, 0.003);
    metrics.creates.inc({ pool: 'other' }, 1);
    warm.length = 0; // the template went away: its hits do not count as a negative rate
    await history.tick();
    const third = history.samples()[2]!;
    assert.ok(third.latencyMsP95! <= 5, `p95 ${third.latencyMsP95}`);
    assert.equal(third.createsPerMin, 2);
    assert.equal(third.warmHitsPerMin, 0);

    assert.deepEqual(
      history.samples(Date.parse(second.at)).map((s) => s.at),
      [third.at],
      'after: only later samples',
    );
  });

  test('the ring keeps the last hour: capacity from the interval, oldest dropped first', async () => {
    const { metrics, clock, history } = fixture({ intervalMs: 10_000 });
    assert.equal(history.capacity, 360);
    await history.tick();
    for (let i = 1; i <= 400; i++) {
      clock.advance(10_000);
      metrics.creates.inc({ pool: 'local' }, i);
      await history.tick();
    }
    const samples = history.samples();
    assert.equal(samples.length, 360);
    assert.equal(samples[0]!.createsPerMin, 41 * 6, 'the oldest kept is the 41st');
    assert.equal(samples.at(-1)!.createsPerMin, 400 * 6);
    assert.deepEqual(
      samples.map((s) => s.at),
      [...samples.map((s) => s.at)].sort(),
      'oldest first',
    );

    const ring = new Ring<number>(3);
    for (const n of [1, 2, 3, 4, 5]) ring.push(n);
    assert.deepEqual(ring.toArray(), [3, 4, 5]);
    assert.equal(fixture({ intervalMs: 100 }).history.capacity, 3600, 'a small interval keeps at most 3600 samples');
  });

  test('histogramQuantile: interpolated within its bucket; the highest finite bound for +Inf; null when empty', () => {
    assert.equal(histogramQuantile(0.5, []), null);
    assert.equal(
      histogramQuantile(0.5, [
        [1, 0],
        [Infinity, 0],
      ]),
      null,
    );
    assert.equal(
      histogramQuantile(0.5, [
        [1, 0],
        [2, 10],
        [Infinity, 10],
      ]),
      1.5,
    );
    assert.equal(
      histogramQuantile(0.99, [
        [1, 5],
        [2, 5],
        [Infinity, 10],
      ]),
      2,
    );
  });

  test('on a server: samples arrive at the configured interval for any key, and close stops the sampler', async (t) => {
    const stop = t.mock.method(MetricsHistory.prototype, 'stop');
    const srv = await startTestServer('metrics-history', { serve: { metricsHistoryIntervalMs: 50 } });
    try {
      const user = (await srv.call('POST', '/v1/keys', { body: { name: 'hist-user', role: 'user' } })).json.key as string;
      assert.equal((await srv.call('GET', '/v1/metrics/history', { key: null })).status, 401);
      const got = await waitFor(
        async () => {
          const res = await srv.call('GET', '/v1/metrics/history', { key: user });
          assert.equal(res.status, 200, res.text);
          const body = res.json as MetricsHistoryJson;
          return body.samples.some((s) => s.requestsPerMin > 0) && body;
        },
        { what: 'a sample that counts the requests made' },
      );
      assert.equal(got.intervalMs, 50);
      const last = got.samples.at(-1)!;
      const later = await srv.call('GET', `/v1/metrics/history?after=${encodeURIComponent(last.at)}`, { key: user });
      assert.ok((later.json as MetricsHistoryJson).samples.every((s) => s.at > last.at));
      assert.equal((await srv.call('GET', '/v1/warm', { key: user })).status, 403);
      const warm = await srv.call('GET', '/v1/warm');
      assert.equal(warm.status, 200, warm.text);
      assert.deepEqual(warm.json, { templates: [] });
      assert.equal(stop.mock.callCount(), 0);
    } finally {
      await srv.dispose();
    }
    assert.equal(stop.mock.callCount(), 1, 'closing the server stops its sampler');
  });

  test('stop() ends the timer, and a started sampler does not keep the process alive', async () => {
    const { history } = fixture({ intervalMs: 10 });
    history.start();
    assert.equal(history.running, true);
    history.stop();
    assert.equal(history.running, false);
    // A process whose only work left is a started sampler exits by itself (after two ticks read).
    const script = `
      import { MetricsHistory } from './src/server/metrics-history.ts';
      let reads = 0;
      const h = new MetricsHistory(async () => { reads++; if (reads === 2) console.log('ticked'); return { atMs: Date.now(), boxesByStatus: {}, creates: 0, removes: 0, execs: 0, errors: 0, warmHits: 0, warmReady: 0, latency: { buckets: [], sum: 0, count: 0 } }; }, { intervalMs: 10 });
      h.start();
      await new Promise((r) => { const i = setInterval(() => { if (reads >= 2) { clearInterval(i); r(); } }, 5); });
    `;
    const { code, out } = await runProcess(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: process.cwd(),
      env: process.env,
    });
    assert.equal(code, 0, out);
    assert.match(out, /ticked/);
  });
});
