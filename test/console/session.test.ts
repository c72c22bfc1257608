/**
 * The console's sign-in in a real browser against a real server: a key becomes a session (the key
 * is kept nowhere in the page), a reload keeps it, sign-out ends it on the server too, a bad key
 * shows the API's message, and a page of another origin cannot act with the session (CSRF).
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { Browser } from 'playwright-core';
import { launchBrowser, openConsole, signedIn } from '../../src/testing/console.js';
import { testEnv } from '../../src/testing/env.js';
import { startTestServer } from '../../src/testing/server.js';
import type { TestServer } from '../../src/testing/server.js';

describe('console sign-in', () => {
  let srv: TestServer;
  let browser: Browser | undefined;

  before(async () => {
    srv = await startTestServer('console-session');
  });
  after(async () => {
    await browser?.close();
    await srv?.dispose();
  });

  test('sign in, reload, sign out: the session ends on the server, and the key is stored nowhere', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/`, srv.admin);
    assert.match(await page.getByTestId('whoami').innerText(), /admin/);
    const stored = await page.evaluate<string>('JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage }) + document.cookie');
    assert.ok(!stored.includes(srv.admin), 'the key is not in storage or a readable cookie');
    const cookies = await context.cookies();
    const session = cookies.find((c) => c.name === 'sbx_session');
    assert.ok(session, 'the session cookie is set');
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, 'Strict');
    assert.equal(session.path, '/v1');
    const token = cookies.find((c) => c.name === 'sbx_console');
    assert.ok(token, "the token's cookie is set");
    assert.equal(token.path, '/console/', "the token is the console page's alone");
    assert.equal(token.sameSite, 'Strict');

    await page.reload();
    await page.getByTestId('whoami').waitFor();
    // `/` leads to the console, signed in still.
    await page.goto(`${srv.url}/`);
    await page.getByTestId('whoami').waitFor();
    assert.equal(new URL(page.url()).pathname, '/console/');

    await page.getByTestId('sign-out').click();
    await page.getByLabel('API key').waitFor();
    assert.deepEqual(
      (await context.cookies()).filter((c) => c.name.startsWith('sbx_')),
      [],
      'sign-out clears both cookies',
    );
    // The same cookie and token, sent again by hand, open nothing: the server ended the session.
    const res = await fetch(`${srv.url}/v1/whoami`, { headers: { cookie: `sbx_session=${session.value}`, 'x-sbx-session': token.value } });
    assert.equal(res.status, 401);
    assert.deepEqual(
      errors.filter((e) => !/\/v1\/session|401/.test(e)),
      [],
    );
    await context.close();
  });

  test("a box's page on the path-based proxy gets neither the token nor a service worker", async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const made = await srv.call('POST', '/v1/boxes', { body: { image: testEnv.testImage, ports: [{ containerPort: 3000 }] } });
    assert.equal(made.status, 201, made.text);
    const boxId = made.json.id as string;
    const { page, context } = await signedIn(browser, `${srv.url}/console/`, srv.admin);
    try {
      const signed = await srv.call('POST', `/v1/boxes/${boxId}/proxy-url`, { body: { port: 3000, signed: true } });
      assert.equal(signed.status, 200, signed.text);
      // The box's page, in the console's own tab (a pasted share link): same origin as the console.
      await page.goto(signed.json.url);
      assert.match(await page.content(), /sbx-test/);
      assert.ok(new URL(page.url()).pathname.startsWith(`/v1/boxes/${boxId}/ports/3000/`));
      const seen = await page.evaluate<string>('document.cookie + "|" + JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage })');
      const token = (await context.cookies()).find((c) => c.name === 'sbx_console')!.value;
      assert.ok(!seen.includes(token), `the box page sees no token: ${seen}`);
      // With the cookie alone (which the browser sends), it opens nothing.
      const status = await page.evaluate<number>("fetch('/v1/whoami').then((r) => r.status)");
      assert.equal(status, 401);
      // A service worker script is refused on every path of the origin (sbx serves none).
      const sw = await page.evaluate<string>(
        "navigator.serviceWorker.register('sw.js', { scope: './' }).then(() => 'registered', (e) => 'refused: ' + e.message)",
      );
      assert.match(sw, /^refused/);
      const direct = await fetch(`${srv.url}/v1/boxes/${boxId}/ports/3000/sw.js`, {
        headers: { 'service-worker': 'script', authorization: `Bearer ${srv.admin}` },
      });
      assert.equal(direct.status, 403);
    } finally {
      await context.close();
      await srv.call('DELETE', `/v1/boxes/${boxId}`);
    }
  });

  test("a bad key shows the API's message", async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const { page, context } = await openConsole(browser, `${srv.url}/console/`);
    await page.getByLabel('API key').fill('sbxk_0000000000000000_notakeynotakeynotakeynotakeynotakeynotakey0');
    await page.getByRole('button', { name: 'Sign in' }).click();
    assert.match(await page.getByTestId('error').innerText(), /API key is not valid.*\(unauthorized\)/);
    await context.close();
  });

  test('a page of another origin cannot create a box with the session (fetch and form)', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const { page, context } = await signedIn(browser, `${srv.url}/console/`, srv.admin);
    // The attacker's page: another port on the same host, so the same site (SameSite does not stop it).
    let formPosted = false;
    const evil = createServer((req, res) => {
      if (req.url === '/done') formPosted = true;
      res.setHeader('content-type', 'text/html');
      res.end(`<!doctype html><body>
        <form id="f" method="POST" action="${srv.url}/v1/boxes" enctype="text/plain"><input name='{"image":"sbx-base:latest","x":"' value='"}'></form>
        <script>
          fetch(${JSON.stringify(srv.url + '/v1/boxes')}, { method: 'POST', credentials: 'include', mode: 'no-cors',
            headers: { 'content-type': 'text/plain' }, body: JSON.stringify({ image: 'sbx-base:latest' }) })
            .then(() => { document.title = 'fetched'; }, () => { document.title = 'fetched'; });
        </script></body>`);
    });
    await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve));
    try {
      const evilUrl = `http://127.0.0.1:${(evil.address() as AddressInfo).port}/`;
      const attack = await context.newPage();
      const refused: number[] = [];
      attack.on('response', (r) => {
        if (r.url().startsWith(`${srv.url}/v1/boxes`)) refused.push(r.status());
      });
      await attack.goto(evilUrl);
      await attack.waitForFunction("document.title === 'fetched'");
      const [formAnswer] = await Promise.all([attack.waitForResponse(`${srv.url}/v1/boxes`), attack.evaluate("document.getElementById('f').submit()")]);
      assert.ok([401, 403, 415].includes(formAnswer.status()), `the form post was refused (${formAnswer.status()})`);
      assert.ok(refused.length >= 1 && refused.every((s) => s === 401 || s === 403 || s === 415), `refused: ${refused.join(',')}`);
      assert.equal(formPosted, false);
      assert.equal((await srv.manager.list()).length, 0, 'no box was created');
      // The console itself still works: the attack did not end or use the session.
      await page.reload();
      await page.getByTestId('whoami').waitFor();
    } finally {
      await new Promise<void>((resolve) => evil.close(() => resolve()));
      await context.close();
    }
  });
});
