/**
 * A real headless browser for tests: Debian's chromium driven by playwright-core. One call
 * launches it with a fresh profile, opens a URL, waits for a condition in the page, takes a
 * screenshot, runs an inspection, and always closes the browser and deletes the profile, with the
 * page's console errors in the result (or in the error it throws).
 *
 * Chromium is SBX_CHROMIUM, else /usr/bin/chromium (Debian's; playwright never downloads one).
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export const CHROMIUM = process.env['SBX_CHROMIUM'] ?? '/usr/bin/chromium';

/** Flags that keep a headless chromium quiet and offline but for the page (no sandbox: root in CI). */
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** The part of playwright's Page the tests use (playwright-core may be loaded by path, untyped). */
export interface BrowserPage {
  goto(url: string, opts?: { waitUntil?: 'load' | 'domcontentloaded'; timeout?: number }): Promise<{ status(): number } | null>;
  evaluate<T>(fn: string | ((arg: never) => T), arg?: unknown): Promise<T>;
  screenshot(opts: { path: string; fullPage?: boolean }): Promise<Buffer>;
  on(event: 'console', cb: (msg: { type(): string; text(): string }) => void): void;
  on(event: 'pageerror', cb: (err: Error) => void): void;
  on(event: 'response', cb: (res: { status(): number; url(): string }) => void): void;
}

interface BrowserContext {
  pages(): BrowserPage[];
  newPage(): Promise<BrowserPage>;
  addCookies(cookies: BrowserCookie[]): Promise<void>;
  close(): Promise<void>;
}

interface Playwright {
  chromium: {
    launchPersistentContext(dir: string, opts: Record<string, unknown>): Promise<BrowserContext>;
  };
}

export interface BrowserCookie {
  name: string;
  value: string;
  url: string;
}

/** Why no browser test can run here, or undefined when chromium and playwright-core are there. */
export async function browserMissing(): Promise<string | undefined> {
  if (!existsSync(CHROMIUM)) return `no chromium at ${CHROMIUM} (scripts/engine.sh installs Debian's chromium)`;
  try {
    await loadPlaywright();
  } catch (err) {
    return `playwright-core cannot be loaded: ${(err as Error).message}`;
  }
  return undefined;
}

async function loadPlaywright(): Promise<Playwright> {
  const mod = (await import('playwright-core')) as unknown as Playwright & { default?: Playwright };
  return mod.chromium ? mod : mod.default!;
}

/**
 * Polls `expr` from here rather than with waitForFunction, which evaluates it with eval inside the
 * page, and a page with a CSP (the VNC viewer) refuses that; an evaluate through the protocol is not.
 */
async function holds(page: BrowserPage, expr: string, until: number): Promise<boolean> {
  for (;;) {
    if (await page.evaluate(expr).catch(() => false)) return true;
    if (performance.now() > until) return false;
    await sleep(50);
  }
}

export interface PageRunOptions<T> {
  url: string;
  /** A page expression that becomes truthy when the page is ready (polled every 50 ms). */
  waitFor: string;
  timeoutMs?: number;
  /** Where the screenshot goes (its directory is made); none when omitted. */
  screenshot?: string;
  viewport?: { width: number; height: number };
  cookies?: BrowserCookie[];
  /** Runs once the condition holds, before the screenshot; its value is the run's `result`. */
  inspect?: (page: BrowserPage) => Promise<T>;
}

export interface PageRun<T> {
  result: T;
  /** The page's console errors, uncaught exceptions and failed responses (`HTTP 404 <url>`), in order. */
  consoleErrors: string[];
  /** Loads chromium aborted because the machine's network changed (a container started). */
  networkChanged: number;
  /** From the start of the navigation to the load event, and to the condition holding. */
  loadMs: number;
  readyMs: number;
  /** The HTTP status of the page itself. */
  status: number;
}

/**
 * Opens `url` in a fresh headless chromium and waits for `waitFor`; the browser is closed and its
 * profile deleted whatever happens. A condition that never holds throws, naming the console errors.
 *
 * @example
 * const run = await openPage({ url, waitFor: "document.body.dataset.vnc === 'connected'", screenshot: '.build/artifacts/vnc.png' });
 */
export async function openPage<T = undefined>(opts: PageRunOptions<T>): Promise<PageRun<T>> {
  const pw = await loadPlaywright();
  const profile = await mkdtemp(join(tmpdir(), 'sbx-chromium-'));
  const consoleErrors: string[] = [];
  let networkChanged = 0;
  const timeout = opts.timeoutMs ?? 30_000;
  let context: BrowserContext | undefined;
  try {
    context = await pw.chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: ARGS,
      viewport: opts.viewport ?? { width: 1280, height: 800 },
    });
    if (opts.cookies?.length) await context.addCookies(opts.cookies);
    const page = context.pages()[0] ?? (await context.newPage());
    page.on('console', (m) => {
      // Chromium aborts loads with ERR_NETWORK_CHANGED whenever a container starts on the machine
      // (a veth appears); the viewer retries them. Counted apart, not as the page's errors.
      if (m.type() === 'error' && /ERR_NETWORK_CHANGED/.test(m.text())) networkChanged++;
      else if (m.type() === 'error') consoleErrors.push(m.text());
    });
    page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));
    // The console says only "Failed to load resource"; this names it.
    page.on('response', (r) => {
      if (r.status() >= 400) consoleErrors.push(`HTTP ${r.status()} ${r.url()}`);
    });
    const t0 = performance.now();
    const res = await page.goto(opts.url, { waitUntil: 'load', timeout });
    const loadMs = performance.now() - t0;
    if (!(await holds(page, opts.waitFor, t0 + timeout))) {
      const state = await page.evaluate('document.title + " | " + (document.body ? document.body.innerText.slice(0, 300) : "")').catch(() => '?');
      throw new Error(`${opts.waitFor} did not hold within ${timeout} ms (page: ${String(state)}; console errors: ${JSON.stringify(consoleErrors)})`);
    }
    const readyMs = performance.now() - t0;
    const result = (opts.inspect ? await opts.inspect(page) : undefined) as T;
    if (opts.screenshot) {
      await mkdir(dirname(opts.screenshot), { recursive: true });
      await page.screenshot({ path: opts.screenshot });
    }
    return { result, consoleErrors, networkChanged, loadMs, readyMs, status: res?.status() ?? 0 };
  } finally {
    await context?.close().catch(() => undefined);
    await rm(profile, { recursive: true, force: true });
  }
}
