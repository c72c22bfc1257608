/**
 * envd 0.6 through the real `e2b` SDKs (2.51, and 2.31 where it has the feature) against a real
 * sbx server and engine: file metadata (owner, group, mode, permissions, symlink targets, the
 * `metadata` of a write), entry info in watch events, writes that create their parents as E2B's
 * envd does, a silent remove of a missing path, signed file URLs (`downloadUrl`/`uploadUrl` at the
 * server's root), and a command whose sandbox is killed under it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CommandExitError, FileType, Sandbox, TimeoutError, getSignature, type FilesystemEvent } from 'e2b';
import { Sandbox as Sandbox231 } from 'e2b-v231';
import { keyIdOf, startTestServer, type TestServer } from '../../../testing/server.js';
import { testEnv } from '../../../testing/env.js';
import { HANG_MS } from '../../../testing/wait.js';
import { envdAccessToken } from '../access-token.js';
import { ENVD_PREFIX } from './routes.js';
import { ENVD_VERSION } from './version.js';

let srv: TestServer;

before(async () => {
  srv = await startTestServer('envd06');
});

after(async () => {
  await srv.dispose();
});

/** SDK options for box `id` of server `on` as the SDK builds them after create/connect. */
async function sdkOptions(id: string, on: TestServer = srv): Promise<Record<string, unknown>> {
  return {
    sandboxId: id,
    envdAccessToken: await envdAccessToken(on.manager, id, keyIdOf(on.admin)),
    envdVersion: ENVD_VERSION,
    sandboxUrl: on.url + ENVD_PREFIX,
    apiUrl: on.url + '/e2b/api',
    apiKey: 'e2b_' + '0'.repeat(80),
  };
}

async function sandbox251(): Promise<Sandbox> {
  const box = await srv.manager.create({ image: testEnv.e2bImage });
  return new (Sandbox as unknown as new (opts: Record<string, unknown>) => Sandbox)(await sdkOptions(box.id));
}

async function sandbox231(): Promise<Sandbox231> {
  const box = await srv.manager.create({ image: testEnv.e2bImage });
  return new (Sandbox231 as unknown as new (opts: Record<string, unknown>) => Sandbox231)(await sdkOptions(box.id));
}

