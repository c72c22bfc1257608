/**
 * `npm run bench -- --compare OLD --against NEW` (bench/core/compare.ts): what each row is judged on,
 * rows in one file only, bad files. Fake results files; no engine, no timing.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { P50_NOISE, RATIO_NOISE, compareResults, renderComparison } from '../../bench/core/compare.js';
import { ResultsFileError, parseResultsFile, readResultsFile } from '../../bench/core/results-file.js';
import type { FlatRow, ResultsFile } from '../../bench/core/results-file.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const pair = (name: string, a: number, b: number, extra: Record<string, unknown> = {}): FlatRow => ({
  name,
  group: 'latency',
  status: 'ok',
  sbx_p50_ms: a,
  raw_p50_ms: b,
  ratio: a / b,
  sbx_p95_ms: a * 1.5,
  raw_p95_ms: b * 1.5,
  ...extra,
});

function results(rows: FlatRow[], run: Record<string, unknown> = {}): ResultsFile {
  return parseResultsFile(JSON.stringify({ rows, machine: { cpus: 2, cpuModel: 'X', memGiB: 24 }, run: { mode: 'full', only: null, ...run } }), 'fake.json');
}

const byName = (c: ReturnType<typeof compareResults>, name: string) => c.rows.find((r) => r.name === name);

test('a ratio that moved past the noise is flagged; both sides slower alike (load) is not', () => {
  const old = results([pair('Exec', 3, 3), pair('Create', 60, 60)]);
  // Exec: sbx 30% slower, raw the same. Create: both 30% slower (a busier machine): ratio unchanged.
  const now = results([pair('Exec', 3.9, 3), pair('Create', 78, 78)]);
  const c = compareResults(old, now);
  const exec = byName(c, 'Exec')!;
  assert.equal(exec.verdict, 'slower');
  assert.equal(exec.judgedBy, 'ratio');
  assert.ok(Math.abs(exec.change - 0.3) < 1e-9);
  assert.ok(Math.abs(exec.ratioChange! - 0.3) < 1e-9);
  const create = byName(c, 'Create')!;
  assert.equal(create.verdict, 'same');
  assert.ok(Math.abs(create.change - 0.3) < 1e-9, 'the p50 change is still reported');
  assert.equal(byName(compareResults(now, old), 'Exec')!.verdict, 'faster');
});

test('the threshold is the noise: a ratio moving by less than it is within noise', () => {
  const old = results([pair('Exec', 3, 3)]);
  const inside = compareResults(old, results([pair('Exec', 3 * (1 + RATIO_NOISE * 0.8), 3)]));
  assert.equal(byName(inside, 'Exec')!.verdict, 'same');
  const outside = compareResults(old, results([pair('Exec', 3 * (1 + RATIO_NOISE * 1.2), 3)]));
  assert.equal(byName(outside, 'Exec')!.verdict, 'slower');
});

test('a row without a ratio is judged on its p50, a memory row on its RSS', () => {
  const oneSide = (name: string, p50: number): FlatRow => ({ name, group: 'latency', status: 'ok', sbx_p50_ms: p50, raw_p50_ms: null, ratio: null });
  // As flatRow writes a memory row: its sides' latency keys are there, as null, before its RSS.
  const mem = (rss: number): FlatRow => ({
    name: 'Memory0Boxes',
    group: 'memory',
    status: 'ok',
    sbx_p50_ms: null,
    raw_p50_ms: null,
    ratio: null,
    baseline_rss_mib: 50,
    sbx_rss_mib: rss,
  });
  const old = results([oneSide('Alone', 10), oneSide('Steady', 10), mem(112)]);
  const now = results([oneSide('Alone', 10 * (1 + P50_NOISE * 1.5)), oneSide('Steady', 10 * (1 + P50_NOISE * 0.5)), mem(217)]);
  const c = compareResults(old, now);
  assert.deepEqual(
    c.rows.map((r) => [r.name, r.judgedBy, r.verdict]),
    [
      ['Alone', 'p50', 'slower'],
      ['Steady', 'p50', 'same'],
      ['Memory0Boxes', 'rss', 'slower'],
    ],
  );
  assert.equal(byName(c, 'Memory0Boxes')!.measure, 'rss');
  assert.equal(byName(c, 'Memory0Boxes')!.old, 112, 'the baseline process RSS is not the row measure');
});

test("the row's first side is what it is about, whatever its subjects are called", () => {
  const agent = (a: number): FlatRow => ({ name: 'AgentExec', group: 'latency', status: 'ok', agent_p50_ms: a, engine_p50_ms: 9, ratio: a / 9 });
  const c = compareResults(results([agent(3.2)]), results([agent(2.4)]));
  assert.deepEqual([byName(c, 'AgentExec')!.subject, byName(c, 'AgentExec')!.old, byName(c, 'AgentExec')!.now], ['agent', 3.2, 2.4]);
  assert.equal(byName(c, 'AgentExec')!.verdict, 'faster');
});

test('rows in one file only are listed as such; failed rows are not compared, saying why', () => {
  const failed: FlatRow = { name: 'K8s Exec', group: 'latency', status: 'unavailable', reason: 'no cluster', sbx_p50_ms: null, raw_p50_ms: null, ratio: null };
  const old = results([pair('Exec', 3, 3), pair('Gone', 1, 1), failed]);
  const now = results([pair('Exec', 3, 3), pair('SpawnInBox', 1, 1), pair('K8s Exec', 30, 25)]);
  const c = compareResults(old, now);
  assert.deepEqual(c.onlyOld, ['Gone']);
  assert.deepEqual(c.onlyNew, ['SpawnInBox']);
  assert.deepEqual(c.notCompared, [{ name: 'K8s Exec', why: 'unavailable in the old file: no cluster' }]);
  const text = renderComparison(c, old, now);
  assert.match(text, /only in the old file: Gone/);
  assert.match(text, /only in the new file: SpawnInBox/);
  assert.match(text, /not compared: K8s Exec: unavailable in the old file: no cluster/);
});

test('with --only, the rows the run did not pick are not reported missing', () => {
  const old = results([pair('Exec', 3, 3), pair('Create', 60, 60), pair('ExecOutput1M', 12, 12)]);
  const now = results([pair('Exec', 3, 3)], { only: 'Exec' });
  const c = compareResults(old, now, 'Exec');
  assert.deepEqual(c.onlyOld, []);
  assert.deepEqual(
    c.rows.map((r) => r.name),
    ['Exec'],
  );
  assert.deepEqual(compareResults(old, now).onlyOld, ['Create', 'ExecOutput1M'], 'without the filter they are');
});

test('the text shows old → new p50, the change in %, the ratios and the flag', () => {
  const old = results([pair('Exec', 3, 3)], { startedAt: '2026-12-04T10:00:00.000Z' });
  const now = results([pair('Exec', 3.9, 3)], { mode: 'quick' });
  const text = renderComparison(compareResults(old, now), old, now);
  const line = text.split('\n').find((l) => l.startsWith('Exec'))!;
  assert.match(line, /3\.00 → 3\.90/);
  assert.match(line, /\+30\.0%/);
  assert.match(line, /1\.00x → 1\.30x/);
  assert.match(line, /SLOWER \(ratio\)/);
  assert.match(text, /a full run against a quick run/);
  assert.match(text, /1 slower, 0 faster, 0 within noise/);
});

test('a file that is not a results file is refused, saying what is wrong', () => {
  assert.throws(
    () => parseResultsFile('{not json', 'a.json'),
    (err: Error) => err instanceof ResultsFileError && /a\.json: not JSON/.test(err.message),
  );
  assert.throws(() => parseResultsFile('{"x":1}', 'b.json'), /b\.json: not a bench results file \(no "rows" array\)/);
  assert.throws(() => parseResultsFile('{"rows":[{"name":"Exec"},{"n":1}]}', 'c.json'), /c\.json: rows\[1\] has no "name"/);
});

test('the CLI: --compare OLD --against NEW prints the comparison; a bad file exits 2', async () => {
  const dir = await mkdtemp(join(os.tmpdir(), 'sbx-bench-compare-'));
  try {
    const oldFile = join(dir, 'old.json');
    const newFile = join(dir, 'new.json');
    await writeFile(oldFile, JSON.stringify({ rows: [pair('Exec', 3, 3)], run: { mode: 'full' } }));
    await writeFile(newFile, JSON.stringify({ rows: [pair('Exec', 3.9, 3)], run: { mode: 'full' } }));
    const bench = (...args: string[]) => promisify(execFile)(process.execPath, ['--import', 'tsx', 'bench/run.ts', ...args], { cwd: ROOT });
    await writeFile(join(dir, 'bad.json'), '[1, 2]');
    // Both at once: each spends seconds loading bench/run.ts's imports on a busy machine.
    const [ok, bad] = await Promise.allSettled([
      bench('--compare', oldFile, '--against', newFile),
      bench('--compare', join(dir, 'bad.json'), '--against', newFile),
    ]);
    assert.equal(ok.status, 'fulfilled');
    assert.match(ok.value.stdout, /Exec .*SLOWER \(ratio\)/);
    assert.equal(bad.status, 'rejected');
    assert.equal((bad.reason as { code: number }).code, 2);
    assert.match((bad.reason as { stderr: string }).stderr, /bad\.json: not a bench results file/);
    await assert.rejects(readResultsFile(join(dir, 'missing.json')), /missing\.json: cannot read \(ENOENT\)/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
