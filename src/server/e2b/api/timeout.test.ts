/**
 * Timeouts are exact through the e2b SDK: a sandbox whose timeout `setTimeout` shortened is gone at
 * its new deadline, not at the next cleanup pass. The server's cleanup interval is an hour, so no
 * pass runs during the test; the Manager's deadline timer is what removes the sandbox. The test
 * waits for the removal (the box gone from the server's Manager), then asks the SDK; the lag from
 * the deadline is reported as a diagnostic, never bounded.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as e2b from 'e2b';
import * as e2bV231 from 'e2b-v231';
import { startTestServer } from '../../../testing/server.js';
import type { TestServer } from '../../../testing/server.js';
import { testEnv } from '../../../testing/env.js';
import { waitFor } from '../../../testing/wait.js';

const SDKS = [
  { name: 'e2b 2.51', mod: e2b as unknown as typeof e2b },
  { name: 'e2b 2.31', mod: e2bV231 as unknown as typeof e2b },
];
const HOUR = 3_600_000;

let t: TestServer;
let key: string;

before(async () => {
  t = await startTestServer('e2b-timeout', {
    // No pass during the test: only the deadline timers can end a sandbox.
    config: { cleanupIntervalMs: HOUR },
    serve: { e2b: { templates: { base: testEnv.e2bImage } } },
  });
  key = (await t.server.keys.create({ name: 'timeout', role: 'user' })).e2bKey;
});
after(async () => {
  await t.dispose();
  assert.equal(t.manager.cleanupStats.ticks, 0, 'no cleanup pass ran');
});

const opts = () => ({ apiUrl: `${t.url}/e2b/api`, sandboxUrl: `${t.url}/e2b/envd`, apiKey: key, requestTimeoutMs: 60_000 });

describe('setTimeout: the sandbox is gone at its new deadline', () => {
  for (const { name, mod } of SDKS) {
    test(`${name}: setTimeout(2000) on a sandbox of an hour ends it at the new deadline`, async (tc) => {
      const sbx = await mod.Sandbox.create('base', { ...opts(), timeoutMs: HOUR });
      try {
        const before = Date.now();
        await sbx.setTimeout(2_000);
        const deadline = (await sbx.getInfo()).endAt.getTime();
        assert.ok(deadline >= before + 2_000, 'the new deadline is 2 s from the call');
        assert.equal(await sbx.isRunning(), true);
        // The removal: from its start the box reads as gone on the server.
        const gone = await waitFor(async () => (!(await t.manager.list()).some((b) => b.id === sbx.sandboxId) ? Date.now() : false), {
          what: `${name}: the sandbox to be removed at its new deadline`,
          intervalMs: 5,
        });
        assert.ok(gone >= deadline, `removed ${deadline - gone} ms before its deadline`);
        tc.diagnostic(`${name}: removed ${gone - deadline} ms after the deadline`);
        await assert.rejects(sbx.getInfo(), mod.SandboxNotFoundError);
        assert.equal(await sbx.isRunning(), false);
        await waitFor(() => t.manager.cleanupStats.removedLifetime >= 1, { what: 'the removal to be counted as the end of a lifetime' });
      } finally {
        await sbx.kill().catch(() => undefined);
      }
    });
  }
});