async function waitFor(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + HANG_MS;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('file metadata (envd 0.6.2)', () => {
  let sbx: Sandbox;
  before(async () => {
    sbx = await sandbox251();
  });

  test('getInfo and list carry owner, group, mode, permissions; a symlink its target and its target’s type', async () => {
    await sbx.files.write('/home/user/meta/a.txt', 'hello');
    await sbx.commands.run('ln -s a.txt /home/user/meta/link; ln -s /nowhere /home/user/meta/dangling; mkdir -p /tmp/rootdir', { user: 'root' });
    const info = await sbx.files.getInfo('/home/user/meta/a.txt');
    assert.equal(info.owner, 'user');
    assert.equal(info.group, 'user');
    assert.equal(info.mode, 0o644);
    assert.equal(info.permissions, '-rw-r--r--');
    assert.equal(info.size, 5);
    assert.equal(info.type, FileType.FILE);
    assert.equal(info.symlinkTarget, undefined);
    const link = await sbx.files.getInfo('/home/user/meta/link');
    assert.equal(link.type, FileType.FILE, "a symlink's type is its target's, as in E2B's envd");
    assert.equal(link.symlinkTarget, '/home/user/meta/a.txt');
    assert.equal(link.mode, 0o644);
    assert.match(link.permissions, /^L/);
    assert.equal(link.owner, 'root');
    const dangling = await sbx.files.getInfo('/home/user/meta/dangling');
    assert.equal(dangling.symlinkTarget, '/home/user/meta/dangling');
    const root = await sbx.files.getInfo('/tmp/rootdir');
    assert.deepEqual([root.owner, root.group, root.type, root.permissions], ['root', 'root', FileType.DIR, 'drwxr-xr-x']);
    const listed = await sbx.files.list('/home/user/meta');
    const byName = Object.fromEntries(listed.map((e) => [e.name, e]));
    // A dangling link's type is unspecified (E2B's too), which the SDK leaves out of a listing.
    assert.deepEqual(Object.keys(byName).sort(), ['a.txt', 'link']);
    assert.equal(dangling.type, undefined);
    assert.equal(byName['a.txt']!.owner, 'user');
    assert.equal(byName['link']!.symlinkTarget, '/home/user/meta/a.txt');
  });

  test("write's metadata is kept on the file (user.e2b.* xattrs), answered by write and getInfo, replaced by a rewrite", async () => {
    const written = await sbx.files.write('/home/user/tagged.txt', 'x', { metadata: { Author: 'mish', purpose: 'test run' } });
    assert.deepEqual(written.metadata, { author: 'mish', purpose: 'test run' });
    assert.deepEqual((await sbx.files.getInfo('/home/user/tagged.txt')).metadata, { author: 'mish', purpose: 'test run' });
    await sbx.files.write('/home/user/tagged.txt', 'y', { metadata: { author: 'other' } });
    assert.deepEqual((await sbx.files.getInfo('/home/user/tagged.txt')).metadata, { author: 'other' });
    await sbx.files.write('/home/user/tagged.txt', 'z');
    assert.equal((await sbx.files.getInfo('/home/user/tagged.txt')).metadata, undefined);
  });

  test('metadata is the user.e2b.* namespace, as E2B keeps it: an xattr set in the box is answered, other user.* ones are not', async () => {
    await sbx.files.write('/home/user/xattr.txt', 'x');
    const set = (name: string, value: string) => `import os; os.setxattr('/home/user/xattr.txt', '${name}', b'${value}')`;
    await sbx.commands.run(`python3 -c "${set('user.e2b.author', 'mish')}; ${set('user.other', 'no')}"`);
    assert.deepEqual((await sbx.files.getInfo('/home/user/xattr.txt')).metadata, { author: 'mish' });
    await sbx.files.write('/home/user/xattr.txt', 'y', { metadata: { purpose: 'check' } });
    const { stdout } = await sbx.commands.run(`python3 -c "import os; print(sorted(os.listxattr('/home/user/xattr.txt')))"`);
    assert.equal(stdout.trim(), "['user.e2b.purpose']");
  });

  test('watchDir with includeEntry: events carry the entry; allowNetworkMounts is accepted', async () => {
    await sbx.files.makeDir('/home/user/watched');
    const events: FilesystemEvent[] = [];
    const handle = await sbx.files.watchDir('/home/user/watched', (e) => void events.push(e), { includeEntry: true, allowNetworkMounts: true });
    try {
      await sbx.files.write('/home/user/watched/new.txt', 'abc');
      await waitFor(() => events.some((e) => e.name === 'new.txt' && e.entry !== undefined), `an event with an entry (have ${JSON.stringify(events)})`);
      const entry = events.find((e) => e.name === 'new.txt' && e.entry)!.entry!;
      assert.equal(entry.path, '/home/user/watched/new.txt');
      assert.equal(entry.owner, 'user');
      assert.equal(entry.type, FileType.FILE);
    } finally {
      await handle.stop();
    }
  });
});

describe('writes and removes as in E2B', () => {
  test('a write whose parents are missing creates them as root, each handed to the user (0755), the file too, even where the user could not', async () => {
    const sbx = await sandbox251();
    await sbx.files.write('/etc/made/by/envd.txt', 'deep');
    const ls = await sbx.commands.run("ls -ld /etc /etc/made /etc/made/by /etc/made/by/envd.txt | awk '{print $1, $3, $4}'");
    assert.equal(ls.stdout, 'drwxr-xr-x root root\ndrwxr-xr-x user user\ndrwxr-xr-x user user\n-rw-r--r-- user user\n');
    // A file of root's, replaced: handed to the user, as E2B's envd does.
    await sbx.commands.run('echo old > /etc/root-file; chmod 600 /etc/root-file', { user: 'root' });
    await sbx.files.write('/etc/root-file', 'new');
    assert.equal((await sbx.commands.run("ls -l /etc/root-file | awk '{print $1, $3}'", { user: 'root' })).stdout, '-rw------- user\n');
    // As root, everything stays root's.
    await sbx.files.write('/srv/as-root/f', 'r', { user: 'root' });
    assert.equal((await sbx.commands.run("ls -ld /srv/as-root /srv/as-root/f | awk '{print $3}'")).stdout, 'root\nroot\n');
  });

  test("a write as root follows no symlink of the user's: ~/out -> /etc cannot replace /etc/passwd or make dirs under /etc; root's links are followed", async () => {
    const sbx = await sandbox251();
    const passwd = (await sbx.commands.run('cat /etc/passwd', { user: 'root' })).stdout;
    await sbx.commands.run('ln -s /etc /home/user/out');
    const refused = async (write: Promise<unknown>) => {
      await assert.rejects(write, (err: Error) => {
        assert.match(err.message, /^403: permission denied: \/home\/user\/out is a symbolic link owned by uid 1000/);
        return true;
      });
    };
    await refused(sbx.files.write('/home/user/out/passwd', 'x'));
    await refused(sbx.files.write('/home/user/out/new/f', 'x'));
    // A signed upload URL without a path: the part's filename is the destination, under the same rule.
    const form = new FormData();
    form.append('file', new Blob(['x']), '/home/user/out/passwd');
    const res = await fetch(await sbx.uploadUrl(), { method: 'POST', body: form });
    assert.equal(res.status, 403, await res.clone().text());
    const after = await sbx.commands.run('cat /etc/passwd; stat -c %U /etc/passwd; ls -A /etc | grep -c -e "^new$" -e "^.sbx-tmp-" || true', { user: 'root' });
    assert.equal(after.stdout, `${passwd}root\n0\n`);
    // Root's own links (as /bin -> usr/bin in many images) are followed, relative ones too.
    await sbx.commands.run('mkdir -p /srv/target && ln -s /srv/target /home/user/rootlink && ln -s rootlink /home/user/rootrel', { user: 'root' });
    await sbx.files.write('/home/user/rootrel/sub/f', 'through');
    const ls = await sbx.commands.run("cat /srv/target/sub/f; echo; ls -ld /srv/target/sub /srv/target/sub/f | awk '{print $3}'", { user: 'root' });
    assert.equal(ls.stdout, 'through\nuser\nuser\n');
  });

  test('remove of a missing path is a silent no-op (2.51 and 2.31)', async () => {
    const sbx = await sandbox251();
    await sbx.files.remove('/home/user/never-was');
    await sbx.files.remove('/tmp/no/such/dir');
    const old = await sandbox231();
    await old.files.remove('/home/user/never-was');
  });
});

describe('signed file URLs', () => {
  let sbx: Sandbox;
  before(async () => {
    sbx = await sandbox251();
    await sbx.files.write('/home/user/shared.txt', 'shared content');
  });

  test('downloadUrl: the file at /files of the server root, with no header at all', async () => {
    const url = await sbx.downloadUrl('/home/user/shared.txt');
    assert.equal(new URL(url).pathname, '/files');
    assert.match(url, /signature=v1_/);
    const res = await fetch(url);
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(await res.text(), 'shared content');
    // With an expiration in the future, and as another user.
    const later = await fetch(await sbx.downloadUrl('/home/user/shared.txt', { useSignatureExpiration: 60, user: 'root' }));
    assert.equal(await later.text(), 'shared content');
  });

  test('uploadUrl: a multipart POST writes the file as the user, parents included', async () => {
    const url = await sbx.uploadUrl('/home/user/up/loaded.txt');
    const form = new FormData();
    form.append('file', new Blob(['uploaded']), 'loaded.txt');
    const res = await fetch(url, { method: 'POST', body: form });
    assert.equal(res.status, 200, await res.clone().text());
    const body = (await res.json()) as { path: string }[];
    assert.equal(body[0]!.path, '/home/user/up/loaded.txt');
    assert.equal(await sbx.files.read('/home/user/up/loaded.txt'), 'uploaded');
    assert.equal((await sbx.files.getInfo('/home/user/up')).owner, 'user');
  });

  test("uploadUrl: a `file` form field without a filename is the file, as E2B takes it (E2B's own SDK test sends one)", async () => {
    const url = await sbx.uploadUrl('/home/user/up/field.txt', { useSignatureExpiration: 60 });
    const form = new FormData();
    form.append('file', 'field content');
    form.append('other', 'ignored');
    const res = await fetch(url, { method: 'POST', body: form });
    assert.equal(res.status, 200, await res.clone().text());
    assert.deepEqual(await res.json(), [{ name: 'field.txt', path: '/home/user/up/field.txt', type: 'file' }]);
    assert.equal(await sbx.files.read('/home/user/up/field.txt'), 'field content');
  });

  test('refused with 401 naming why: unsigned, tampered, another operation, another path, expired', async () => {
    const refused = async (url: string, init?: RequestInit) => {
      const res = await fetch(url, init);
      return { status: res.status, message: ((await res.json()) as { message: string }).message };
    };
    const unsigned = await refused(`${srv.url}/files?path=/home/user/shared.txt`);
    assert.equal(unsigned.status, 401);
    assert.match(unsigned.message, /missing signature/);
    const good = new URL(await sbx.downloadUrl('/home/user/shared.txt'));
    const tampered = new URL(good);
    tampered.searchParams.set('signature', good.searchParams.get('signature')!.slice(0, -2) + 'AA');
    assert.match((await refused(tampered.toString())).message, /invalid signature/);
    const otherPath = new URL(good);
    otherPath.searchParams.set('path', '/etc/shadow');
    assert.equal((await refused(otherPath.toString())).status, 401);
    // A read URL does not write.
    const form = new FormData();
    form.append('file', new Blob(['x']), 'shared.txt');
    assert.equal((await refused(good.toString(), { method: 'POST', body: form })).status, 401);
    // Expired: signed by the SDK's own getSignature with an expiration already past.
    const token = await envdAccessToken(srv.manager, sbx.sandboxId, keyIdOf(srv.admin));
    const sig = await getSignature({ path: '/home/user/shared.txt', operation: 'read', user: undefined, expirationInSeconds: -10, envdAccessToken: token });
    const expired = new URL(`${srv.url}/files`);
    expired.searchParams.set('path', '/home/user/shared.txt');
    expired.searchParams.set('signature', sig.signature);
    expired.searchParams.set('signature_expiration', String(sig.expiration));
    const e = await refused(expired.toString());
    assert.deepEqual(e, { status: 401, message: 'signature is already expired' }); // E2B's words, whole
    // The same URL with an expiration ahead works (the signature covers it).
    const fresh = await getSignature({ path: '/home/user/shared.txt', operation: 'read', user: undefined, expirationInSeconds: 60, envdAccessToken: token });
    expired.searchParams.set('signature', fresh.signature);
    expired.searchParams.set('signature_expiration', String(fresh.expiration));
    assert.equal(await (await fetch(expired)).text(), 'shared content');
  });

  test('wrong signatures count toward the address limit: then 429 without the search, while a URL used before still works', async () => {
    const s = await startTestServer('envd06-limit', { serve: { authFailures: { max: 3, windowMs: 60_000 } } });
    try {
      const box = await s.manager.create({ image: testEnv.e2bImage });
      const opts = await sdkOptions(box.id, s);
      const own = new (Sandbox as unknown as new (o: Record<string, unknown>) => Sandbox)(opts);
      await own.files.write('/home/user/l.txt', 'limited');
      const used = await own.downloadUrl('/home/user/l.txt');
      assert.equal(await (await fetch(used)).text(), 'limited');
      const fresh = await own.downloadUrl('/home/user/l.txt', { user: 'root' });
      const forged = `${s.url}/files?path=/home/user/l.txt&signature=v1_${'A'.repeat(43)}`;
      for (let i = 0; i < 3; i++) assert.equal((await fetch(forged)).status, 401);
      const limited = await fetch(forged);
      assert.equal(limited.status, 429);
      assert.ok(Number(limited.headers.get('retry-after')) > 0);
      assert.equal(await (await fetch(used)).text(), 'limited', 'a URL that matched before is never locked out');
      assert.equal((await fetch(fresh)).status, 429, 'a URL never seen is not searched for from a limited address');
    } finally {
      await s.dispose();
    }
  });

  test('a killed sandbox’s URL no longer works; 2.31 builds the same URLs', async () => {
    const old = await sandbox231();
    await old.files.write('/home/user/old.txt', 'from 2.31');
    const url = await old.downloadUrl('/home/user/old.txt');
    assert.equal(await (await fetch(url)).text(), 'from 2.31');
    await (await srv.manager.get(old.sandboxId)).remove();
    assert.equal((await fetch(url)).status, 401);
  });
});

describe('a sandbox killed while a command runs', () => {
  const killedUnder = async (run: () => Promise<unknown>, sandboxId: string, started: () => Promise<boolean>) => {
    const outcome = run().then(
      (r) => ({ ok: r }),
      (err: unknown) => ({ err }),
    );
    const deadline = Date.now() + HANG_MS;
    while (!(await started())) if (Date.now() > deadline) assert.fail('the command did not start');
    await (await srv.manager.get(sandboxId)).remove();
    return outcome;
  };

  test('2.51: the run rejects as a sandbox that is gone (TimeoutError, "killed or reached its end of life", E2B\'s words after its health check), not with an exit code', async () => {
    const sbx = await sandbox251();
    const out = await killedUnder(
      () => sbx.commands.run('echo started; sleep 300'),
      sbx.sandboxId,
      async () => (await sbx.commands.list()).some((p) => p.args.join(' ').includes('sleep 300')),
    );
    assert.ok('err' in out, `the run ended normally: ${JSON.stringify(out)}`);
    assert.ok(!(out.err instanceof CommandExitError), `an exit: ${String(out.err)}`);
    assert.ok(out.err instanceof TimeoutError, String(out.err));
    assert.match(String(out.err), /The sandbox was killed or reached its end of life/);
  });

  test('2.51 background handle and 2.31: wait() rejects the same way', async () => {
    const sbx = await sandbox251();
    const h = await sbx.commands.run('sleep 300', { background: true });
    const waited = h.wait().then(
      () => undefined,
      (err: unknown) => err,
    );
    await (await srv.manager.get(sbx.sandboxId)).remove();
    const err = await waited;
    assert.ok(err instanceof TimeoutError, String(err));
    assert.match(String(err), /The sandbox was killed or reached its end of life/);

    const old = await sandbox231();
    const oh = await old.commands.run('sleep 300', { background: true });
    const oldWaited = oh.wait().then(
      () => undefined,
      (e: unknown) => e,
    );
    await (await srv.manager.get(old.sandboxId)).remove();
    const oldErr = (await oldWaited) as Error | undefined;
    assert.ok(oldErr && oldErr.name === 'TimeoutError', String(oldErr));
    assert.match(oldErr.message, /The sandbox was killed or reached its end of life/);
  });
});
