/**
 * The density plot (bench/core/density-plot.ts): well-formed SVG, points where their values put
 * them, panels only for measures the points have, and the results file's `density` field checked.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { densityOf, niceTicks, parseDensity, renderDensitySvg } from '../../bench/core/density-plot.js';
import type { DensityPoint } from '../../bench/core/density-plot.js';
import { ResultsFileError, parseResultsFile } from '../../bench/core/results-file.js';

/** A small XML well-formedness check (no parser dependency): tags balanced, attributes quoted, no stray `<` or `&`. */
function assertWellFormed(xml: string): void {
  const body = xml.replace(/^<\?xml[^?]*\?>\s*/, '');
  const tag = /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>/y;
  const stack: string[] = [];
  let roots = 0;
  let i = 0;
  while (i < body.length) {
    const lt = body.indexOf('<', i);
    const text = body.slice(i, lt === -1 ? body.length : lt);
    assert.doesNotMatch(text, /&(?!(amp|lt|gt|quot|apos|#\d+);)/, `stray & in ${JSON.stringify(text)}`);
    assert.doesNotMatch(text, />/, `stray > in ${JSON.stringify(text)}`);
    if (stack.length === 0) assert.equal(text.trim(), '', `text outside the root: ${JSON.stringify(text)}`);
    if (lt === -1) break;
    tag.lastIndex = lt;
    const m = tag.exec(body);
    assert.ok(m, `not a tag at ${lt}: ${JSON.stringify(body.slice(lt, lt + 60))}`);
    const [, close, name, attrs, selfClose] = m;
    assert.doesNotMatch(attrs!, /&(?!(amp|lt|gt|quot|apos|#\d+);)/, `stray & in attributes of <${name}>`);
    if (close) assert.equal(stack.pop(), name, `</${name}> closes another element`);
    else if (!selfClose) {
      if (stack.length === 0) roots++;
      stack.push(name!);
    } else if (stack.length === 0) roots++;
    i = tag.lastIndex;
  }
  assert.deepEqual(stack, [], 'unclosed elements');
  assert.equal(roots, 1, 'one root element');
  assert.match(body, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
}

/** The points drawn for one measure, in document order. */
function circles(svg: string, field: string): { cx: number; cy: number }[] {
  return [...svg.matchAll(new RegExp(`<circle class="point ${field}" cx="([\\d.]+)" cy="([\\d.]+)"`, 'g'))].map((m) => ({
    cx: Number(m[1]),
    cy: Number(m[2]),
  }));
}

const POINTS: DensityPoint[] = [
  // Out of order on purpose: the plot sorts by box count.
  { boxes: 1000, hostMiBPerBox: 6.1, managerMiB: 165, agentRssMiB: 5.6, shimRssMiB: 12.8, createsPerSec: 4.7, listP50Ms: 6.9 },
  { boxes: 100, hostMiBPerBox: 6.8, managerMiB: 118, agentRssMiB: 5.6, shimRssMiB: 13.1, createsPerSec: 5.9, listP50Ms: 0.9 },
  { boxes: 500, hostMiBPerBox: 6.2, managerMiB: 140, agentRssMiB: 5.5, shimRssMiB: 12.9, createsPerSec: 5.2, listP50Ms: 3.4 },
  { boxes: 250, hostMiBPerBox: 6.4, managerMiB: 126, agentRssMiB: 5.5, shimRssMiB: 13.0, createsPerSec: 5.6, listP50Ms: 1.8 },
];

test('the SVG is well-formed XML, with every measure the points have', () => {
  const svg = renderDensitySvg(POINTS, 'Density <agent> & "pause"');
  assertWellFormed(svg);
  assert.match(svg, /Density &lt;agent&gt; &amp; &quot;pause&quot;/);
  for (const field of ['hostMiBPerBox', 'managerMiB', 'agentRssMiB', 'shimRssMiB', 'createsPerSec', 'listP50Ms']) {
    assert.equal(circles(svg, field).length, POINTS.length, field);
  }
  for (const label of ['Memory per idle box (MiB)', 'Manager RSS (MiB)', 'idle boxes', 'host (MemAvailable)', 'goal ≤ 4 MiB host'])
    assert.ok(svg.includes(label), label);
});

test('points are placed by their values: x grows with the box count, y with the value', () => {
  const svg = renderDensitySvg(POINTS);
  const sorted = [...POINTS].sort((a, b) => a.boxes - b.boxes);
  for (const field of ['hostMiBPerBox', 'managerMiB', 'listP50Ms'] as const) {
    const drawn = circles(svg, field);
    for (let i = 1; i < drawn.length; i++) {
      assert.ok(drawn[i]!.cx > drawn[i - 1]!.cx, `${field}: x grows with boxes`);
      const [before, now] = [sorted[i - 1]![field]!, sorted[i]![field]!];
      // SVG's y grows downwards: a larger value is drawn higher, at a smaller y.
      assert.equal(Math.sign(drawn[i - 1]!.cy - drawn[i]!.cy), Math.sign(now - before), `${field}: y follows the value`);
    }
  }
  // Linear in boxes: 250 → 500 → 1000 boxes are steps of 1:2 on the axis.
  const [, b250, b500, b1000] = circles(svg, 'hostMiBPerBox');
  assert.ok(Math.abs((b1000!.cx - b500!.cx) / (b500!.cx - b250!.cx) - 2) < 0.01);
});

test('only the measures the points have get a panel', () => {
  const svg = renderDensitySvg([
    { boxes: 10, hostMiBPerBox: 7, managerMiB: 110 },
    { boxes: 20, hostMiBPerBox: 6, managerMiB: 111 },
  ]);
  assertWellFormed(svg);
  assert.equal(circles(svg, 'hostMiBPerBox').length, 2);
  assert.equal(circles(svg, 'agentRssMiB').length, 0);
  assert.ok(!svg.includes('Create rate'), 'no create-rate panel without createsPerSec');
  assert.equal((svg.match(/class="panel"/g) ?? []).length, 2);
  assert.throws(() => renderDensitySvg([]), RangeError);
});

test('ticks are round numbers covering the data', () => {
  assert.deepEqual(niceTicks(1000), [0, 200, 400, 600, 800, 1000]);
  assert.deepEqual(niceTicks(13.1), [0, 5, 10, 15]);
  assert.deepEqual(niceTicks(0.9), [0, 0.2, 0.4, 0.6, 0.8, 1]);
});

test("a results file's density field is checked; the plot reads the first density row --only picks", () => {
  const file = parseResultsFile(
    JSON.stringify({
      rows: [
        { name: 'Exec', status: 'ok', sbx_p50_ms: 3 },
        { name: 'Density', status: 'ok', density: [{ boxes: 100, hostMiBPerBox: 6.3, managerMiB: 118, shimRssMiB: 13 }] },
        { name: 'Density paused', status: 'ok', density: [{ boxes: 100, hostMiBPerBox: 2, managerMiB: 118 }] },
      ],
    }),
    'r.json',
  );
  const all = (names: string[]) => new Set(names);
  const first = densityOf(file, all);
  assert.equal(first.row, 'Density');
  assert.deepEqual(first.points, [{ boxes: 100, hostMiBPerBox: 6.3, managerMiB: 118, shimRssMiB: 13 }]);
  assert.deepEqual(first.others, ['Density paused']);
  assert.equal(densityOf(file, (names) => new Set(names.filter((n) => n.includes('paused')))).row, 'Density paused');
  assert.throws(() => densityOf(parseResultsFile('{"rows":[{"name":"Exec"}]}', 'e.json'), all), /e\.json: no row has a "density" field/);
  assert.throws(() => parseDensity([], 'x'), ResultsFileError);
  assert.throws(() => parseDensity([{ boxes: 1, managerMiB: 1 }], 'x'), /x: density\[0\] has no number "hostMiBPerBox"/);
  assert.throws(() => parseDensity([{ boxes: 1, hostMiBPerBox: 1, managerMiB: 1, listP50Ms: 'fast' }], 'x'), /"listP50Ms" that is not a number/);
});
