import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Runtime } from '../runtime/types.js';
import { openTestRuntime, sh, startTestBox, waitForImage } from '../testing/boxes.js';
import { assertNoContainersLeft } from '../testing/cleanup.js';
import { testEnv, testRunId } from '../testing/env.js';
import { HANG_MS } from '../testing/wait.js';
import type { WorkspaceFS } from './fs.js';
import type { WorkspaceManager } from './manager.js';
import { makeManager, makeTempDir, rejectsWithCode } from '../testing/workspace/fixtures.js';
import { hammerWorkspace } from '../testing/workspace/race-hammer.js';

const SECRET = `SECRET-${randomBytes(8).toString('hex')}`;
const passwd = readFileSync('/etc/passwd', 'utf8');

let tmp: Awaited<ReturnType<typeof makeTempDir>>;
let manager: WorkspaceManager;
let fs: WorkspaceFS;
let root: string;
let sibling: { fs: WorkspaceFS; root: string };
let outside: string;
const runId = testRunId('workspace-box');
let rt: Runtime;
let box: string | undefined;
let readOnlyBox: string | undefined;

function inBox(script: string, options: { user?: string; container?: string } = {}) {
  return sh(rt, options.container ?? (box as string), script, options.user ? { user: options.user } : {});
}

before(async () => {
  rt = openTestRuntime();
  await waitForImage(rt, testEnv.baseImage, 5 * 60_000);
  tmp = await makeTempDir('box');
  manager = makeManager(tmp.path);
  const ws = await manager.create({ name: 'boxed', owner: 'alice', node: 'local' });
  fs = await manager.fs(ws.id);
  root = await manager.mountPath(ws.id);
  const other = await manager.create({ name: 'sibling', owner: 'bob', node: 'local' });
  sibling = { fs: await manager.fs(other.id), root: await manager.mountPath(other.id) };
  await sibling.fs.writeFile('secret.txt', SECRET);
  outside = join(tmp.path, 'outside');
  mkdirSync(outside);
  writeFileSync(join(outside, 'file'), SECRET);
  writeFileSync(join(outside, 'only-outside'), SECRET);
  box = await startTestBox(rt, runId, { binds: [{ hostPath: root, containerPath: '/workspace' }] });
  readOnlyBox = await startTestBox(rt, runId, { binds: [{ hostPath: root, containerPath: '/workspace', readOnly: true }] });
});

after(async () => {
  try {
    for (const id of [box, readOnlyBox]) if (id) await rt.remove(id, { force: true });
    await assertNoContainersLeft(rt, runId);
    assert.equal(readFileSync('/etc/passwd', 'utf8'), passwd, '/etc/passwd unchanged');
  } finally {
    await rt?.close();
    await tmp?.remove();
  }
});

