/**
 * The console's Ports and Desktop tabs in a real browser against a real server and engine: a share
 * link made in the page opens the box's service in a fresh browser (no session), and once its
 * expiry passed a fresh browser is refused; the Desktop tab's frame shows the box's desktop drawn.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import type { Browser, Frame } from 'playwright-core';
import { launchBrowser, signedIn } from '../../src/testing/console.js';
import { testEnv } from '../../src/testing/env.js';
import { startTestServer } from '../../src/testing/server.js';
import type { TestServer } from '../../src/testing/server.js';
import { waitFor } from '../../src/testing/wait.js';

/** images/sbx-desktop/desktop.sh's root colour. */
const ROOT_RGB = [0x2a, 0x6f, 0x97] as const;

/** What a fresh browser (no session, no cookie) gets at `url`. */
async function visit(browser: Browser, url: string): Promise<{ status: number; text: string; finalUrl: string }> {
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    const res = await page.goto(url);
    return { status: res?.status() ?? 0, text: (await res?.text()) ?? '', finalUrl: page.url() };
  } finally {
    await context.close();
  }
}

describe('console ports and desktop', () => {
  let srv: TestServer;
  let browser: Browser | undefined;
  let web: string;
  let desk: string;

  before(async () => {
    srv = await startTestServer('console-ports');
    const [a, b] = await Promise.all([
      srv.call('POST', '/v1/boxes', { body: { image: testEnv.testImage, ports: [{ containerPort: 3000 }] } }),
      srv.call('POST', '/v1/boxes', { body: { image: testEnv.desktopImage, vnc: true } }),
    ]);
    assert.equal(a.status, 201, a.text);
    assert.equal(b.status, 201, b.text);
    web = a.json.id;
    desk = b.json.id;
  });
  after(async () => {
    await browser?.close();
    await srv?.dispose();
  });

  test('a share link opens the service in a fresh browser until it expires; then it is refused', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/#/boxes/${web}/ports`, srv.admin);
    try {
      await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: srv.url });
      const row = page.getByTestId('port-row');
      await row.waitFor();
      assert.match(await row.innerText(), /3000\/tcp/);

      // A link for an hour: the service answers a browser with no session.
      await page.getByLabel('Port', { exact: true }).fill('3000');
      await page.getByLabel('Expires after').selectOption({ label: '1 hour' });
      await page.getByTestId('share-create').click();
      const link = page.getByTestId('share-link').first();
      await link.waitFor();
      const url = await link.getByTestId('share-url').inputValue();
      assert.match(url, new RegExp(`^${srv.url}/v1/boxes/${web}/ports/3000/\\?sbx_token=`));
      const expiresAt = Date.parse((await link.getByTestId('share-expires').getAttribute('data-expires-at')) ?? '');
      assert.ok(expiresAt > Date.now() + 50 * 60_000, 'expires in about an hour');
      assert.equal(await link.getByTestId('share-open').getAttribute('target'), '_blank');
      assert.equal(await link.getByTestId('share-open').getAttribute('rel'), 'noopener noreferrer');
      await link.getByTestId('share-copy').click();
      await link.getByTestId('share-copy').filter({ hasText: 'Copied' }).waitFor();
      assert.equal(await page.evaluate<string>('navigator.clipboard.readText()'), url);
      const opened = await visit(browser, url);
      assert.equal(opened.status, 200);
      assert.match(opened.text, /sbx-test websocket echo on :3000/);
      assert.ok(!opened.finalUrl.includes('sbx_token'), 'the token left the address bar');

      // The shortest lifetime offered: works now, refused once its expiry (from the answer) passed.
      await page.getByLabel('Expires after').selectOption({ index: 0 });
      await page.getByTestId('share-create').click();
      await page.getByTestId('share-link').nth(1).waitFor();
      const short = page.getByTestId('share-link').first();
      const shortUrl = await short.getByTestId('share-url').inputValue();
      const shortExpiry = Date.parse((await short.getByTestId('share-expires').getAttribute('data-expires-at')) ?? '');
      assert.notEqual(shortUrl, url);
      assert.ok(shortExpiry < expiresAt);
      assert.equal((await visit(browser, shortUrl)).status, 200);
      await sleep(Math.max(0, shortExpiry - Date.now()) + 1000);
      const late = await visit(browser, shortUrl);
      assert.equal(late.status, 401, late.text);
      assert.match(late.text, /expired/);
      assert.deepEqual(errors, []);
    } finally {
      await context.close();
    }
  });

  test('the desktop tab shows the box desktop drawn; reconnect draws it again; a box without VNC says so', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const { page, context } = await signedIn(browser, `${srv.url}/console/#/boxes/${desk}/desktop`, srv.admin);
    try {
      const [r, g, b] = ROOT_RGB;
      type Drawn = { root: number; total: number; url: string };
      const drawn = async (frame: Frame): Promise<Drawn> =>
        waitFor<Drawn>(
          () =>
            frame
              .evaluate<Drawn | false>(
                `(() => {
                  const c = document.querySelector('#screen canvas');
                  if (document.body.dataset.vnc !== 'connected' || !c || c.width < 100) return false;
                  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                  let root = 0;
                  for (let i = 0; i < d.length; i += 4) if (d[i] === ${r} && d[i + 1] === ${g} && d[i + 2] === ${b}) root++;
                  return root > 0 ? { root, total: d.length / 4, url: location.href } : false;
                })()`,
              )
              .catch((): false => false), // navigating (the token's redirect)
          { what: 'the desktop drawn in the frame' },
        );
      const frameOf = async (): Promise<{ frame: Frame; src: string }> => {
        const el = page.getByTestId('desktop-frame');
        await el.waitFor();
        const frame = await (await el.elementHandle())!.contentFrame();
        assert.ok(frame);
        return { frame, src: (await el.getAttribute('src')) ?? '' };
      };

      const first = await frameOf();
      assert.match(first.src, new RegExp(`^${srv.url}/v1/boxes/${desk}/vnc/\\?sbx_token=`));
      const shown = await drawn(first.frame);
      assert.ok(shown.root / shown.total > 0.5, 'most of the screen is the root colour');
      assert.ok(!shown.url.includes('sbx_token'), 'the token left the frame address');
      const open = page.getByTestId('desktop-open');
      assert.equal(await open.getAttribute('target'), '_blank');
      assert.equal(await open.getAttribute('rel'), 'noopener noreferrer');

      await page.getByTestId('desktop-reconnect').click();
      await page.locator(`[data-testid="desktop-frame"]:not([src="${first.src}"])`).waitFor();
      await drawn((await frameOf()).frame);

      await page.goto(`${srv.url}/console/#/boxes/${web}/desktop`);
      await page.getByTestId('desktop-none').waitFor();
      assert.equal(await page.getByTestId('desktop-frame').count(), 0);
    } finally {
      await context.close();
    }
  });
});
