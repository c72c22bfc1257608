/**
 * e2b's Python SDK (PyPI `e2b`) against a real `sbx serve`: the pytest suite in ./python (sync and
 * async clients: commands, PTY, files, watch, the control plane, pause and resume, a killed sandbox) runs once per
 * SDK version, the newest we test and an older 2.x, with nothing but the E2B_* variables pointing
 * it here.
 *
 * scripts/e2b-python.sh installs one venv per version into .build/; `npm test` passes their bin
 * dirs as SBX_E2B_PYTHON_BINS (':'-separated) and sets SBX_REQUIRE_E2B_PYTHON=1, so there the
 * test fails when they are missing rather than skip.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import { testEnv } from '../../testing/env.js';
import { fakenet } from '../../testing/fakenet.js';
import type { FakeNet } from '../../testing/fakenet.js';
import { runProcess } from '../../testing/run-process.js';
import { startTestServer } from '../../testing/server.js';
import type { TestServer } from '../../testing/server.js';

const DOMAIN = 'e2b.sbx.test';
const SUITE = join(import.meta.dirname, 'python');

/** The venvs' bin dirs: SBX_E2B_PYTHON_BINS, else those scripts/e2b-python.sh left under .build/. */
function findVenvs(): string[] {
  const named = process.env['SBX_E2B_PYTHON_BINS'];
  if (named) return named.split(':').filter((d) => d !== '');
  const build = join(process.cwd(), '.build');
  if (!existsSync(build)) return [];
  return readdirSync(build)
    .filter((d) => d.startsWith('e2b-python-') && existsSync(join(build, d, '.complete')))
    .map((d) => join(build, d, 'bin'));
}

/**
 * One server per SDK version: the suite's refusals (wrong keys and tokens, forged signatures, a
 * killed sandbox's calls) count toward the server's per-address auth-failure limit, and two runs
 * against one server would share it.
 */
async function startServer(net: FakeNet): Promise<{ srv: TestServer; key: string }> {
  const srv = await startTestServer('e2b-python', {
    // Deadlines on, and a cleanup pass too rare to run during the suite: a sandbox's timeout
    // (test_timeout.py; the on_timeout pause tests' 1 s ones) is acted on by the Manager's
    // deadline timers, at the deadline (the test server's default, 0, turns both off).
    // Egress through the fake internet (test_network.py): allowed names resolve through its DNS.
    config: { cleanupIntervalMs: 3_600_000, pools: [{ name: 'local', addr: testEnv.engineAddr, runtimeOptions: { egressDns: [net.dns] } }] },
    serve: { proxyDomain: DOMAIN, e2b: { templates: { base: testEnv.e2bImage } } },
  });
  return { srv, key: (await srv.server.keys.create({ name: 'e2b-python', role: 'user' })).e2bKey };
}

const venvs = findVenvs();

describe('the e2b Python SDK', () => {
  test('the venvs are installed', (t: TestContext) => {
    const missing = 'no e2b Python venv (bash scripts/e2b-python.sh installs them; SBX_E2B_PYTHON_BINS names their bin dirs)';
    if (process.env['SBX_REQUIRE_E2B_PYTHON']) assert.ok(venvs.length >= 2, `SBX_REQUIRE_E2B_PYTHON is set but ${missing}`);
    else if (venvs.length === 0) t.skip(missing);
  });

  for (const bin of venvs) {
    test(`pytest with ${bin}`, async (t: TestContext) => {
      const net = await fakenet();
      const { srv, key } = await startServer(net);
      t.after(() => srv.dispose());
      const { code, out } = await runProcess(join(bin, 'python'), ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', '--color=no', '.'], {
        cwd: SUITE,
        env: {
          PATH: process.env['PATH'] ?? '',
          // Only what unchanged e2b code is given: the three variables (and where the proxy is, for getHost).
          E2B_API_URL: `${srv.url}/e2b/api`,
          E2B_SANDBOX_URL: `${srv.url}/e2b/envd`,
          E2B_API_KEY: key,
          SBX_URL: srv.url,
          SBX_PROXY_DOMAIN: DOMAIN,
          // The fake internet's hosts, for test_network.py's real packets.
          SBX_FAKENET_OK: net.ok.address,
          SBX_FAKENET_OK_NAME: net.ok.name,
          SBX_FAKENET_OTHER: net.other.address,
          PYTHONDONTWRITEBYTECODE: '1',
        },
      });
      const version = /e2b (\S+)/.exec(out)?.[1] ?? '?';
      assert.equal(code, 0, `pytest (e2b ${version}) failed:\n${out}`);
      // A run that collected nothing would pass as well: make sure the suite ran.
      assert.match(out, /\d+ passed/, out);
      process.stdout.write(`# e2b ${version}: ${/\d+ passed.*$/m.exec(out)?.[0] ?? ''}\n`);
    });
  }
});