describe('a workspace mounted into a real box', () => {
  test('a file written through the FS is visible in the box', async () => {
    await fs.writeFile('hello.txt', 'from the api');
    const cat = await inBox('cat /workspace/hello.txt');
    assert.equal(cat.exitCode, 0, cat.stderr);
    assert.equal(cat.stdout, 'from the api');
  });

  test('a file written in the box is read through the FS', async () => {
    const write = await inBox('mkdir -p /workspace/made && echo from the box > /workspace/made/in-box.txt');
    assert.equal(write.exitCode, 0, write.stderr);
    assert.equal(await fs.readFile('made/in-box.txt', 'utf8'), 'from the box\n');
    assert.deepEqual(
      (await fs.readDir('made')).map((e) => e.name),
      ['in-box.txt'],
    );
  });

  test('the box user (uid 1000) can edit files and directories the API created', async () => {
    await fs.writeFile('api/edit.txt', 'v1');
    const edit = await inBox('echo v2 >> /workspace/api/edit.txt && touch /workspace/api/new && stat -c %u:%g /workspace/api/edit.txt', { user: '1000:1000' });
    assert.equal(edit.exitCode, 0, edit.stderr);
    assert.equal(edit.stdout.trim(), '1000:1000');
    assert.equal(await fs.readFile('api/edit.txt', 'utf8'), 'v1v2\n');
    assert.equal(await fs.exists('api/new'), true);
  });

  test('a read-only mount lets the box read but not write', async () => {
    const read = await inBox('cat /workspace/hello.txt', { container: readOnlyBox });
    assert.equal(read.stdout, 'from the api');
    const write = await inBox('echo x > /workspace/ro.txt', { container: readOnlyBox });
    assert.notEqual(write.exitCode, 0);
    assert.match(write.stderr, /read-only/i);
    assert.equal(await fs.exists('ro.txt'), false);
  });

  test('the metadata and other workspaces are not visible from inside the box', async () => {
    const list = await inBox('ls -a /workspace');
    assert.ok(!list.stdout.includes('workspace.json'));
    const climb = await inBox('cat /workspace/../workspace.json');
    assert.notEqual(climb.exitCode, 0);
    const sib = await inBox(`ls ${sibling.root}`);
    assert.notEqual(sib.exitCode, 0, 'the sibling host path does not exist inside the box');
  });

  test('a box cannot hard-link a file from outside its mount (EXDEV), even as root', async () => {
    for (const source of ['/etc/passwd', '/etc/hostname', '/bin/busybox']) {
      const link = await inBox(`ln ${source} /workspace/hardlink`, { user: '0:0' });
      assert.notEqual(link.exitCode, 0, `ln ${source} succeeded`);
      assert.match(link.stderr, /cross-device/i);
    }
    assert.equal(await fs.exists('hardlink'), false);
  });

  test('symlinks planted from inside the box never make the FS leave the root', async () => {
    const plant = await inBox(
      `cd /workspace && ln -s /etc/passwd pw && ln -s ${sibling.root} sib && ln -s /etc etc && ln -s ${outside} out && mkdir -p tree && ln -s ${sibling.root} tree/sib`,
    );
    assert.equal(plant.exitCode, 0, plant.stderr);
    for (const path of ['pw', 'sib/secret.txt', 'etc/passwd', 'out/file', 'tree/sib/secret.txt']) {
      await rejectsWithCode(fs.readFile(path), 'invalid_argument', path);
      await rejectsWithCode(fs.createReadStream(path), 'invalid_argument', path);
    }
    for (const path of ['sib/pwned', 'etc/pwned', 'out/pwned']) await rejectsWithCode(fs.writeFile(path, 'pwned'), 'invalid_argument', path);
    await rejectsWithCode(fs.rename('sib/secret.txt', 'stolen'), 'invalid_argument');
    await rejectsWithCode(fs.copy('sib/secret.txt', 'stolen'), 'invalid_argument');
    await rejectsWithCode(fs.readDir('sib'), 'invalid_argument');
    assert.equal((await fs.stat('pw')).isSymlink, true);
    const names = (await fs.readDir('', { recursive: true })).map((e) => e.name);
    assert.ok(!names.some((n) => n.startsWith('sib/') || n.startsWith('out/') || n.startsWith('etc/') || n.startsWith('tree/sib/')), names.join(','));
    const archive = await (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of await fs.exportTar('')) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('latin1');
    })();
    assert.ok(!archive.includes(SECRET) && !archive.includes('root:x:0:0'), 'export carries outside content');
    await fs.removeAll('tree');
    await fs.removeAll('sib');
    await fs.remove('out');
    assert.equal(await sibling.fs.readFile('secret.txt', 'utf8'), SECRET);
    assert.deepEqual(readdirSync(outside).sort(), ['file', 'only-outside']);
    assert.equal(existsSync('/etc/pwned'), false);
  });

  test('a box swapping a directory for an outside symlink in a loop never leaks the secret', async (t) => {
    await fs.writeFile('d/file', 'inside');
    const loop = `cd /workspace && while :; do mv d d.real; ln -s ${outside} d; mv d d.link; mv d.real d; mv d.link d.gone; rm d.gone; done`;
    const swapper = await rt.execStream(box as string, ['sh', '-c', loop]);
    swapper.stdin.end();
    swapper.stdout.resume();
    swapper.stderr.resume();
    try {
      let naiveReads = 0;
      let naiveLeaks = 0;
      // Until the first leak (a starved loop in the box may take a while), or a hang.
      const naiveUntil = Date.now() + HANG_MS;
      while (naiveLeaks === 0 && Date.now() < naiveUntil) {
        naiveReads += 1;
        if ((await readFile(join(root, 'd', 'file'), 'utf8').catch(() => '')) === SECRET) naiveLeaks += 1;
      }
      const counts = await hammerWorkspace(fs, { secret: SECRET, durationMs: 3000 });
      t.diagnostic(`naive path reads: ${naiveReads}, returned the secret: ${naiveLeaks}`);
      t.diagnostic(`contained calls in 3000 ms: ${JSON.stringify(counts)}`);
      assert.ok(naiveLeaks > 0, 'the loop in the box never exposed the secret to a naive read: the test would prove nothing');
      assert.equal(counts.leaks, 0);
      assert.ok(counts.okReads > 0 && counts.refused > 0, JSON.stringify(counts));
      assert.deepEqual(counts.unexpected, []);
    } finally {
      await swapper.cancel(); // kills the loop inside the box
    }
    assert.equal(await swapper.wait(), 137, 'the loop ran until cancelled');
    assert.deepEqual(readdirSync(outside).sort(), ['file', 'only-outside'], 'nothing written outside');
  });
});
