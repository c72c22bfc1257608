// The Manager's trust in its nodes: one-time join tokens, names that cannot be taken over,
// credentials kept as hashes, revocation; on disk and back.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { createIdentity } from './identity.js';
import { TrustStore } from './trust-store.js';

const dirs: string[] = [];
after(async () => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));
async function store(now?: () => number): Promise<{ s: TrustStore; dir: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'sbx-trust-'));
  dirs.push(dir);
  return { s: new TrustStore(dir, now), dir };
}
const cert = (await createIdentity('node')).cert;

describe('TrustStore', () => {
  test('a join token admits one node once: the replay is refused, even for another name', async () => {
    const { s } = await store();
    const { token } = await s.createJoinToken();
    const { credential, record } = await s.join({ token, name: 'n1', mode: 'reverse', cert });
    assert.match(credential, /^sbxnode_/);
    assert.equal(s.verify('n1', credential), true);
    assert.equal(record.credentialHash.includes(credential), false);
    await assert.rejects(s.join({ token, name: 'n2', mode: 'reverse', cert }), (e) => isSbxError(e, 'unauthorized'));
    await assert.rejects(s.join({ token: 'sbxjoin_forged', name: 'n3', mode: 'reverse', cert }), (e) => isSbxError(e, 'unauthorized'));
  });

  test('a joined name is never taken over, not even after revocation; a forged credential does not verify', async () => {
    const { s } = await store();
    await s.join({ token: (await s.createJoinToken()).token, name: 'gpu', mode: 'direct', address: '10.0.0.2:7443', cert });
    const other = (await createIdentity('intruder')).cert;
    await assert.rejects(
      s.join({ token: (await s.createJoinToken()).token, name: 'gpu', mode: 'reverse', cert: other }),
      (e) => isSbxError(e, 'conflict') && e.details?.['node'] === 'gpu',
    );
    assert.equal(s.get('gpu')!.cert, cert, 'the pinned certificate is the first node’s');
    assert.equal(s.verify('gpu', 'sbxnode_forged'), false);
    await s.revoke('gpu');
    await assert.rejects(s.join({ token: (await s.createJoinToken()).token, name: 'gpu', mode: 'reverse', cert: other }), (e) => isSbxError(e, 'conflict'));
    // Nor is its certificate or address: another name with either would capture its connections.
    await assert.rejects(
      s.join({ token: (await s.createJoinToken()).token, name: 'gpu2', mode: 'reverse', cert }),
      (e) => isSbxError(e, 'conflict') && e.details?.['node'] === 'gpu',
    );
    await assert.rejects(s.join({ token: (await s.createJoinToken()).token, name: 'gpu3', mode: 'direct', address: '10.0.0.2:7443', cert: other }), (e) =>
      isSbxError(e, 'conflict'),
    );
    await assert.rejects(
      s.join({ token: (await s.createJoinToken()).token, name: 'gpu4', mode: 'direct', address: '10.0.0.3:0', cert: other }),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'address',
    );
    await s.join({ token: (await s.createJoinToken()).token, name: 'gpu5', mode: 'reverse', cert: other });
  });

  test('a revoked node no longer verifies; an expired token is refused; bad input is invalid_argument and keeps the token', async () => {
    let now = Date.parse('2026-01-01T00:00:00Z');
    const { s } = await store(() => now);
    const { token, expiresAt } = await s.createJoinToken(60_000);
    assert.equal(expiresAt, '2026-01-01T00:01:00.000Z');
    now += 60_001;
    await assert.rejects(s.join({ token, name: 'late', mode: 'reverse', cert }), (e) => isSbxError(e, 'unauthorized'));
    const t2 = (await s.createJoinToken()).token;
    await assert.rejects(s.join({ token: t2, name: 'Bad Name', mode: 'reverse', cert }), (e) => isSbxError(e, 'invalid_argument'));
    await assert.rejects(s.join({ token: t2, name: 'x', mode: 'reverse', cert: 'not a cert' }), (e) => isSbxError(e, 'invalid_argument'));
    await assert.rejects(s.join({ token: t2, name: 'x', mode: 'direct', cert }), (e) => isSbxError(e, 'invalid_argument'));
    const { credential } = await s.join({ token: t2, name: 'r', mode: 'reverse', cert: (await createIdentity('r')).cert });
    await s.revoke('r');
    assert.equal(s.verify('r', credential), false);
  });

  test('what is kept survives a restart, hashed, in a 0600 file', async () => {
    const { s, dir } = await store();
    const { token } = await s.createJoinToken();
    const { credential } = await s.join({ token, name: 'kept', mode: 'direct', address: 'node.example:7443', cert });
    await s.setDraining('kept', true);
    const file = join(dir, 'nodes', 'nodes.json');
    const text = await readFile(file, 'utf8');
    assert.equal(text.includes(credential), false, 'no credential on disk');
    assert.equal(text.includes(token), false, 'no token on disk');
    const again = new TrustStore(dir);
    await again.load();
    assert.equal(again.verify('kept', credential), true);
    assert.equal(again.get('kept')!.draining, true);
    assert.equal(again.get('kept')!.address, 'node.example:7443');
    const { stat } = await import('node:fs/promises');
    assert.equal((await stat(file)).mode & 0o777, 0o600);
  });
});
