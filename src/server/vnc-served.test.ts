/**
 * VNC as `sbx serve` serves it, with nothing stood in: the SDK's `box.vnc()` gives a URL with a
 * port access token, the viewer page swaps it for a cookie scoped to the box's VNC path, and a
 * headless chromium opens that URL as it is, connects through the real port authorization and
 * the box's own dial, and shows the desktop. Tokens of another box, or none, are refused. All of
 * it on runc and on gVisor (`ociRuntime: runsc`): the desktop, the port proxy and the dial into
 * gVisor's own network stack.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { Sbx } from '../client/index.js';
import type { Box } from '../client/index.js';
import { isSbxError } from '../errors.js';
import { browserMissing, openPage } from '../testing/browser.js';
import { testEnv } from '../testing/env.js';
import { startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

/** images/sbx-desktop/desktop.sh's root colour. */
const ROOT_RGB = [0x2a, 0x6f, 0x97] as const;

const RUNTIMES = [
  ['runc', {}],
  ['gVisor', { ociRuntime: testEnv.gvisorRuntime }],
] as const;

for (const [runtime, pool] of RUNTIMES)
  describe(`VNC through sbx serve (real authorization, real dial), on ${runtime}`, () => {
    let t: TestServer;
    let sbx: Sbx;
    let desk: Box;
    let other: Box;

    before(async () => {
      t = await startTestServer('vnc-served', { config: { pools: [{ name: 'local', addr: testEnv.engineAddr, ...pool }] } });
      sbx = new Sbx({ url: t.url, apiKey: t.admin });
      desk = await sbx.create({ image: testEnv.desktopImage, vnc: true });
      other = await sbx.create({ image: testEnv.testImage, ports: [{ containerPort: 3000 }] });
    });

    after(async () => {
      await t?.dispose();
    });

    test('box.vnc(): a URL on the server with a token; the page swaps it for a cookie on the VNC path (303)', async () => {
      const url = new URL(await desk.vnc({ ttlMs: 60_000 }));
      assert.equal(url.origin, t.url);
      assert.equal(url.pathname, `/v1/boxes/${desk.id}/vnc/`);
      assert.match(url.searchParams.get('sbx_token') ?? '', /^sbxp2\./);
      const res = await fetch(url, { redirect: 'manual' });
      assert.equal(res.status, 303);
      assert.equal(res.headers.get('location'), `/v1/boxes/${desk.id}/vnc/`, 'the token leaves the address');
      const cookie = res.headers.get('set-cookie') ?? '';
      assert.match(cookie, new RegExp(`Path=/v1/boxes/${desk.id}/vnc/;`));
      assert.match(cookie, /HttpOnly/);
      assert.match(cookie, /Max-Age=(59|60);/);
      const page = await fetch(`${t.url}/v1/boxes/${desk.id}/vnc/`, { headers: { cookie: cookie.split(';')[0]! } });
      assert.equal(page.status, 200);
      assert.match(await page.text(), /websockify/);
    });

    test('no credential → 401; a token for another box → 403; a box without vnc → not_available', async () => {
      assert.equal((await fetch(`${t.url}/v1/boxes/${desk.id}/vnc/`)).status, 401);
      const otherToken = new URL(await other.proxy(3000, '/', { signed: true })).searchParams.get('sbx_token')!;
      const res = await fetch(`${t.url}/v1/boxes/${desk.id}/vnc/?sbx_token=${otherToken}`, { redirect: 'manual' });
      assert.equal(res.status, 403);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'forbidden');
      await assert.rejects(other.vnc(), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'vnc_not_enabled');
      await assert.rejects(desk.vnc({ ttlMs: 10 }), (e) => isSbxError(e, 'invalid_argument'));
    });

    test('chromium opens the box.vnc() URL as it is and shows the desktop', async (tc) => {
      const missing = await browserMissing();
      if (missing) {
        if (process.env['SBX_REQUIRE_BROWSER']) assert.fail(`SBX_REQUIRE_BROWSER is set but ${missing}`);
        tc.skip(`no browser: ${missing}`);
        return;
      }
      const [r, g, b] = ROOT_RGB;
      const run = await openPage({
        url: await desk.vnc(),
        waitFor: `document.body.dataset.vnc === 'connected' && (() => {
        const c = document.querySelector('#screen canvas');
        if (!c || c.width < 100) return false;
        const d = c.getContext('2d').getImageData(c.width - 4, c.height - 4, 1, 1).data;
        return d[0] === ${r} && d[1] === ${g} && d[2] === ${b};
      })()`,
        timeoutMs: 30_000,
        inspect: (page) =>
          page.evaluate<{ root: number; total: number; url: string }>(`(() => {
          const c = document.querySelector('#screen canvas');
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let root = 0;
          for (let i = 0; i < d.length; i += 4) if (d[i] === ${r} && d[i + 1] === ${g} && d[i + 2] === ${b}) root++;
          return { root, total: d.length / 4, url: location.href };
        })()`),
      });
      assert.ok(run.result.root / run.result.total > 0.5, 'most of the screen is the root colour');
      assert.ok(!run.result.url.includes('sbx_token'), `the token left the address bar (${run.result.url})`);
      assert.deepEqual(run.consoleErrors, []);
    });
    /** The cookie the viewer page sets for a box.vnc() URL (its `name=value`). */
    async function vncCookie(url: string): Promise<string> {
      const res = await fetch(url, { redirect: 'manual' });
      assert.equal(res.status, 303);
      return (res.headers.get('set-cookie') ?? '').split(';')[0]!;
    }

    /** An upgrade of the viewer's WebSocket: 101 and the first bytes of the VNC server, or the refusal's status. */
    async function websockify(headers: Record<string, string>): Promise<{ status: number; banner?: string }> {
      const ws = new WebSocket(`${t.url.replace('http', 'ws')}/v1/boxes/${desk.id}/vnc/websockify`, { headers });
      try {
        return await new Promise((resolve) => {
          ws.once('unexpected-response', (_req, res) => resolve({ status: res.statusCode ?? 0 }));
          ws.once('message', (data: Buffer) => resolve({ status: 101, banner: data.toString('latin1') }));
          ws.once('close', () => resolve({ status: 101 }));
          ws.once('error', () => resolve({ status: -1 }));
        });
      } finally {
        ws.terminate();
      }
    }

    test("the viewer's WebSocket with the cookie: 403 from a foreign Origin, the RFB banner from the server's own", async () => {
      const cookie = await vncCookie(await desk.vnc({ ttlMs: 60_000 }));
      assert.equal((await websockify({ cookie, origin: 'http://3000-attacker.sbx.test' })).status, 403);
      assert.equal((await websockify({ cookie, origin: 'null' })).status, 403);
      // The desktop may still be starting: the page retries, and so does this, until the banner.
      const deadline = Date.now() + 60_000;
      let got = await websockify({ cookie, origin: t.url });
      while (!got.banner?.startsWith('RFB ') && got.status !== 403 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 250));
        got = await websockify({ cookie, origin: t.url });
      }
      assert.equal(got.status, 101);
      assert.match(got.banner ?? '', /^RFB 003\.\d{3}\n$/);
    });

    test('a VNC URL signed for a key that is revoked opens nothing (page, WebSocket)', async () => {
      const second = await new Sbx({ url: t.url, apiKey: t.admin }).keys.create({ name: 'second-admin', role: 'admin' });
      const url = await new Sbx({ url: t.url, apiKey: second.key }).get(desk.id).then((b) => b.vnc({ ttlMs: 60_000 }));
      const cookie = await vncCookie(url);
      assert.equal((await fetch(`${t.url}/v1/boxes/${desk.id}/vnc/`, { headers: { cookie } })).status, 200);
      assert.equal((await t.call('DELETE', `/v1/keys/${second.id}`)).status, 204);
      assert.equal((await fetch(url, { redirect: 'manual' })).status, 401);
      assert.equal((await fetch(`${t.url}/v1/boxes/${desk.id}/vnc/`, { headers: { cookie } })).status, 401);
      assert.equal((await websockify({ cookie, origin: t.url })).status, 401);
    });
  });
