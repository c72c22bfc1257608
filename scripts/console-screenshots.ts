/**
 * Takes the console's screenshots for docs/console.md and the README (docs/console/*.png): a real
 * server over the local engine, a few boxes (a shell, a web service, a desktop, a stopped one), a
 * workspace with files, some execs for the charts; headless chromium at 1280×800 and one phone view.
 * Everything it creates is removed at the end.
 *
 * Usage: npx tsx scripts/console-screenshots.ts   (after the test harness: engine, images, console build)
 */
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { CHROMIUM } from '../src/testing/browser.js';
import { ACTIVE_PANE, typeLine, waitForFocus, waitForLine } from '../src/testing/console-terminal.js';
import { testEnv } from '../src/testing/env.js';
import { startTestServer } from '../src/testing/server.js';

const OUT = fileURLToPath(new URL('../docs/console/', import.meta.url));

async function main(): Promise<void> {
  await mkdir(OUT, { recursive: true });
  const srv = await startTestServer('screens', { serve: { metricsHistoryIntervalMs: 2000 } });
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu'] });
  try {
    const must = async (method: string, path: string, body?: unknown) => {
      const res = await srv.call(method, path, body === undefined ? {} : { body });
      if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${res.text}`);
      return res.json;
    };
    await must('POST', '/v1/keys', { name: 'alice', role: 'user' });
    await must('POST', '/v1/keys', { name: 'ci-runner', role: 'user', owner: 'ci' });
    const ws = await must('POST', '/v1/workspaces', { name: 'notes' });
    const shell = await must('POST', '/v1/boxes', { image: testEnv.baseImage, workspaceId: ws.id, labels: { app: 'agent' } });
    const web = await must('POST', '/v1/boxes', { image: testEnv.testImage, ports: [{ containerPort: 3000 }], labels: { app: 'web' } });
    const desktop = await must('POST', '/v1/boxes', { image: testEnv.desktopImage, vnc: true });
    const stopped = await must('POST', '/v1/boxes', { image: testEnv.baseImage, owner: 'ci', cmd: ['sh', '-c', 'echo build ok; exit 0'] }).catch(() =>
      must('POST', '/v1/boxes', { image: testEnv.baseImage, owner: 'ci' }),
    );
    await must('POST', `/v1/boxes/${stopped.id}/stop`);
    for (let i = 0; i < 6; i++) await must('POST', `/v1/boxes/${shell.id}/exec`, { cmd: ['sh', '-c', `echo line ${i} >> ${shell.mountPath}/log.txt`] });
    await must('POST', `/v1/boxes/${shell.id}/exec`, {
      cmd: ['sh', '-c', `mkdir -p ${shell.mountPath}/src && printf 'print("hi")\\n' > ${shell.mountPath}/src/main.py`],
    });

    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    const shot = (name: string) => page.screenshot({ path: `${OUT}${name}.png` });
    await page.goto(`${srv.url}/console/`);
    await page.getByLabel('API key').waitFor();
    await shot('sign-in');
    await page.getByLabel('API key').fill(srv.admin);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByTestId('box-list').waitFor();
    await page.locator('[data-testid="box-row"]').nth(3).waitFor();
    await settle(page);
    await shot('boxes');

    await page.goto(`${srv.url}/console/#/boxes/${shell.id}/terminal`);
    await page.locator(`${ACTIVE_PANE}[data-state="open"]`).waitFor();
    await waitForFocus(page);
    await typeLine(page, `cd ${shell.mountPath} && ls -la && cat log.txt | head -3 && uname -sm`);
    await waitForLine(page, /^line 2$/);
    await shot('terminal');

    await page.goto(`${srv.url}/console/#/boxes/${shell.id}/files`);
    await page.getByTestId('file-row').first().waitFor();
    await settle(page);
    await shot('files');

    await page.goto(`${srv.url}/console/#/boxes/${web.id}/ports`);
    await page.getByTestId('ports-published').waitFor();
    await page.getByTestId('share-create').click();
    await page.getByTestId('share-link').first().waitFor();
    await shot('ports');

    await page.goto(`${srv.url}/console/#/boxes/${desktop.id}/desktop`);
    const frame = page.frameLocator('[data-testid="desktop-frame"]');
    await frame.locator('canvas').waitFor();
    await waitUntil(
      page,
      `(() => { const f = document.querySelector('[data-testid="desktop-frame"]'); return f && f.contentDocument && f.contentDocument.body.dataset.vnc === 'connected'; })()`,
    );
    await settle(page, 1500);
    await shot('desktop');

    await page.goto(`${srv.url}/console/#/workspaces`);
    await page.getByTestId('workspace-row').first().waitFor();
    await settle(page);
    await shot('workspaces');

    await page.goto(`${srv.url}/console/#/images`);
    await page.getByTestId('image-row').first().waitFor();
    await shot('images');

    await page.goto(`${srv.url}/console/#/pools`);
    await page.getByTestId('pool').first().waitFor();
    await shot('pools');

    await page.goto(`${srv.url}/console/#/keys`);
    await page.getByTestId('key-row').first().waitFor();
    await shot('keys');

    await page.goto(`${srv.url}/console/#/metrics`);
    await waitUntil(page, `Number(document.querySelector('[data-testid="chart-rates"]')?.dataset.drawn ?? 0) >= 3`, 60_000);
    await shot('metrics');

    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${srv.url}/console/#/boxes`);
    await page.locator('[data-testid="box-row"]').nth(3).waitFor();
    await settle(page);
    await shot('phone-boxes');
    await context.close();
    console.error(`screenshots in ${OUT}`);
  } finally {
    await browser.close();
    await srv.dispose();
  }
}

/** Polls a page expression until it holds (the page's CSP forbids waitForFunction's eval). */
async function waitUntil(page: Page, expr: string, timeoutMs = 30_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await page.evaluate<boolean>(expr).catch(() => false))) {
    if (Date.now() > until) throw new Error(`${expr} did not hold within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Lets the polled lists and stats fill in before a picture (pictures only: never in a test). */
async function settle(page: Page, ms = 2500): Promise<void> {
  await page.waitForTimeout(ms);
}

await main();
