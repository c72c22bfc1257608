/**
 * The web console in a real browser, for its end-to-end tests: Debian's chromium driven by
 * playwright-core (src/testing/browser.ts finds both), one browser per test file, a fresh context
 * (own cookies and storage) per user, signed in through the console's own form.
 *
 * Every page records its console errors, uncaught exceptions and failed responses; `errors`
 * lets a test assert the console never showed one it did not expect.
 */
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { CHROMIUM, browserMissing } from './browser.js';

const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** A browser for this test file, or a skip (a failure under SBX_REQUIRE_BROWSER, as CI sets). */
export async function launchBrowser(t: TestContext): Promise<Browser | undefined> {
  const missing = await browserMissing();
  if (missing) {
    if (process.env['SBX_REQUIRE_BROWSER']) assert.fail(`SBX_REQUIRE_BROWSER is set but ${missing}`);
    t.skip(`no browser: ${missing}`);
    return undefined;
  }
  const { chromium } = await import('playwright-core');
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
}

export interface ConsolePage {
  context: BrowserContext;
  page: Page;
  /** Console errors, uncaught exceptions and failed responses (`HTTP 404 <url>`), in order. */
  errors: string[];
}

/** A fresh browser context on the console at `url`, not signed in. */
export async function openConsole(browser: Browser, url: string, opts: { viewport?: { width: number; height: number } } = {}): Promise<ConsolePage> {
  const context = await browser.newContext({ viewport: opts.viewport ?? { width: 1280, height: 800 }, acceptDownloads: true });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('console', (m) => {
    // Chromium aborts loads with ERR_NETWORK_CHANGED when a container starts (a veth appears): not the page's error.
    if (m.type() === 'error' && !/ERR_NETWORK_CHANGED/.test(m.text())) errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(`uncaught: ${e.message}`));
  page.on('response', (r) => {
    if (r.status() >= 400) errors.push(`HTTP ${r.status()} ${r.url()}`);
  });
  await page.goto(url, { waitUntil: 'load' });
  return { context, page, errors };
}

/** openConsole, then signed in with `key` through the sign-in form; resolves when the console shows who is signed in. */
export async function signedIn(browser: Browser, url: string, key: string, opts: { viewport?: { width: number; height: number } } = {}): Promise<ConsolePage> {
  const opened = await openConsole(browser, url, opts);
  await opened.page.getByLabel('API key').fill(key);
  await opened.page.getByRole('button', { name: 'Sign in' }).click();
  // Attached, not visible: on a phone-sized viewport it sits in the closed menu.
  await opened.page.getByTestId('whoami').waitFor({ state: 'attached' });
  return opened;
}
