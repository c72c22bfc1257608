/**
 * The console's Terminal tab in a real browser against a real server and engine: a shell in the
 * box through the exec WebSocket, read from xterm's screen; the box sees the terminal's size
 * change with the window; a second terminal in a tab of its own; `exit` shows the end and the
 * exec history has it; a refused socket shows the API's error; the page's CSP holds (no
 * violation in its console). Also measures keystroke echo (printed for the bench).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Browser } from 'playwright-core';
import { launchBrowser, signedIn } from '../../src/testing/console.js';
import { ACTIVE_PANE, activePane, measureEcho, screenLines, typeLine, waitForFocus, waitForLine } from '../../src/testing/console-terminal.js';
import { testEnv } from '../../src/testing/env.js';
import { startTestServer } from '../../src/testing/server.js';
import type { TestServer } from '../../src/testing/server.js';
import { waitFor } from '../../src/testing/wait.js';

const CSP_VIOLATION = /Content Security Policy|Refused to (apply|execute|load|evaluate)/i;

describe('console terminal', () => {
  let srv: TestServer;
  let browser: Browser | undefined;
  let boxId: string;

  before(async () => {
    srv = await startTestServer('console-terminal');
    const res = await srv.call('POST', '/v1/boxes', { body: { image: testEnv.baseImage } });
    assert.equal(res.status, 201, res.text);
    boxId = res.json.id;
  });
  after(async () => {
    await browser?.close();
    await srv?.dispose();
  });

  test('type a command and read its output; resize; a second terminal; exit; no CSP violation', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/#/boxes/${boxId}/terminal`, srv.admin);
    try {
      await activePane(page).locator('.xterm-rows').waitFor();
      await page.locator(`${ACTIVE_PANE}[data-state="open"]`).waitFor();
      await waitForFocus(page);
      await typeLine(page, 'echo $((6*7))');
      await waitForLine(page, /^42$/);

      // The window shrinks: the terminal fits itself to it and the box's PTY gets the new size.
      await typeLine(page, 'echo A$(stty size)Z');
      const [, rows1, cols1] = await waitForLine(page, /^A(\d+) (\d+)Z$/);
      assert.equal((await screenLines(page)).length, Number(rows1), 'the box has the size the page shows');
      await page.setViewportSize({ width: 900, height: 600 });
      // The terminal refits (and sends the resize) before what is typed next.
      await waitFor(async () => (await screenLines(page)).length < Number(rows1), { what: 'the terminal to refit' });
      await typeLine(page, 'echo B$(stty size)Z');
      const [, rows2, cols2] = await waitForLine(page, /^B(\d+) (\d+)Z$/);
      assert.ok(Number(cols2) < Number(cols1), `narrower: ${cols1} → ${cols2} columns`);
      assert.ok(Number(rows2) < Number(rows1), `shorter: ${rows1} → ${rows2} rows`);

      const echo = await measureEcho(page, { count: 50 });
      console.log(`terminal keystroke echo in the browser: p50 ${echo.p50Ms.toFixed(1)} ms, p90 ${echo.p90Ms.toFixed(1)} ms, max ${echo.maxMs.toFixed(1)} ms`);

      // A second terminal: its own tab and socket, the first one hidden but still there.
      await page.getByTestId('terminal-new').click();
      await page.getByTestId('terminal-pane').nth(1).and(page.locator(ACTIVE_PANE)).waitFor();
      await page.locator(`${ACTIVE_PANE}[data-state="open"]`).waitFor();
      await waitForFocus(page);
      await typeLine(page, 'echo tab$((2+3))');
      await waitForLine(page, /^tab5$/);
      assert.equal(await page.getByTestId('terminal-pane').count(), 2);
      assert.equal(await page.getByTestId('terminal-pane').nth(0).getAttribute('data-state'), 'open');

      // exit: the second shows its end; the first is still usable.
      await typeLine(page, 'exit 3');
      await page.getByTestId('terminal-pane').nth(1).locator('[data-testid="terminal-status"]', { hasText: 'exited with code 3' }).waitFor();
      await page.getByTestId('terminal-tab').nth(0).click();
      await page.getByTestId('terminal-pane').nth(0).and(page.locator(ACTIVE_PANE)).waitFor();
      await waitForFocus(page);
      await typeLine(page, 'echo first$((1+1))');
      await waitForLine(page, /^first2$/);

      // Closing a tab ends its shell: one terminal left.
      await page.getByTestId('terminal-close').nth(1).click();
      assert.equal(await page.getByTestId('terminal-pane').count(), 1);

      assert.deepEqual(
        errors.filter((e) => CSP_VIOLATION.test(e)),
        [],
        'no CSP violation',
      );
      assert.deepEqual(errors, []);

      // Both terminals are in the exec history: the one that ended with its code, the first one
      // ended (no code) when the page left the Terminal tab. The history is the page's memory.
      await page.goto(`${srv.url}/console/#/boxes/${boxId}/history`);
      const terminals = page.getByTestId('history-item').filter({ hasText: 'terminal' });
      await terminals.nth(1).getByTestId('history-exit').filter({ hasText: '—' }).waitFor();
      assert.deepEqual(await terminals.getByTestId('history-exit').allInnerTexts(), ['3', '—']);
      assert.equal(await page.evaluate<number>('sessionStorage.length + localStorage.length'), 0, 'nothing in storage');
    } finally {
      await context.close();
    }
  });

  test("a refused socket shows the API's error", async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const res = await srv.call('POST', '/v1/boxes', { body: { image: testEnv.baseImage } });
    assert.equal(res.status, 201, res.text);
    const gone = res.json.id as string;
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/#/boxes/${gone}/terminal`, srv.admin);
    try {
      await page.locator(`${ACTIVE_PANE}[data-state="open"]`).waitFor();
      // The box is removed behind the page's back; the page still shows it, and a new terminal is refused.
      assert.equal((await srv.call('DELETE', `/v1/boxes/${gone}`)).status, 204);
      await page.getByTestId('terminal-new').click();
      const error = page.locator(ACTIVE_PANE).getByTestId('error');
      await error.waitFor();
      assert.match(await error.innerText(), /not found.*\(not_found\)/i);
      assert.equal(await page.locator(ACTIVE_PANE).getAttribute('data-state'), 'error');
      assert.deepEqual(
        errors.filter((e) => CSP_VIOLATION.test(e)),
        [],
      );
    } finally {
      await context.close();
    }
  });

  test('a box that is not running gets no shell until asked; then the API says why not', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const res = await srv.call('POST', '/v1/boxes', { body: { image: testEnv.baseImage } });
    assert.equal(res.status, 201, res.text);
    const stopped = res.json.id as string;
    assert.equal((await srv.call('POST', `/v1/boxes/${stopped}/stop`)).status, 200);
    const { page, context } = await signedIn(browser, `${srv.url}/console/#/boxes/${stopped}/terminal`, srv.admin);
    try {
      await page.getByTestId('terminal-none').waitFor();
      assert.match(await page.getByTestId('terminal-none').innerText(), /stopped/);
      assert.equal(await page.getByTestId('terminal-pane').count(), 0);
      await page.getByTestId('terminal-new').click();
      const error = page.locator(ACTIVE_PANE).getByTestId('error');
      await error.waitFor();
      assert.match(await error.innerText(), /\((conflict|not_available)\)/);
    } finally {
      await context.close();
      await srv.call('DELETE', `/v1/boxes/${stopped}`);
    }
  });
});
