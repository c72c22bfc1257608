/**
 * The console's boxes list and box page in a real browser against a real server and engine:
 * create through the form (the page's own checks, then the API's refusal, then a box), the list
 * following boxes the API creates meanwhile, owner scoping (list and direct URL), stop and remove
 * with confirmation, the run form and its history, the logs tab (tail and follow), reading is not
 * use while the pages poll, and a phone-sized viewport.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { DockerRuntime } from '../../src/runtime/docker/runtime.js';
import { launchBrowser, signedIn } from '../../src/testing/console.js';
import { testEnv } from '../../src/testing/env.js';
import { IMAGE, startTestServer } from '../../src/testing/server.js';
import type { TestServer } from '../../src/testing/server.js';

interface BoxJson {
  id: string;
  containerId: string;
  status: string;
  lastActive: string;
  idleTimeoutMs: number;
  owner: string;
}

describe('console boxes', () => {
  let srv: TestServer;
  let browser: Browser | undefined;
  let alice: string;
  let bob: string;
  const made = new Set<string>();

  before(async () => {
    srv = await startTestServer('console-boxes');
    alice = (await srv.call('POST', '/v1/keys', { body: { name: 'alice', role: 'user' } })).json.key;
    bob = (await srv.call('POST', '/v1/keys', { body: { name: 'bob', role: 'user' } })).json.key;
  });
  after(async () => {
    await browser?.close();
    for (const id of made) await srv.call('DELETE', `/v1/boxes/${id}`);
    await srv?.dispose();
  });

  async function open(t: TestContext): Promise<Browser | undefined> {
    browser ??= await launchBrowser(t);
    return browser;
  }

  async function createBox(body: Record<string, unknown> = {}, key?: string): Promise<BoxJson> {
    const res = await srv.call('POST', '/v1/boxes', { body: { image: IMAGE, ...body }, ...(key ? { key } : {}) });
    assert.equal(res.status, 201, res.text);
    made.add(res.json.id);
    return res.json as BoxJson;
  }

  const row = (page: Page, id: string) => page.locator(`[data-testid="box-row"][data-box-id="${id}"]`);
  const boxNow = async (id: string): Promise<BoxJson> => (await srv.call('GET', `/v1/boxes/${id}`)).json as BoxJson;

  test('create through the form: the page checks what it can, shows the API refusal, then the box page shows the box running', async (t) => {
    if (!(await open(t))) return;
    const { page, context } = await signedIn(browser!, `${srv.url}/console/#/boxes`, srv.admin);
    await page.getByTestId('box-list').waitFor();
    await page.getByRole('button', { name: 'New box' }).click();
    const form = page.getByTestId('create-box');
    assert.equal(await form.getByLabel('Image', { exact: true }).inputValue(), 'sbx-base:latest');
    const boxesBefore = (await srv.call('GET', '/v1/boxes')).json.boxes.length;
    await form.getByLabel('Image', { exact: true }).fill(IMAGE);
    // Admins pick the pool from the server's pools.
    const pool = form.locator('select[name="pool"]');
    await pool.locator('option', { hasText: 'local' }).waitFor({ state: 'attached' });
    await pool.selectOption('local');
    await form.getByLabel('Idle timeout').fill('5');
    await form.getByLabel('Ports').fill('3000, 8080');
    await form.getByRole('button', { name: 'Create' }).click();
    assert.match(await form.getByTestId('error').innerText(), /Idle timeout: '5' is not a duration/);

    // What only the API knows to refuse: its own message.
    await form.getByLabel('Idle timeout').fill('10m');
    await form.getByLabel('Environment').fill('SBX_SECRET=1');
    await form.getByRole('button', { name: 'Create' }).click();
    assert.match(await form.getByTestId('error').innerText(), /env\.SBX_SECRET: .*\(invalid_argument\)/);
    assert.equal((await srv.call('GET', '/v1/boxes')).json.boxes.length, boxesBefore, 'nothing was created');

    await form.getByLabel('Environment').fill('MARK=from-the-form\n');
    await form.getByRole('button', { name: 'Create' }).press('Enter'); // keyboard-usable
    await page.waitForURL(/#\/boxes\/[^/?]+$/);
    const id = decodeURIComponent(/#\/boxes\/([^/?]+)$/.exec(page.url())![1]!);
    made.add(id);
    await page.getByTestId('box-info').waitFor();
    await page.getByTestId('box-status').filter({ hasText: 'running' }).waitFor();
    const box = await boxNow(id);
    assert.equal(box.status, 'running');
    assert.equal(box.idleTimeoutMs, 600_000);
    const echo = await srv.call('POST', `/v1/boxes/${id}/exec`, { body: { cmd: ['sh', '-c', 'echo $MARK'] } });
    assert.equal(echo.json.stdout.trim(), 'from-the-form');
    assert.match(await page.getByTestId('box-info').innerText(), /3000\/tcp/);
    await context.close();
  });

  test('the list shows a box the API creates meanwhile, without a reload', async (t) => {
    if (!(await open(t))) return;
    const { page, context } = await signedIn(browser!, `${srv.url}/console/#/boxes`, srv.admin);
    await page.getByTestId('box-list').waitFor();
    await page.evaluate("window.__sameDocument = 'yes'");
    const box = await createBox({ labels: { team: 'blue' } });
    await row(page, box.id).waitFor();
    assert.match(await row(page, box.id).getByTestId('box-status').innerText(), /running/);
    assert.equal(await page.evaluate<string>('window.__sameDocument'), 'yes', 'the page was not reloaded');
    // The text search covers labels, kept in the hash.
    await page.getByLabel('Search').fill('team=blue');
    await page.waitForURL(/q=team%3Dblue/);
    await row(page, box.id).waitFor();
    await page.getByLabel('Search').fill('team=red');
    await row(page, box.id).waitFor({ state: 'detached' });
    await page.getByLabel('Search').fill('');
    // Pause and resume from the row.
    await row(page, box.id).getByRole('button', { name: 'pause' }).click();
    await row(page, box.id).getByTestId('box-status').filter({ hasText: 'paused' }).waitFor();
    assert.equal((await boxNow(box.id)).status, 'paused');
    await row(page, box.id).getByRole('button', { name: 'resume' }).click();
    await row(page, box.id).getByTestId('box-status').filter({ hasText: 'running' }).waitFor();
    assert.equal((await boxNow(box.id)).status, 'running');
    await context.close();
  });

  test("a user key does not see another owner's box: not in its list, and its URL shows the API's not-found", async (t) => {
    if (!(await open(t))) return;
    const theirs = await createBox({}, alice);
    const mine = await createBox({}, bob);
    const { page, context } = await signedIn(browser!, `${srv.url}/console/#/boxes`, bob);
    await row(page, mine.id).waitFor();
    assert.equal(await row(page, theirs.id).count(), 0);
    assert.equal(await page.getByTestId('box-row').count(), 1);
    // Users have no owner filter (they see only their own).
    assert.equal(await page.getByTestId('box-filters').getByLabel('Owner').count(), 0);
    await page.goto(`${srv.url}/console/#/boxes/${theirs.id}`);
    const missing = page.getByTestId('box-missing');
    assert.match(await missing.getByTestId('error').innerText(), new RegExp(`box '${theirs.id}' not found.*\\(not_found\\)`));
    assert.equal(await page.getByTestId('box-info').count(), 0);
    await context.close();

    // An admin sees both, and the owner filter (read from the hash) keeps one owner's.
    const admin = await signedIn(browser!, `${srv.url}/console/#/boxes?owner=${theirs.owner}`, srv.admin);
    await row(admin.page, theirs.id).waitFor();
    assert.equal(await admin.page.getByTestId('box-filters').getByLabel('Owner').inputValue(), theirs.owner);
    assert.equal(await row(admin.page, mine.id).count(), 0);
    await admin.page.getByTestId('box-filters').getByLabel('Owner').selectOption('');
    await row(admin.page, mine.id).waitFor();
    await admin.context.close();
  });

  test('stop and remove with confirmation, from the box page and from the list: the API agrees, nothing is left running', async (t) => {
    if (!(await open(t))) return;
    const a = await createBox();
    const b = await createBox();
    const { page, context } = await signedIn(browser!, `${srv.url}/console/#/boxes/${a.id}`, srv.admin);
    const actions = page.getByTestId('box-actions');
    await actions.getByRole('button', { name: 'Snapshot' }).click();
    const note = await page.getByTestId('box-note').innerText();
    const snap = /Snapshot (snap-[0-9a-f]+) taken/.exec(note)?.[1];
    assert.ok(snap, note);
    assert.equal((await srv.call('GET', `/v1/snapshots/${snap}`)).json.sourceBoxId, a.id);
    t.after(async () => void (await srv.call('DELETE', `/v1/snapshots/${snap}`)));
    await actions.getByRole('button', { name: 'Stop' }).click();
    await page.getByTestId('box-status').filter({ hasText: 'stopped' }).waitFor();
    assert.equal((await boxNow(a.id)).status, 'stopped');
    await actions.getByRole('button', { name: 'Remove' }).click();
    assert.equal((await boxNow(a.id)).status, 'stopped', 'nothing removed before the confirmation');
    await actions.getByTestId('confirm').click();
    await page.waitForURL(/#\/boxes$/);
    assert.equal((await srv.call('GET', `/v1/boxes/${a.id}`)).status, 404);

    await row(page, b.id).getByRole('button', { name: 'stop' }).click();
    await row(page, b.id).getByTestId('box-status').filter({ hasText: 'stopped' }).waitFor();
    assert.equal((await boxNow(b.id)).status, 'stopped');
    await row(page, b.id).getByRole('button', { name: 'Remove' }).click();
    await row(page, b.id).getByTestId('confirm').click();
    await row(page, b.id).waitFor({ state: 'detached' });
    assert.equal((await srv.call('GET', `/v1/boxes/${b.id}`)).status, 404);

    const engine = new DockerRuntime(testEnv.engineAddr);
    try {
      for (const x of [a, b]) await assert.rejects(engine.inspect(x.containerId), (err: Error & { code?: string }) => err.code === 'not_found');
    } finally {
      await engine.close();
    }
    await context.close();
  });

  test('the run form runs a command, shows its output and exit code, and the history lists it', async (t) => {
    if (!(await open(t))) return;
    const box = await createBox();
    const { page, context } = await signedIn(browser!, `${srv.url}/console/#/boxes/${box.id}/history`, srv.admin);
    const form = page.getByTestId('run-form');
    await form.getByLabel('Run a command').fill('echo out-$((6*7)); echo err-line >&2; exit 3');
    await form.getByLabel('Run a command').press('Enter');
    assert.equal((await page.getByTestId('run-stdout').innerText()).trim(), 'out-42');
    assert.equal((await page.getByTestId('run-stderr').innerText()).trim(), 'err-line');
    assert.equal(await page.getByTestId('run-exit').innerText(), '3');
    const item = page.getByTestId('history-item').filter({ hasText: 'echo out-$((6*7))' });
    await item.getByTestId('history-exit').filter({ hasText: '3' }).waitFor();
    // The history is this session's: it is still there on the tab after going elsewhere and back.
    await page.getByRole('link', { name: 'Logs' }).click();
    await page.getByTestId('box-logs').waitFor();
    await page.getByRole('link', { name: 'History' }).click();
    await page.getByTestId('history-item').filter({ hasText: 'echo out-$((6*7))' }).waitFor();
    await context.close();
  });

  test("the logs tab shows the box's output, and follows it", async (t) => {
    if (!(await open(t))) return;
    const box = await createBox({
      cmd: ['sh', '-c', 'echo LOG-MARK-first; while [ ! -e /tmp/go ]; do sleep 0.2; done; echo LOG-MARK-after-go; exec sleep infinity'],
    });
    const { page, context } = await signedIn(browser!, `${srv.url}/console/#/boxes/${box.id}/logs`, srv.admin);
    const logs = page.getByTestId('box-logs');
    await logs.filter({ hasText: 'LOG-MARK-first' }).waitFor();
    await page.getByLabel('Follow').check();
    await page.getByTestId('logs-state').filter({ hasText: 'Following' }).waitFor();
    const go = await srv.call('POST', `/v1/boxes/${box.id}/exec`, { body: { cmd: ['touch', '/tmp/go'] } });
    assert.equal(go.status, 200, go.text);
    await logs.filter({ hasText: 'LOG-MARK-after-go' }).waitFor();
    await context.close();
  });

  test("CPU and memory come from each running box's stats, a few at a time; an error or null shows '—'", async (t) => {
    if (!(await open(t))) return;
    const good = await createBox();
    const bad = await createBox();
    const { page, context } = await signedIn(browser!, `${srv.url}/console/#/boxes`, srv.admin);
    // The stats route is another change's: its answers are stood in for here.
    let inFlight = 0;
    let most = 0;
    await page.route(/\/v1\/boxes\/[^/]+\/stats$/, async (route) => {
      most = Math.max(most, ++inFlight);
      const id = decodeURIComponent(new URL(route.request().url()).pathname.split('/')[3]!);
      try {
        if (id === good.id) await route.fulfill({ json: { cpuPercent: 12.5, memoryBytes: 50 * 1024 * 1024, memoryLimitBytes: 1024 * 1024 * 1024 } });
        else if (id === bad.id) await route.fulfill({ status: 500, json: { error: { code: 'internal', message: 'no stats' } } });
        else await route.fulfill({ json: { cpuPercent: null, memoryBytes: null, memoryLimitBytes: null } });
      } finally {
        inFlight--;
      }
    });
    await row(page, good.id).getByTestId('box-cpu').filter({ hasText: '12.5 %' }).waitFor();
    assert.equal(await row(page, good.id).getByTestId('box-memory').innerText(), '50 MiB / 1.0 GiB');
    assert.equal(await row(page, bad.id).getByTestId('box-cpu').innerText(), '—');
    assert.equal(await row(page, bad.id).getByTestId('box-memory').innerText(), '—');
    assert.ok(most <= 3, `at most 3 stats requests at once (saw ${most})`);
    await context.close();
  });

  test('reading is not use: the list and the box page poll, and the box stays as idle as it was', async (t) => {
    if (!(await open(t))) return;
    const box = await createBox();
    const before = (await boxNow(box.id)).lastActive;
    const { page, context } = await signedIn(browser!, `${srv.url}/console/#/boxes`, srv.admin);
    const isList = (r: { url(): string; request(): { method(): string } }) => r.request().method() === 'GET' && new URL(r.url()).pathname === '/v1/boxes';
    for (let i = 0; i < 3; i++) await page.waitForResponse(isList);
    await row(page, box.id).waitFor();
    // Its CPU and memory are asked too (whatever the answer: the route may not exist on this server).
    await page.waitForResponse((r) => r.request().method() === 'GET' && new URL(r.url()).pathname === `/v1/boxes/${box.id}/stats`);
    await page.goto(`${srv.url}/console/#/boxes/${box.id}/logs`);
    const isBox = (r: { url(): string; request(): { method(): string } }) =>
      r.request().method() === 'GET' && new URL(r.url()).pathname === `/v1/boxes/${box.id}`;
    for (let i = 0; i < 3; i++) await page.waitForResponse(isBox);
    await page.getByTestId('box-logs').waitFor();
    assert.equal((await boxNow(box.id)).lastActive, before, 'lastActive did not move');
    // The probe can see a use: an exec moves it.
    await srv.call('POST', `/v1/boxes/${box.id}/exec`, { body: { cmd: ['true'] } });
    assert.notEqual((await boxNow(box.id)).lastActive, before);
    await context.close();
  });

  test('phone viewport: the menu opens, the list and the box page are usable', async (t) => {
    if (!(await open(t))) return;
    const box = await createBox();
    // Signed in at the desktop size: signedIn waits for the signed-in name, which a phone shows behind the menu.
    const { page, context } = await signedIn(browser!, `${srv.url}/console/#/metrics`, srv.admin);
    await page.setViewportSize({ width: 390, height: 844 });
    const boxesLink = page.getByRole('navigation', { name: 'Sections' }).getByRole('link', { name: 'Boxes' });
    assert.equal(await boxesLink.isVisible(), false, 'the menu starts closed');
    await page.getByRole('button', { name: 'Menu' }).click();
    await boxesLink.click();
    await row(page, box.id).waitFor();
    const fits = 'document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1';
    assert.equal(await page.evaluate<boolean>(fits), true, 'the list page does not scroll sideways');
    const remove = await row(page, box.id).getByRole('button', { name: 'Remove' }).boundingBox();
    assert.ok(remove && remove.x + remove.width <= 390, `the row's actions are on screen (${JSON.stringify(remove)})`);
    await row(page, box.id).getByRole('link', { name: box.id }).click();
    // The box page, not the list it replaces (whose rows have a box-status each): a CI run read the list.
    await page.waitForURL(new RegExp(`#/boxes/${box.id}$`));
    await page.getByTestId('box-info').waitFor({ state: 'attached' });
    await page.getByTestId('box-status').filter({ hasText: 'running' }).waitFor();
    assert.equal(await page.evaluate<boolean>(fits), true, 'the box page does not scroll sideways');
    await page.getByRole('link', { name: 'History' }).click();
    await page.getByLabel('Run a command').fill('echo phone');
    await page.getByRole('button', { name: 'Run' }).click();
    assert.equal((await page.getByTestId('run-stdout').innerText()).trim(), 'phone');
    await context.close();
  });
});
