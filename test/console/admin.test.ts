/**
 * The console's admin pages in a real browser against a real server and engine: keys (the secret
 * shown once and working, gone after a reload, revoked through the page), what a user key sees
 * (no admin entries, the API's forbidden message on their URLs), an image pulled with progress and
 * deleted, the local pool with its boxes, and the metrics charts fed by the server's history.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { testEnv } from '../../src/testing/env.js';
import { launchBrowser, signedIn } from '../../src/testing/console.js';
import { IMAGE, startTestServer } from '../../src/testing/server.js';
import type { TestServer } from '../../src/testing/server.js';

interface Sample {
  boxes: number;
  createsPerMin: number;
  execsPerMin: number;
  latencyMsP95: number | null;
}

/**
 * Collects the history samples the page receives (its first answer, then each newer one once per
 * interval); `until` resolves once each condition of `wanted` held in some sample.
 */
function watchSamples(page: Page): { until(wanted: Record<string, (s: Sample) => boolean>): Promise<void> } {
  const seen: Sample[] = [];
  const waiters = new Set<() => void>();
  page.on('response', (r) => {
    if (!r.url().includes('/v1/metrics/history') || r.status() !== 200) return;
    void r.json().then((body: { samples: Sample[] }) => {
      seen.push(...body.samples);
      for (const w of waiters) w();
    });
  });
  return {
    until(wanted) {
      const missing = () => Object.keys(wanted).filter((k) => !seen.some(wanted[k]!));
      return new Promise((resolve, reject) => {
        const check = () => {
          if (missing().length > 0) return;
          waiters.delete(check);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no history sample with ${missing().join(', ')}`));
        }, 60_000);
        waiters.add(check);
        check();
      });
    },
  };
}

describe('console admin pages', () => {
  let srv: TestServer;
  let browser: Browser | undefined;
  const boxes: string[] = [];

  before(async () => {
    // A sample every half second, so the metrics page sees boxes and execs soon after they happen.
    srv = await startTestServer('console-admin', { serve: { metricsHistoryIntervalMs: 500 } });
  });
  after(async () => {
    await browser?.close();
    for (const id of boxes) await srv?.call('DELETE', `/v1/boxes/${id}`);
    await srv?.dispose();
  });

  test('keys: a new key is shown once and works, is not shown after a reload, and stops working when revoked', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/#/keys`, srv.admin);
    await page.getByTestId('key-row').first().waitFor();
    await page.getByLabel('Name', { exact: true }).fill('console-made');
    await page.getByLabel('Role').selectOption('user');
    await page.getByLabel('Owner').fill('carol');
    await page.getByRole('button', { name: 'Create key' }).click();
    const secret = (await page.getByTestId('new-key-secret').innerText()).trim();
    assert.match(secret, /^sbxk_[0-9a-f]{16}_/);
    assert.match(await page.getByTestId('new-key').innerText(), /you will not see it again/i);
    await page.getByRole('button', { name: 'Copy' }).waitFor();

    const whoami = await srv.call('GET', '/v1/whoami', { key: secret });
    assert.equal(whoami.status, 200, whoami.text);
    assert.deepEqual([whoami.json.name, whoami.json.role, whoami.json.owner], ['console-made', 'user', 'carol']);
    const row = page.locator('[data-testid="key-row"][data-key-name="console-made"]');
    await row.waitFor();
    assert.ok(!(await row.innerText()).includes(secret.split('_')[2]!), 'the list never shows the secret');

    await page.reload();
    await row.waitFor();
    assert.equal(await page.getByTestId('new-key-secret').count(), 0, 'the secret is not shown again');
    assert.ok(!(await page.content()).includes(secret), 'nor anywhere in the page');

    await row.getByRole('button', { name: 'Revoke' }).click();
    await row.getByTestId('confirm').click();
    await row.waitFor({ state: 'detached' });
    assert.equal((await srv.call('GET', '/v1/whoami', { key: secret })).status, 401, 'the revoked key stops working');
    assert.deepEqual(errors, []);
    await context.close();
  });

  test("a user key: no Keys or Pools entries, and their URLs show the API's forbidden message", async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const user = (await srv.call('POST', '/v1/keys', { body: { name: 'console-user', role: 'user' } })).json.key as string;
    const { page, context } = await signedIn(browser, `${srv.url}/console/`, user);
    const nav = page.getByRole('navigation', { name: 'Sections' });
    await nav.getByRole('link', { name: 'Boxes' }).waitFor();
    assert.equal(await nav.getByRole('link', { name: 'Keys' }).count(), 0);
    assert.equal(await nav.getByRole('link', { name: 'Pools & nodes' }).count(), 0);
    for (const section of ['keys', 'pools', 'images']) {
      await page.goto(`${srv.url}/console/#/${section}`);
      assert.match(await page.getByTestId('error').first().innerText(), /admin.*\(forbidden\)/i, section);
    }
    await context.close();
  });

  test('images: pull with progress through the page, then it is listed; delete it', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const ref = testEnv.pullImage;
    // Not on the engine before, so the pull has layers to fetch (other suites do the same).
    await srv.call('DELETE', `/v1/images?ref=${encodeURIComponent(ref)}&force=true`);
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/#/images`, srv.admin);
    await page.getByTestId('image-row').first().waitFor();
    await page.getByLabel('Image reference').fill(ref);
    await page.getByRole('button', { name: 'Pull', exact: true }).click();
    await page.getByTestId('pull-progress').waitFor();
    await page.getByTestId('pull-done').waitFor({ timeout: 120_000 });
    assert.ok((await page.getByTestId('pull-layer').count()) >= 1, 'the layers and their progress are shown');
    assert.match(await page.getByTestId('pull-layer').first().innerText(), /complete|exists/i);
    assert.match(await page.getByTestId('pull-bytes').innerText(), /of \d/, 'bytes done of the total');
    const row = page.locator(`[data-testid="image-row"][data-image~="${ref}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), /\d+(\.\d)? (B|KiB|MiB)/, 'its size');

    await row.getByRole('button', { name: 'Delete' }).click();
    await row.getByTestId('confirm').click();
    await row.waitFor({ state: 'detached' });
    const exists = await srv.call('GET', `/v1/images/exists?ref=${encodeURIComponent(ref)}`);
    assert.equal(exists.json.exists, false);
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('pools: the local pool connected, with its box count', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const made = await srv.call('POST', '/v1/boxes', { body: { image: IMAGE } });
    assert.equal(made.status, 201, made.text);
    boxes.push(made.json.id);
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/#/pools`, srv.admin);
    const pool = page.locator('[data-testid="pool"][data-pool="local"]');
    await pool.waitFor();
    assert.equal((await pool.getByTestId('pool-connected').innerText()).trim(), 'connected');
    const listed = (await srv.call('GET', '/v1/pools')).json.pools[0].boxes as number;
    assert.ok(listed >= 1);
    assert.equal((await pool.getByTestId('pool-boxes').innerText()).trim(), String(listed));
    assert.match(await page.getByText('No remote nodes').innerText(), /No remote nodes/);
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('metrics: charts drawn from the history include the boxes created and the execs run', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    for (let i = 0; i < 2; i++) {
      const made = await srv.call('POST', '/v1/boxes', { body: { image: IMAGE } });
      assert.equal(made.status, 201, made.text);
      boxes.push(made.json.id);
    }
    for (let i = 0; i < 3; i++) {
      const ran = await srv.call('POST', `/v1/boxes/${boxes[1]}/exec`, { body: { cmd: ['true'] } });
      assert.equal(ran.status, 200, ran.text);
    }
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/`, srv.admin);
    const samples = watchSamples(page);
    await page.getByRole('link', { name: 'Metrics' }).click();
    for (const id of ['boxes', 'rates', 'latency', 'warm']) await page.locator(`[data-testid="chart-${id}"] canvas`).waitFor();
    // The page keeps asking for new samples: these wait for one taken after the boxes and execs.
    await samples.until({
      'every box': (s) => s.boxes === boxes.length,
      'the creates': (s) => s.createsPerMin > 0,
      'the execs': (s) => s.execsPerMin > 0,
    });
    // What the charts were given: the peaks beside them are of the same samples.
    await page
      .getByTestId('peak-boxes')
      .filter({ hasText: new RegExp(`^${boxes.length}$`) })
      .waitFor();
    await page.getByTestId('peak-createsPerMin').filter({ hasText: /[1-9]/ }).waitFor();
    await page.getByTestId('peak-execsPerMin').filter({ hasText: /[1-9]/ }).waitFor();
    await page.getByTestId('peak-latencyMsP95').filter({ hasText: /[1-9]/ }).waitFor();
    const drawn = Number(await page.getByTestId('chart-rates').getAttribute('data-drawn'));
    assert.ok(drawn >= 1, 'the chart was given the samples');
    // Live: more samples arrive without a reload.
    await page.locator(`[data-testid="chart-rates"]:not([data-drawn="${drawn}"])`).waitFor();
    assert.deepEqual(errors, []);
    await context.close();
  });
});
