/**
 * Console rows (issue 29, docs/console.md): the web console in headless chromium against
 * `sbx serve` in this process.
 *
 * - `Console Echo`: terminal keystroke echo — a key pressed in the console's Terminal tab until the
 *   character is on its screen, timed inside the page (src/testing/console-terminal.ts measureEcho:
 *   keydown → xterm's rows show it) — beside the same PTY echo over the same exec WebSocket from a
 *   Node client (a byte sent → its echo read). The ratio is what the browser, xterm.js and the
 *   page's frame add. Goal: the console ≤ 20 ms p50.
 * - `Console Load`: the console's first load in a fresh browser context (cold cache) for a signed-in
 *   tab, from navigation to the boxes list on screen; its bytes transferred (every response's
 *   headers and encoded body: gzip). Goals: ≤ 300 KB and ≤ 1 s. Figures, no peer.
 *
 * Needs Debian's chromium and playwright-core (src/testing/browser.ts); the rows say so without.
 * Run alone: `npx tsx bench/rows/console.ts [--quick]`.
 */
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import type { Browser, BrowserContext } from 'playwright-core';
import { WebSocket } from 'ws';
import { serve } from '../../src/server/index.js';
import type { ServerHandle } from '../../src/server/index.js';
import { CHROMIUM, browserMissing } from '../../src/testing/browser.js';
import { ACTIVE_PANE, measureEcho, waitForFocus } from '../../src/testing/console-terminal.js';
import { BASE_IMAGE, BENCH_LABEL } from '../core/identity.js';
import { notRun, pairResult } from '../core/result.js';
import type { RowResult } from '../core/result.js';
import type { RunContext } from '../core/run-rows.js';
import { summarize } from '../core/stats.js';
import { runStandalone } from '../core/standalone.js';
import { PoolSubject } from '../subjects/pool.js';

const ECHO = {
  name: 'Console Echo',
  group: 'latency' as const,
  note: 'a key in the console terminal → on its screen, vs the same PTY echo over the exec WebSocket from Node',
};
const LOAD = { name: 'Console Load', group: 'host' as const, note: 'first load, cold cache, signed in: navigation → the boxes list on screen' };
export const CONSOLE_ROW_NAMES: readonly string[] = [ECHO.name, LOAD.name];

const GOAL_ECHO_MS = 20;
const GOAL_LOAD_BYTES = 300 * 1024;
const GOAL_LOAD_MS = 1000;

interface Session {
  cookie: string;
  token: string;
}

