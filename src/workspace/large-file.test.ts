import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { makeTempDir } from '../testing/workspace/fixtures.js';

const MB = 1024 * 1024;
const child = fileURLToPath(new URL('../testing/workspace/stream-child.ts', import.meta.url));

interface Transfer {
  bytes: number;
  readBytes: number;
  sameContent: boolean;
  writeMBps: number;
  readMBps: number;
  baselineRssMB: number;
  maxRssMB: number;
}

let tmp: Awaited<ReturnType<typeof makeTempDir>>;
before(async () => {
  tmp = await makeTempDir('large');
});
after(() => tmp.remove());

/** Runs the transfer in a fresh process so its peak RSS is its own. */
async function transfer(bytes: number): Promise<Transfer> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', child, tmp.path, String(bytes)], { maxBuffer: MB });
  return JSON.parse(stdout.trim().split('\n').at(-1) as string) as Transfer;
}

test('a 200 MB file is written from a Readable and streamed back with bounded memory', async (t) => {
  const small = await transfer(20 * MB);
  const large = await transfer(200 * MB);
  t.diagnostic(
    `200 MB: write ${large.writeMBps.toFixed(0)} MB/s, read ${large.readMBps.toFixed(0)} MB/s, peak RSS ${large.maxRssMB.toFixed(1)} MB ` +
      `(process baseline incl. tsx ${large.baselineRssMB.toFixed(1)} MB, so the transfer itself +${(large.maxRssMB - large.baselineRssMB).toFixed(1)} MB); ` +
      `20 MB run peaked at ${small.maxRssMB.toFixed(1)} MB`,
  );
  assert.equal(large.readBytes, 200 * MB);
  assert.equal(large.sameContent, true);
  assert.ok(large.maxRssMB < 200, `peak RSS ${large.maxRssMB} MB is not under the 200 MB file`);
  assert.ok(large.maxRssMB - large.baselineRssMB < 64, `the transfer grew RSS by ${large.maxRssMB - large.baselineRssMB} MB`);
  // Bounded means independent of the size: ten times the data, (almost) the same peak.
  assert.ok(large.maxRssMB - small.maxRssMB < 16, `peak grew ${large.maxRssMB - small.maxRssMB} MB from 20 MB to 200 MB`);
});
