/**
 * The key store's two spellings of one key: `sbxk_<id>_<base64url>` and the e2b SDK's
 * `e2b_<id><hex>`. One record, one hash; revoking the key ends both.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { KeyStore } from './keys.js';

const dataDir = mkdtempSync(join(tmpdir(), 'sbx-keys-'));
after(() => rmSync(dataDir, { recursive: true, force: true }));

test('a new key comes in both spellings, and both verify as the same principal', async () => {
  const store = new KeyStore(dataDir);
  const made = await store.create({ name: 'alice', role: 'user' });
  assert.match(made.key, /^sbxk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);
  assert.match(made.e2bKey, /^e2b_[0-9a-f]{80}$/);
  assert.equal(made.e2bKey.slice(4, 20), made.id);
  const viaSbx = store.verify(made.key);
  const viaE2b = store.verify(made.e2bKey);
  assert.deepEqual(viaE2b, viaSbx);
  assert.equal(viaE2b?.owner, 'alice');
  // Only the hash is stored: neither spelling is on disk.
  const file = readFileSync(store.file, 'utf8');
  assert.ok(!file.includes(made.key.slice(22)) && !file.includes(made.e2bKey.slice(20)));
});

test('a wrong or malformed e2b spelling is refused; revoking ends both spellings', async () => {
  const store = new KeyStore(dataDir);
  await store.load();
  const made = await store.create({ name: 'bob', role: 'user' });
  const last = made.e2bKey.at(-1) === '0' ? '1' : '0';
  for (const bad of [
    made.e2bKey.slice(0, -1) + last, // another secret
    made.e2bKey.slice(0, -1), // too short
    made.e2bKey + '0', // too long
    made.e2bKey.toUpperCase().replace('E2B_', 'e2b_'), // hex is lower case
    `e2b_${'0'.repeat(16)}${made.e2bKey.slice(20)}`, // another id
    'e2b_',
  ]) {
    assert.equal(store.verify(bad), undefined, bad);
  }
  await store.remove(made.id);
  assert.equal(store.verify(made.key), undefined);
  assert.equal(store.verify(made.e2bKey), undefined);
});

test('a restarted store (same file) verifies the e2b spelling', async () => {
  const first = new KeyStore(dataDir);
  await first.load();
  const made = await first.create({ name: 'carol', role: 'admin' });
  const second = new KeyStore(dataDir);
  await second.load();
  assert.equal(second.verify(made.e2bKey)?.role, 'admin');
});