async function signIn(url: string, key: string): Promise<Session> {
  const res = await fetch(`${url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ apiKey: key }) });
  if (!res.ok) throw new Error(`sign-in: HTTP ${res.status} ${await res.text()}`);
  const cookie = /^sbx_session=([^;]*)/.exec(res.headers.get('set-cookie') ?? '')?.[1] ?? '';
  return { cookie, token: ((await res.json()) as { sessionToken: string }).sessionToken };
}

/** A fresh context signed in as the console would be: the session's two cookies (src/server/sessions.ts). */
async function sessionContext(browser: Browser, url: string, s: Session): Promise<BrowserContext> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await context.addCookies([
    { name: 'sbx_session', value: s.cookie, url: `${url}/v1/`, httpOnly: true, sameSite: 'Strict' },
    { name: 'sbx_console', value: s.token, url: `${url}/console/`, sameSite: 'Strict' },
  ]);
  return context;
}

/** PTY echo over the exec WebSocket from Node: one letter sent on stdin → seen on stdout, `count` times. */
async function rawEcho(url: string, key: string, boxId: string, count: number): Promise<number[]> {
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}/v1/boxes/${boxId}/exec/ws?cmd=sh&tty=true&cols=120&rows=40`, ['sbx.v1'], {
    headers: { authorization: `Bearer ${key}` },
  });
  let seen = '';
  let waiter: (() => void) | undefined;
  ws.on('message', (data: Buffer) => {
    if (data[0] !== 1) return;
    seen += data.subarray(1).toString();
    waiter?.();
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  const until = (want: string) =>
    new Promise<void>((resolve) => {
      waiter = () => {
        if (seen.includes(want)) resolve();
      };
      waiter();
    });
  const stdin = (s: string) => ws.send(Buffer.concat([Buffer.from([0]), Buffer.from(s)]));
  stdin('# ');
  await until('# ');
  const samples: number[] = [];
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  for (let i = 0; i < count; i++) {
    const letter = letters[i % letters.length]!;
    seen = '';
    const t0 = performance.now();
    stdin(letter);
    await until(letter);
    samples.push(performance.now() - t0);
  }
  ws.close();
  return samples;
}

async function echoRow(browser: Browser, url: string, key: string, s: Session, boxId: string, count: number): Promise<RowResult> {
  const started = performance.now();
  const context = await sessionContext(browser, url, s);
  try {
    const page = await context.newPage();
    await page.goto(`${url}/console/#/boxes/${boxId}/terminal`);
    await page.locator(`${ACTIVE_PANE}[data-state="open"]`).waitFor();
    await page.locator(`${ACTIVE_PANE} .xterm-rows`).waitFor();
    await waitForFocus(page);
    const console = await measureEcho(page, { count });
    const raw = await rawEcho(url, key, boxId, count);
    const result = pairResult(
      ECHO,
      ['console', 'ws'],
      { console: console.samples.map((ms) => ({ ms, cpuMs: 0 })), ws: raw.map((ms) => ({ ms, cpuMs: 0 })) },
      performance.now() - started,
    );
    result.note = `${ECHO.note}; goal console ≤ ${GOAL_ECHO_MS} ms p50: ${console.p50Ms <= GOAL_ECHO_MS ? 'met' : 'not met'} (${console.p50Ms.toFixed(1)} ms)`;
    return result;
  } finally {
    await context.close();
  }
}

async function loadRow(browser: Browser, url: string, s: Session, runs: number): Promise<RowResult> {
  const started = performance.now();
  const times: number[] = [];
  let bytes = 0;
  for (let i = 0; i < runs; i++) {
    const context = await sessionContext(browser, url, s);
    try {
      const page = await context.newPage();
      const sizes: Array<Promise<number>> = [];
      page.on('requestfinished', (req) =>
        sizes.push(
          req.sizes().then(
            (z) => z.responseHeadersSize + z.responseBodySize,
            () => 0,
          ),
        ),
      );
      const t0 = performance.now();
      await page.goto(`${url}/console/#/boxes`);
      await page.getByTestId('box-list').waitFor();
      times.push(performance.now() - t0);
      const total = (await Promise.all(sizes)).reduce((a, b) => a + b, 0);
      bytes = Math.max(bytes, total);
    } finally {
      await context.close();
    }
  }
  const ms = summarize(times).p50;
  const met = bytes <= GOAL_LOAD_BYTES && ms <= GOAL_LOAD_MS;
  return {
    ...LOAD,
    note: `${LOAD.note}: ${(bytes / 1024).toFixed(0)} KiB transferred (gzip), ${ms.toFixed(0)} ms p50 of ${runs}; goal ≤ 300 KB and ≤ 1 s: ${met ? 'met' : 'not met'}`,
    status: 'ok',
    sides: [],
    ratio: null,
    wallMs: performance.now() - started,
    figures: { console_load_bytes: bytes, console_load_ms_p50: Math.round(ms) },
  };
}

export async function runConsoleRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; /** Row names to run (CONSOLE_ROW_NAMES); default all. */ only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  const rows = [ECHO, LOAD].filter((r) => !opts.only || opts.only.has(r.name));
  if (rows.length === 0) return [];
  const missing = await browserMissing();
  if (missing) return rows.map((r) => notRun(r, 'unavailable', missing));
  const lib = await PoolSubject.open('lib', {}, opts);
  let server: ServerHandle | undefined;
  let browser: Browser | undefined;
  try {
    server = await serve({ manager: lib.manager, port: 0, dataDir: opts.dataDir, logger: pino({ level: 'silent' }), print: () => undefined });
    const key = server.adminKey!;
    const box = await lib.manager.create({ image: BASE_IMAGE, labels: { [BENCH_LABEL]: opts.runId } });
    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu', '--no-first-run'] });
    const session = await signIn(server.url, key);
    const out: RowResult[] = [];
    const quick = ctx.mode === 'quick';
    for (const row of rows) {
      ctx.log(`${row.name}…`);
      out.push(
        row === ECHO ? await echoRow(browser, server.url, key, session, box.id, quick ? 30 : 100) : await loadRow(browser, server.url, session, quick ? 3 : 10),
      );
    }
    return out;
  } finally {
    await browser?.close();
    await server?.close();
    await lib.close();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await runStandalone('console', ['console', 'ws'], runConsoleRows);
