import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { makeManager, makeTempDir } from '../testing/workspace/fixtures.js';
import { hammerWorkspace, type HammerCounts } from '../testing/workspace/race-hammer.js';
import { HANG_MS } from '../testing/wait.js';

const SECRET = `SECRET-${randomBytes(8).toString('hex')}`;
const DURATION_MS = 3000;

let tmp: Awaited<ReturnType<typeof makeTempDir>>;
let swapper: ChildProcess | undefined;

before(async () => {
  tmp = await makeTempDir('race');
});
after(async () => {
  swapper?.kill('SIGKILL');
  await tmp.remove();
});

test('a directory swapped for an outside symlink as fast as possible never leaks the secret', async (t) => {
  const manager = makeManager(tmp.path);
  const ws = await manager.create({ name: 'race', owner: 'eve', node: 'local' });
  const fs = await manager.fs(ws.id);
  const root = await manager.mountPath(ws.id);
  const outside = join(tmp.path, 'outside');
  mkdirSync(outside);
  writeFileSync(join(outside, 'file'), SECRET);
  writeFileSync(join(outside, 'only-outside'), SECRET);
  await fs.writeFile('d/file', 'inside');

  // The attacker: what a box can do through its mount, looping as fast as sh allows.
  swapper = spawn('sh', ['-c', `cd '${root}' && while :; do mv d d.real; ln -s '${outside}' d; mv d d.link; mv d.real d; mv d.link d.gone; rm d.gone; done`], {
    stdio: 'ignore',
  });

  // Control: a naive path-based read of the same file must see the secret, or the race is not real.
  let naiveReads = 0;
  let naiveLeaks = 0;
  // Until the first leak (a starved swap loop on a loaded machine may take a while), or a hang.
  const naiveUntil = Date.now() + HANG_MS;
  while (naiveLeaks === 0 && Date.now() < naiveUntil) {
    naiveReads += 1;
    const text = await readFile(join(root, 'd', 'file'), 'utf8').catch(() => '');
    if (text === SECRET) naiveLeaks += 1;
  }

  const counts: HammerCounts = await hammerWorkspace(fs, { secret: SECRET, durationMs: DURATION_MS });
  swapper.kill('SIGKILL');

  t.diagnostic(`naive path reads: ${naiveReads}, of which returned the secret: ${naiveLeaks}`);
  t.diagnostic(`contained calls in ${DURATION_MS} ms: ${JSON.stringify(counts)}`);
  assert.ok(naiveLeaks > 0, 'the swap loop never exposed the secret to a naive read: the test would prove nothing');
  assert.equal(counts.leaks, 0, 'a contained call returned or listed outside content');
  assert.ok(counts.okReads > 0, 'no read ever succeeded: the loop did not exercise the inside directory');
  assert.ok(counts.refused > 0, 'no call was ever refused: the symlink state was never hit');
  assert.deepEqual(readdirSync(outside).sort(), ['file', 'only-outside'], 'nothing was written outside');
  assert.equal(readFileSync(join(outside, 'file'), 'utf8'), SECRET);
  assert.ok(counts.unexpected.length === 0, `unexpected errors: ${counts.unexpected.join('; ')}`);
});
