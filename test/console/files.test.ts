/**
 * The console's files (a box's and a workspace's) and its Workspaces pages in a real browser
 * against a real server and engine: upload by drag and drop and by the file input, download back
 * by hash, progress of a large transfer seen moving, edit a text file, create/use/delete a
 * workspace, owner scoping by direct URL and list, and the API's refusals shown as its messages.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { launchBrowser, signedIn } from '../../src/testing/console.js';
import { IMAGE, startTestServer } from '../../src/testing/server.js';
import type { TestServer } from '../../src/testing/server.js';

const sha256 = (b: Buffer | Uint8Array): string => createHash('sha256').update(b).digest('hex');

describe('console files and workspaces', () => {
  let srv: TestServer;
  let browser: Browser | undefined;
  let alice: string;
  let bob: string;
  let boxId: string;
  let wsId: string;
  let scratch: string;

  /** A file's bytes through the API, as `key` reads it. */
  async function apiBytes(path: string, key: string): Promise<Buffer> {
    const res = await fetch(`${srv.url}${path}`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(res.status, 200, `GET ${path}: ${res.status}`);
    return Buffer.from(await res.arrayBuffer());
  }

  async function go(page: Page, hash: string): Promise<void> {
    await page.evaluate(`location.hash = ${JSON.stringify(hash)}`);
  }

  before(async () => {
    srv = await startTestServer('console-files');
    scratch = mkdtempSync(join(tmpdir(), 'sbx-console-files-'));
    const a = await srv.call('POST', '/v1/keys', { body: { name: 'alice', role: 'user' } });
    assert.equal(a.status, 201, a.text);
    alice = a.json.key;
    const b = await srv.call('POST', '/v1/keys', { body: { name: 'bob', role: 'user', owner: 'bob' } });
    assert.equal(b.status, 201, b.text);
    bob = b.json.key;
    const ws = await srv.call('POST', '/v1/workspaces', { key: alice, body: { name: 'alice-data' } });
    assert.equal(ws.status, 201, ws.text);
    wsId = ws.json.id;
    const box = await srv.call('POST', '/v1/boxes', { key: alice, body: { image: IMAGE, workspaceId: wsId } });
    assert.equal(box.status, 201, box.text);
    boxId = box.json.id;
  });
  after(async () => {
    await browser?.close();
    await srv?.dispose();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  test('a box: upload by drag and drop and by the file input, download back by hash; the API sees the files', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/#/boxes/${boxId}/files?path=/tmp`, alice);
    await page.getByTestId('file-list').waitFor();
    assert.equal(await page.getByTestId('breadcrumbs').innerText(), `${boxId}/tmp`);

    const dropped = randomBytes(200 * 1024);
    const dataTransfer = await page.evaluateHandle(`(() => {
      const raw = atob(${JSON.stringify(dropped.toString('base64'))});
      const bytes = new Uint8Array(raw.length);
      for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
      const dt = new DataTransfer();
      dt.items.add(new File([bytes], 'dropped.bin', { type: 'application/octet-stream' }));
      return dt;
    })()`);
    await page.getByTestId('dropzone').dispatchEvent('dragover', { dataTransfer });
    await page.getByTestId('dropzone').dispatchEvent('drop', { dataTransfer });
    await page.locator('[data-testid=transfer][data-name="dropped.bin"][data-state=done]').waitFor();
    const row = page.locator('[data-testid=file-row][data-name="dropped.bin"]');
    await row.waitFor();
    assert.equal(sha256(await apiBytes(`/v1/boxes/${boxId}/files/tmp/dropped.bin`, alice)), sha256(dropped), 'the API reads what was dropped');

    const [download] = await Promise.all([page.waitForEvent('download'), row.getByRole('button', { name: 'Download dropped.bin' }).click()]);
    assert.equal(download.suggestedFilename(), 'dropped.bin');
    const saved = await download.path();
    assert.equal(sha256(readFileSync(saved)), sha256(dropped), 'the download is the same bytes');

    // Several files at once through the file input.
    const one = randomBytes(3000);
    const two = Buffer.from('two\n');
    await page.getByTestId('upload-input').setInputFiles([
      { name: 'one.bin', mimeType: 'application/octet-stream', buffer: one },
      { name: 'two.txt', mimeType: 'text/plain', buffer: two },
    ]);
    await page.locator('[data-testid=file-row][data-name="one.bin"]').waitFor();
    await page.locator('[data-testid=file-row][data-name="two.txt"]').waitFor();
    await page.locator('[data-testid=transfer][data-name="two.txt"][data-state=done]').waitFor();
    assert.equal(sha256(await apiBytes(`/v1/boxes/${boxId}/files/tmp/one.bin`, alice)), sha256(one));
    assert.deepEqual(await apiBytes(`/v1/boxes/${boxId}/files/tmp/two.txt`, alice), two);

    // The workspace mount is one click away, and shows the workspace's files.
    await srv.call('PUT', `/v1/workspaces/${wsId}/files/in-workspace.txt`, { key: alice, raw: 'w\n', headers: { 'content-type': 'application/octet-stream' } });
    await page.getByRole('link', { name: 'Workspace /workspace' }).click();
    await page.locator('[data-testid=file-row][data-name="in-workspace.txt"]').waitFor();
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('a large upload and download show their progress moving', { timeout: 180_000 }, async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/#/boxes/${boxId}/files?path=/tmp`, alice);
    await page.getByTestId('file-list').waitFor();
    const big = randomBytes(40 * 1024 * 1024);
    const file = join(scratch, 'big.bin');
    writeFileSync(file, big);
    // Every value the progress elements take, recorded as the page changes them.
    await page.evaluate(`(() => {
      window.__progress = [];
      new MutationObserver(() => {
        for (const p of document.querySelectorAll('[data-testid$=-progress]')) window.__progress.push([p.dataset.testid, p.value, p.max]);
      }).observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
    })()`);
    await page.getByTestId('upload-input').setInputFiles(file);
    await page.locator('[data-testid=transfer][data-name="big.bin"][data-state=done]').waitFor({ timeout: 150_000 });
    const row = page.locator('[data-testid=file-row][data-name="big.bin"]');
    await row.waitFor();
    assert.equal(sha256(await apiBytes(`/v1/boxes/${boxId}/files/tmp/big.bin`, alice)), sha256(big));

    const [download] = await Promise.all([page.waitForEvent('download'), row.getByRole('button', { name: 'Download big.bin' }).click()]);
    assert.equal(sha256(readFileSync(await download.path())), sha256(big));
    const seen = await page.evaluate<Array<[string, number, number]>>('window.__progress');
    for (const kind of ['upload-progress', 'download-progress']) {
      const values = seen.filter(([k]) => k === kind);
      assert.ok(
        values.some(([, v, max]) => v > 0 && v < max && max === big.length),
        `${kind} was shown between 0 and the size: ${JSON.stringify(values.slice(0, 20))}`,
      );
      assert.ok(
        values.some(([, v, max]) => v === max && max === big.length),
        `${kind} reached the end`,
      );
    }
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('view a small text file, edit it, save: the API reads the new content, the mode is kept', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const put = await srv.call('PUT', `/v1/boxes/${boxId}/files/tmp/note.sh?mode=755`, {
      key: alice,
      raw: '#!/bin/sh\necho hello\n',
      headers: { 'content-type': 'application/octet-stream' },
    });
    assert.equal(put.status, 204, put.text);
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/#/boxes/${boxId}/files?path=/tmp`, alice);
    await page.getByRole('button', { name: 'View note.sh' }).click();
    const editor = page.getByTestId('editor');
    await editor.waitFor();
    assert.equal(await editor.inputValue(), '#!/bin/sh\necho hello\n');
    await editor.fill('#!/bin/sh\necho edited in the console\n');
    assert.equal(await page.getByTestId('save-state').innerText(), 'Changed');
    await Promise.all([
      page.waitForResponse((r) => r.request().method() === 'PUT' && r.url().includes('/files/tmp/note.sh')),
      page.getByTestId('save').click(),
    ]);
    await page.getByTestId('save-state').getByText('Saved').waitFor();
    assert.equal((await apiBytes(`/v1/boxes/${boxId}/files/tmp/note.sh`, alice)).toString(), '#!/bin/sh\necho edited in the console\n');
    const stat = await srv.call('GET', `/v1/boxes/${boxId}/files/tmp/note.sh?stat=true`, { key: alice });
    assert.equal(stat.json.mode & 0o777, 0o755, 'the save kept the file mode');
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('workspaces: create through the page, upload a file into it, see it listed, delete it; one in use is refused with its message', async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const { page, context, errors } = await signedIn(browser, `${srv.url}/console/#/workspaces`, alice);
    await page.getByTestId('workspace-list').waitFor();
    await page.getByRole('button', { name: 'New workspace' }).click();
    await page.getByLabel('Name').fill('made-in-console');
    await page.getByRole('button', { name: 'Create workspace' }).click();
    const link = page.getByRole('link', { name: 'made-in-console' });
    await link.waitFor();
    const created = (await srv.call('GET', '/v1/workspaces', { key: alice })).json.workspaces.find((w: { name: string }) => w.name === 'made-in-console');
    assert.ok(created, 'the API lists the new workspace');
    assert.equal(created.owner, 'alice');

    await link.click();
    await page.getByTestId('workspace-info').waitFor();
    await page.getByTestId('file-list').waitFor();
    const data = Buffer.from('kept in the workspace\n');
    await page.getByTestId('upload-input').setInputFiles({ name: 'kept.txt', mimeType: 'text/plain', buffer: data });
    await page.locator('[data-testid=file-row][data-name="kept.txt"]').waitFor();
    assert.deepEqual(await apiBytes(`/v1/workspaces/${created.id}/files/kept.txt`, alice), data);

    // A folder, and the file browser inside it.
    await page.getByLabel('New folder name').fill('sub');
    await page.getByRole('button', { name: 'New folder' }).click();
    await page.getByRole('link', { name: 'sub/' }).click();
    await page.getByTestId('breadcrumbs').getByRole('link', { name: 'sub' }).waitFor();
    await page.getByText('Empty.').waitFor();
    const sub = await srv.call('GET', `/v1/workspaces/${created.id}/files/sub?stat=true`, { key: alice });
    assert.equal(sub.json.isDir, true);
    // A workspace directory downloads as a tar of its tree.
    await srv.call('PUT', `/v1/workspaces/${created.id}/files/sub/inner.txt`, {
      key: alice,
      raw: 'inner\n',
      headers: { 'content-type': 'application/octet-stream' },
    });
    await page.getByRole('link', { name: '.. (up)' }).click();
    const [tar] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download sub as tar' }).click()]);
    assert.equal(tar.suggestedFilename(), 'sub.tar');
    const tarBytes = readFileSync(await tar.path());
    assert.ok(tarBytes.includes('inner.txt') && tarBytes.includes('inner\n'), 'the tar holds the directory’s file');

    await go(page, '#/workspaces');
    const row = page.locator(`[data-testid=workspace-row][data-id="${created.id}"]`);
    await row.getByText(/· 2 files/).waitFor();
    await row.getByRole('button', { name: 'Delete' }).click();
    await page.getByTestId('confirm').click();
    await row.waitFor({ state: 'detached' });
    assert.equal((await srv.call('GET', `/v1/workspaces/${created.id}`, { key: alice })).status, 404);

    // The workspace the running box mounts: the API refuses, and the page says what it said.
    const refusal = page.waitForResponse((r) => r.request().method() === 'DELETE' && r.url().endsWith(`/v1/workspaces/${wsId}`));
    const mounted = page.locator(`[data-testid=workspace-row][data-id="${wsId}"]`);
    await mounted.getByRole('button', { name: 'Delete' }).click();
    await page.getByTestId('confirm').click();
    const body = (await (await refusal).json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'conflict');
    assert.equal(await page.getByTestId('error').innerText(), `${body.error.message} (conflict)`);
    assert.equal((await srv.call('GET', `/v1/workspaces/${wsId}`, { key: alice })).status, 200);
    assert.deepEqual(
      errors.filter((e) => !e.includes(`/v1/workspaces/${wsId}`) && !/409/.test(e)),
      [],
    );
    await context.close();
  });

  test("a user key cannot open another owner's workspace by direct URL, nor see it in the list", async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const own = await srv.call('POST', '/v1/workspaces', { key: bob, body: { name: 'bobs' } });
    assert.equal(own.status, 201, own.text);
    const refused = await srv.call('GET', `/v1/workspaces/${wsId}`, { key: bob });
    assert.equal(refused.status, 404);
    const { page, context } = await signedIn(browser, `${srv.url}/console/#/workspaces/${wsId}`, bob);
    assert.equal(await page.getByTestId('error').innerText(), `${refused.json.error.message} (not_found)`);
    assert.equal(await page.getByTestId('workspace-info').count(), 0);
    assert.equal(await page.getByTestId('file-list').count(), 0);

    await go(page, '#/workspaces');
    await page.locator(`[data-testid=workspace-row][data-id="${own.json.id}"]`).waitFor();
    assert.equal(await page.locator(`[data-testid=workspace-row][data-id="${wsId}"]`).count(), 0);
    assert.equal(await page.getByText('alice-data').count(), 0);
    // Nor the box's files, which show alice's workspace.
    await go(page, `#/boxes/${boxId}/files`);
    await page.getByTestId('error').getByText('(not_found)').waitFor();
    assert.equal(await page.getByTestId('file-list').count(), 0);
    await context.close();
  });

  test("the API's refusals show as its messages: a write the box forbids, a missing path, a workspace's quota; a file too large to view says so", async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    // The box user may not write in /: what the API answers, the page shows.
    const forbidden = await srv.call('PUT', `/v1/boxes/${boxId}/files/nope.txt`, {
      key: alice,
      raw: 'x',
      headers: { 'content-type': 'application/octet-stream' },
    });
    assert.equal(forbidden.status, 403, forbidden.text);
    const { page, context } = await signedIn(browser, `${srv.url}/console/#/boxes/${boxId}/files?path=/`, alice);
    await page.getByTestId('file-list').waitFor();
    await page.getByTestId('upload-input').setInputFiles({ name: 'nope.txt', mimeType: 'text/plain', buffer: Buffer.from('x') });
    const failed = page.locator('[data-testid=transfer][data-name="nope.txt"][data-state=failed]');
    await failed.waitFor();
    assert.equal(await failed.getByTestId('error').innerText(), `${forbidden.json.error.message} (${forbidden.json.error.code})`);

    // A path that is not there, typed in.
    const missing = await srv.call('GET', `/v1/boxes/${boxId}/files/no/such/dir?list=true`, { key: alice });
    assert.equal(missing.status, 404, missing.text);
    await page.getByTestId('goto').fill('/no/such/dir');
    await page.getByRole('button', { name: 'Go', exact: true }).click();
    await page.getByTestId('error').getByText(missing.json.error.message).waitFor();
    assert.match(page.url(), /path=%2Fno%2Fsuch%2Fdir$/);

    // Larger than the console views: it says so, and the download stays offered.
    const put = await srv.call('PUT', `/v1/boxes/${boxId}/files/tmp/large.txt`, {
      key: alice,
      raw: 'x'.repeat(2 * 1024 * 1024),
      headers: { 'content-type': 'application/octet-stream' },
    });
    assert.equal(put.status, 204, put.text);
    await go(page, `#/boxes/${boxId}/files?path=/tmp`);
    await page.getByRole('button', { name: 'View large.txt' }).click();
    assert.match(await page.getByTestId('viewer').getByTestId('error').innerText(), /large\.txt is 2\.0 MiB: the console views and edits files up to 1\.0 MiB/);
    assert.equal(await page.getByTestId('editor').count(), 0);
    await page.getByRole('button', { name: 'Download large.txt' }).waitFor();

    // A workspace's quota: the upload is refused midway, and the page shows why.
    const small = await srv.call('POST', '/v1/workspaces', { key: alice, body: { name: 'small', quotaBytes: 1024 * 1024 } });
    assert.equal(small.status, 201, small.text);
    const over = await srv.call('PUT', `/v1/workspaces/${small.json.id}/files/probe.bin`, {
      key: alice,
      raw: Buffer.alloc(2 * 1024 * 1024),
      headers: { 'content-type': 'application/octet-stream' },
    });
    assert.equal(over.json?.error?.code, 'quota_exceeded', over.text);
    await go(page, `#/workspaces/${small.json.id}`);
    await page.getByTestId('file-list').waitFor();
    await page.getByTestId('upload-input').setInputFiles({ name: 'too-big.bin', mimeType: 'application/octet-stream', buffer: Buffer.alloc(2 * 1024 * 1024) });
    const refused = page.locator('[data-testid=transfer][data-name="too-big.bin"][data-state=failed]');
    await refused.waitFor();
    // The byte count in the message is where the write stopped, so it differs between the two tries.
    const sameMessage = (m: string): string => m.replace(/use \d+ bytes/, 'use N bytes');
    assert.equal(sameMessage(await refused.getByTestId('error').innerText()), `${sameMessage(over.json.error.message)} (quota_exceeded)`);
    assert.equal(await page.locator('[data-testid=file-row][data-name="too-big.bin"]').count(), 0);
    await context.close();
  });

  test("a stopped box's files: the page says so, with the API's message", async (t) => {
    browser ??= await launchBrowser(t);
    if (!browser) return;
    const box = await srv.call('POST', '/v1/boxes', { key: alice, body: { image: IMAGE } });
    assert.equal(box.status, 201, box.text);
    const stopped = await srv.call('POST', `/v1/boxes/${box.json.id}/stop`, { key: alice });
    assert.ok(stopped.status < 300, stopped.text);
    const answer = await srv.call('GET', `/v1/boxes/${box.json.id}/files?list=true`, { key: alice });
    assert.ok(answer.status >= 400, `a stopped box's listing is refused: ${answer.status} ${answer.text}`);
    const { page, context } = await signedIn(browser, `${srv.url}/console/#/boxes/${box.json.id}/files`, alice);
    await page.getByTestId('box-not-running').waitFor();
    assert.equal(await page.getByTestId('error').innerText(), `${answer.json.error.message} (${answer.json.error.code})`);
    await srv.call('DELETE', `/v1/boxes/${box.json.id}`, { key: alice });
    await context.close();
  });
});
