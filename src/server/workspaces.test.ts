/**
 * Workspaces over HTTP on a real server: CRUD with owner scoping, raw file GET/PUT streamed,
 * stat/list/mkdir/rename/copy/delete, tar out and in, quota enforced on a streamed PUT.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import tar from 'tar-stream';
import { startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';

let t: TestServer;
let alice: string;
let bob: string;

before(async () => {
  t = await startTestServer('wsp');
  alice = (await t.call('POST', '/v1/keys', { body: { name: 'alice', role: 'user' } })).json.key;
  bob = (await t.call('POST', '/v1/keys', { body: { name: 'bob', role: 'user' } })).json.key;
});
after(async () => {
  await t.dispose();
});

describe('workspaces over HTTP', () => {
  test('CRUD with owner scoping', async () => {
    const c = await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'notes', labels: { team: 'a' } } });
    assert.equal(c.status, 201, c.text);
    assert.equal(c.json.owner, 'alice');
    const id = c.json.id;
    assert.equal((await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'x', owner: 'bob' } })).status, 403);
    assert.equal((await t.call('GET', `/v1/workspaces/${id}`, { key: bob })).status, 404);
    assert.equal((await t.call('DELETE', `/v1/workspaces/${id}`, { key: bob })).status, 404);
    assert.equal((await t.call('GET', `/v1/workspaces/${id}/files/x`, { key: bob })).status, 404);
    assert.deepEqual((await t.call('GET', '/v1/workspaces', { key: bob })).json.workspaces, []);
    assert.equal((await t.call('GET', '/v1/workspaces', { key: alice })).json.workspaces.length, 1);
    const patched = await t.call('PATCH', `/v1/workspaces/${id}`, { key: alice, body: { name: 'renamed', labels: { team: 'b' } } });
    assert.equal(patched.json.name, 'renamed');
    assert.deepEqual(patched.json.labels, { team: 'b' });
    const dup = await t.call('POST', '/v1/workspaces', { key: alice, body: { id, name: 'again' } });
    assert.equal(dup.status, 409);
    assert.equal((await t.call('DELETE', `/v1/workspaces/${id}`, { key: alice })).status, 204);
    assert.equal((await t.call('GET', `/v1/workspaces/${id}`, { key: alice })).status, 404);
  });

  test("a box mounts only its owner's workspace, on every create path", async () => {
    const ws = (await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'private' } })).json.id;
    const attempts = [
      ['bob', bob, '', { image: 'sbx-base:latest', workspaceId: ws, mountPath: '/stolen' }],
      ['bob, getOrCreate', bob, '?getOrCreate=true', { id: 'sb-steal-ws', image: 'sbx-base:latest', workspaceId: ws, mountPath: '/stolen' }],
      ['the admin as itself', undefined, '', { image: 'sbx-base:latest', workspaceId: ws }],
    ] as const;
    for (const [who, key, query, body] of attempts) {
      const r = await t.call('POST', `/v1/boxes${query}`, { key, body });
      assert.equal(r.status, 404, `${who}: ${r.text}`);
      assert.equal(r.json.error.code, 'not_found');
      // Exactly what a workspace that does not exist answers: nothing about alice's leaks.
      const missing = await t.call('POST', `/v1/boxes${query}`, { key, body: { ...body, workspaceId: 'ws-nosuchthing' } });
      assert.equal(missing.status, 404);
      assert.equal(r.json.error.message.replace(ws, 'ID'), missing.json.error.message.replace('ws-nosuchthing', 'ID'));
    }
    assert.deepEqual((await t.manager.list()).length, 0, 'no box was made');
    // An admin mounts it by creating the box as its owner; alice herself may.
    const asAlice = await t.call('POST', '/v1/boxes', { body: { image: 'sbx-base:latest', owner: 'alice', workspaceId: ws } });
    assert.equal(asAlice.status, 201, asAlice.text);
    assert.equal(asAlice.json.owner, 'alice');
    const own = await t.call('POST', '/v1/boxes', { key: alice, body: { image: 'sbx-base:latest', workspaceId: ws } });
    assert.equal(own.status, 201, own.text);
    for (const id of [asAlice.json.id, own.json.id]) assert.equal((await t.call('DELETE', `/v1/boxes/${id}`)).status, 204);
    await t.call('DELETE', `/v1/workspaces/${ws}`);
  });

  test(
    'a setuid-root program a box plants in its workspace is closed to other host users',
    { skip: process.getuid?.() !== 0 && 'needs root to act as another host user' },
    async () => {
      chmodSync(t.dataDir, 0o755); // as an operator's /var/lib/sbx would be: open to walk through
      const ws = (await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'planted' } })).json.id;
      const box = await t.call('POST', '/v1/boxes', { key: alice, body: { image: 'sbx-base:latest', workspaceId: ws } });
      assert.equal(box.status, 201, box.text);
      // busybox runs the applet its name says: a setuid-root `true`.
      const cmd = ['sh', '-c', 'cp /bin/busybox /workspace/true && chmod 4755 /workspace/true && ls -l /workspace/true'];
      const plant = await t.call('POST', `/v1/boxes/${box.json.id}/exec`, { key: alice, body: { cmd, user: '0' } });
      assert.match(plant.json.stdout, /^-rwsr-xr-x/, plant.text);
      const planted = join(t.dataDir, 'workspaces', 'local', ws, 'root', 'true');
      const run = spawnSync('runuser', ['-u', 'nobody', '--', planted]);
      assert.notEqual(run.status, 0, 'a host user ran the planted program');
      assert.match(run.stderr.toString(), /Permission denied/);
      assert.equal((await t.call('DELETE', `/v1/boxes/${box.json.id}`, { key: alice })).status, 204);
      await t.call('DELETE', `/v1/workspaces/${ws}`);
    },
  );

  test('files: PUT and GET raw bytes streamed, stat, list, mkdir, rename, copy, delete, usage', async () => {
    const id = (await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'files' } })).json.id;
    const big = Buffer.alloc(8 * 1024 * 1024, 7);
    async function* chunks() {
      for (let i = 0; i < big.length; i += 1 << 20) yield big.subarray(i, i + (1 << 20));
    }
    const put = await fetch(`${t.url}/v1/workspaces/${id}/files/dir/big.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/octet-stream' },
      body: ReadableStream.from(chunks()),
      duplex: 'half',
    } as RequestInit);
    assert.equal(put.status, 204, await put.text());
    const got = await fetch(`${t.url}/v1/workspaces/${id}/files/dir/big.bin`, { headers: { authorization: `Bearer ${alice}` } });
    assert.equal(got.status, 200);
    assert.ok(Buffer.from(await got.arrayBuffer()).equals(big), 'the same bytes come back');
    const noType = await t.call('PUT', `/v1/workspaces/${id}/files/plain.txt?mode=755`, { key: alice, raw: 'hi\n' });
    assert.equal(noType.status, 204, noType.text);
    const st = await t.call('GET', `/v1/workspaces/${id}/files/plain.txt?stat`, { key: alice });
    assert.equal(st.json.size, 3);
    assert.equal(st.json.mode, 0o755);
    assert.equal(st.json.isFile, true);
    assert.equal((await t.call('POST', `/v1/workspaces/${id}/files/a/b/c`, { key: alice, body: { op: 'mkdir' } })).status, 204);
    assert.equal((await t.call('POST', `/v1/workspaces/${id}/files/plain.txt`, { key: alice, body: { op: 'rename', to: 'a/b/c/moved.txt' } })).status, 204);
    assert.equal((await t.call('POST', `/v1/workspaces/${id}/files/a/b/c/moved.txt`, { key: alice, body: { op: 'copy', to: 'copy.txt' } })).status, 204);
    assert.equal((await t.call('GET', `/v1/workspaces/${id}/files/copy.txt`, { key: alice })).text, 'hi\n');
    const list = await t.call('GET', `/v1/workspaces/${id}/files/?list&recursive=true`, { key: alice });
    assert.deepEqual(list.json.entries.map((e: { name: string }) => e.name).sort(), ['a', 'a/b', 'a/b/c', 'a/b/c/moved.txt', 'copy.txt', 'dir', 'dir/big.bin']);
    const top = await t.call('GET', `/v1/workspaces/${id}/files?list`, { key: alice });
    assert.deepEqual(top.json.entries.map((e: { name: string }) => e.name).sort(), ['a', 'copy.txt', 'dir']);
    assert.equal((await t.call('DELETE', `/v1/workspaces/${id}/files/a`, { key: alice })).status, 409, 'a non-empty directory needs recursive');
    assert.equal((await t.call('DELETE', `/v1/workspaces/${id}/files/a?recursive=true`, { key: alice })).status, 204);
    assert.equal((await t.call('DELETE', `/v1/workspaces/${id}/files/copy.txt`, { key: alice })).status, 204);
    assert.equal((await t.call('GET', `/v1/workspaces/${id}/files/copy.txt`, { key: alice })).status, 404);
    const usage = await t.call('GET', `/v1/workspaces/${id}/usage`, { key: alice });
    assert.equal(usage.json.bytes, big.length);
    const m = (await t.call('GET', '/metrics', { key: null })).text;
    assert.match(m, /sbx_workspace_bytes_total\{direction="written"\} [1-9]/);
    assert.match(m, /sbx_workspace_bytes_total\{direction="read"\} [1-9]/);
    await t.call('DELETE', `/v1/workspaces/${id}`);
  });

  test('tar out and in, as streams', async () => {
    const id = (await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'tar' } })).json.id;
    const pack = tar.pack();
    pack.entry({ name: 'src/main.txt' }, 'main\n');
    pack.entry({ name: 'src/lib/util.txt' }, 'util\n');
    pack.finalize();
    const parts: Buffer[] = [];
    for await (const c of pack) parts.push(c as Buffer);
    const up = await t.call('PUT', `/v1/workspaces/${id}/tar/vendor`, {
      key: alice,
      raw: Buffer.concat(parts),
      headers: { 'content-type': 'application/x-tar' },
    });
    assert.equal(up.status, 200, up.text);
    assert.equal(up.json.bytes, 10);
    assert.equal((await t.call('GET', `/v1/workspaces/${id}/files/vendor/src/lib/util.txt`, { key: alice })).text, 'util\n');
    const down = await fetch(`${t.url}/v1/workspaces/${id}/tar/vendor`, { headers: { authorization: `Bearer ${alice}` } });
    assert.equal(down.status, 200);
    const extract = tar.extract();
    const names: string[] = [];
    extract.on('entry', (h, s, next) => {
      names.push(h.name);
      s.resume();
      s.on('end', next);
    });
    const done = new Promise<void>((r) => extract.on('finish', () => r()));
    extract.end(Buffer.from(await down.arrayBuffer()));
    await done;
    assert.ok(
      names.some((n) => n.endsWith('src/lib/util.txt')),
      names.join(','),
    );
    assert.equal(
      (await t.call('PUT', `/v1/workspaces/${id}/tar/x`, { key: alice, raw: 'not a tar at all', headers: { 'content-type': 'application/x-tar' } })).status <
        500,
      true,
    );
    await t.call('DELETE', `/v1/workspaces/${id}`);
  });

  test('the quota bounds a streamed PUT', async () => {
    const id = (await t.call('POST', '/v1/workspaces', { key: alice, body: { name: 'small', quotaBytes: 1024 * 1024 } })).json.id;
    const r = await t.call('PUT', `/v1/workspaces/${id}/files/too-big.bin`, {
      key: alice,
      raw: Buffer.alloc(3 * 1024 * 1024),
      headers: { 'content-type': 'application/octet-stream' },
    });
    assert.equal(r.status, 413, r.text);
    assert.equal(r.json.error.code, 'quota_exceeded');
    assert.equal((await t.call('GET', `/v1/workspaces/${id}/files/too-big.bin`, { key: alice })).status, 404, 'nothing half-written is left');
    assert.equal((await t.call('GET', '/healthz', { key: null })).status, 200);
    await t.call('DELETE', `/v1/workspaces/${id}`);
  });
});
