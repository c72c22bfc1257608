/**
 * The console's terminal in a real browser, for tests and the bench: read what the terminal shows
 * (xterm's DOM rows), type into it, and measure keystroke echo — from the key press to the
 * character on the screen, timed inside the page.
 *
 * The page has a strict CSP (no eval), so waits poll with page.evaluate of a string expression
 * (run through the DevTools protocol, which the CSP does not govern), never waitForFunction.
 */
import type { Locator, Page } from 'playwright-core';
import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from './wait.js';

/** The terminal pane on show (the Terminal tab shows one of its terminals at a time). */
export const ACTIVE_PANE = '[data-testid="terminal-pane"]:not([hidden])';

/** The active terminal's pane. */
export function activePane(page: Page): Locator {
  return page.locator(ACTIVE_PANE);
}

/** The lines the active terminal shows, trailing blanks trimmed (non-breaking spaces as spaces). */
export async function screenLines(page: Page, pane = ACTIVE_PANE): Promise<string[]> {
  return page.evaluate<string[]>(
    `Array.from(document.querySelectorAll(${JSON.stringify(`${pane} .xterm-rows > div`)}), (r) => r.textContent.replace(/\\u00a0/g, ' ').trimEnd())`,
  );
}

/** Waits until a line of the active terminal matches `re`; returns its match. */
export async function waitForLine(page: Page, re: RegExp, opts: { pane?: string; timeoutMs?: number } = {}): Promise<RegExpMatchArray> {
  let last: string[] = [];
  try {
    return await waitFor(
      async () => {
        last = await screenLines(page, opts.pane);
        for (const line of last) {
          const m = re.exec(line);
          if (m) return m;
        }
        return undefined;
      },
      { what: `a terminal line matching ${re}`, timeoutMs: opts.timeoutMs ?? 30_000 },
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; the screen:\n${last.filter(Boolean).join('\n')}`);
  }
}

/**
 * Waits until the active terminal has the keyboard (the tab focuses it after it shows it, a
 * moment after the pane is visible), so what is typed next goes to it.
 */
export async function waitForFocus(page: Page, pane = ACTIVE_PANE): Promise<void> {
  await waitFor(() => page.evaluate<boolean>(`document.activeElement?.closest(${JSON.stringify(pane)}) !== null`), {
    what: 'the terminal to have the keyboard',
    timeoutMs: 30_000,
  });
}

/** Types `text` into the focused terminal, then Enter. */
export async function typeLine(page: Page, text: string): Promise<void> {
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}

export interface EchoStats {
  samples: number[];
  p50Ms: number;
  p90Ms: number;
  maxMs: number;
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length - 1) * p))]!;
}

/**
 * Keystroke echo of the terminal `page` shows (a shell at its prompt, focused): presses `count`
 * letters one at a time and times each in the page, from its keydown on xterm's input to the
 * mutation of the rows that shows it (xterm renders on the next animation frame, so that frame is
 * part of it, as it is for a person). The letters are typed on a `#` comment line, cleared with
 * Ctrl-U at the end, so nothing runs.
 */
export async function measureEcho(page: Page, opts: { count?: number; pane?: string } = {}): Promise<EchoStats> {
  const count = opts.count ?? 50;
  const pane = opts.pane ?? ACTIVE_PANE;
  await page.evaluate(`(() => {
    const pane = document.querySelector(${JSON.stringify(pane)});
    const rows = pane.querySelector('.xterm-rows');
    const input = pane.querySelector('textarea.xterm-helper-textarea');
    const s = { want: '', t0: 0, resolve: null, done: null };
    const text = () => rows.textContent.replace(/\\u00a0/g, ' ');
    const check = () => {
      if (s.resolve && s.t0 && text().includes(s.want)) {
        const r = s.resolve;
        s.resolve = null;
        r(performance.now() - s.t0);
      }
    };
    input.addEventListener('keydown', () => { if (s.resolve && !s.t0) s.t0 = performance.now(); }, true);
    new MutationObserver(check).observe(rows, { childList: true, subtree: true, characterData: true });
    window.__sbxEcho = {
      arm(want) { s.want = want; s.t0 = 0; s.done = new Promise((r) => (s.resolve = r)); },
      wait() { return s.done; },
    };
  })()`);
  // A marker no earlier line has, so the line typed so far is found only once it is echoed.
  const marker = `#e${Date.now().toString(36)}`;
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  await page.keyboard.type(marker);
  await waitForLine(page, new RegExp(marker), { pane });
  let typed = marker;
  const samples: number[] = [];
  for (let i = 0; i < count; i++) {
    const ch = letters[i % letters.length]!;
    typed += ch;
    // Long lines wrap: the tail is what shows on the cursor's row.
    await page.evaluate(`window.__sbxEcho.arm(${JSON.stringify(typed.slice(-20))})`);
    // A person's keys land anywhere in the display's 16.7 ms frame; keys sent the moment the last echo
    // was drawn would all land at the same point of it (and all wait the same part of a frame). So
    // each key is held back a different part of a frame (0, 7, 14, 4, 11, … ms), outside the timing.
    await sleep((i * 7) % 17);
    // Down, and up only once echoed: a person's key is down for tens of ms, and an up sent at once
    // would queue its own handling in the page ahead of the echo (press() sends both back to back).
    await page.keyboard.down(ch);
    samples.push(await page.evaluate<number>('window.__sbxEcho.wait()'));
    await page.keyboard.up(ch);
  }
  await page.keyboard.press('Control+U');
  const sorted = [...samples].sort((a, b) => a - b);
  return { samples, p50Ms: percentile(sorted, 0.5), p90Ms: percentile(sorted, 0.9), maxMs: sorted[sorted.length - 1]! };
}
