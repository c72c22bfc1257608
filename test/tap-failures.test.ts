/**
 * scripts/tap-failures.awk ends `npm test` with the failed tests and what they said, since a CI
 * log is read from its tail. It runs here on the TAP of a real node:test run with failures in it.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const AWK = fileURLToPath(new URL('../scripts/tap-failures.awk', import.meta.url));

const FIXTURE = `
import { describe, test } from 'node:test';
describe('a suite', () => {
  test('a nested test that fails', () => { throw new Error('the nested reason'); });
  test('a nested test that passes', () => {});
});
test('a top test that fails', () => { throw new Error('the top reason'); });
test('a top test that passes', () => {});
`;

test('the summary names each failed test with its error, and neither a passing test nor a suite that failed only by a subtest', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-tap-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'fixture.test.mjs');
  writeFileSync(file, FIXTURE);
  // The child must not think it reports to this runner: node:test would then speak its own protocol.
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const run = spawnSync(process.execPath, ['--test', '--test-reporter=tap', file], { env, encoding: 'utf8' });
  assert.equal(run.status, 1, `the fixture run fails: ${run.stderr}`);
  assert.match(run.stdout, /^ok \d+ - a top test that passes$/m, 'the TAP holds the passing test');
  const tapFile = join(dir, 'run.tap');
  writeFileSync(tapFile, run.stdout);
  const summary = execFileSync('awk', ['-f', AWK, tapFile], { encoding: 'utf8' });
  assert.match(summary, /not ok \d+ - a nested test that fails\n(.*\n)*.*the nested reason/);
  assert.match(summary, /not ok \d+ - a top test that fails\n(.*\n)*.*the top reason/);
  assert.match(summary, /location: '.*fixture\.test\.mjs/);
  assert.doesNotMatch(summary, /passes/);
  assert.doesNotMatch(summary, /node:internal/, 'stack frames of node itself are left out');
  assert.doesNotMatch(summary, /not ok \d+ - a suite/);
  assert.equal(summary.match(/^ *not ok /gm)?.length, 2, summary);
});
