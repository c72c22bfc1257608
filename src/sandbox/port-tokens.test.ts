import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { isSbxError } from '../errors.js';
import { portTokenKey, signPortToken, verifyPortToken } from './port-tokens.js';

const key = portTokenKey(randomBytes(32));
const claim = { boxId: 'sb-a.1', port: 3000, expiresAt: 2_000 };

test('a port token verifies for its box and port until it expires', () => {
  const t = signPortToken(key, claim);
  assert.match(t, /^sbxp1\./);
  verifyPortToken(key, t, { boxId: 'sb-a.1', port: 3000, now: 1_999 });
  assert.throws(
    () => verifyPortToken(key, t, { boxId: 'sb-a.1', port: 3000, now: 2_000 }),
    (e) => isSbxError(e, 'unauthorized') && /expired/.test(e.message),
  );
});

test('a valid port token for another port or box is forbidden', () => {
  const t = signPortToken(key, claim);
  assert.throws(
    () => verifyPortToken(key, t, { boxId: 'sb-a.1', port: 3001, now: 0 }),
    (e) => isSbxError(e, 'forbidden'),
  );
  assert.throws(
    () => verifyPortToken(key, t, { boxId: 'sb-b', port: 3000, now: 0 }),
    (e) => isSbxError(e, 'forbidden'),
  );
});

test('forged, altered, malformed tokens and other keys are unauthorized', () => {
  const t = signPortToken(key, claim);
  const [p, id, port, exp, mac] = t.split('.');
  const altered = [
    `${p}.${id}.3001.${exp}.${mac}`,
    `${p}.${id}.${port}.9999999.${mac}`,
    `${p}.${Buffer.from('sb-b').toString('base64url')}.${port}.${exp}.${mac}`,
    `${p}.${id}.${port}.${exp}.${mac!.slice(0, -2)}AA`,
    'sbxp1.x.1.2',
    '',
    'Bearer x',
    t + '.x',
    `sbxb1.${id}.${port}.${exp}.${mac}`,
  ];
  for (const bad of altered)
    assert.throws(
      () => verifyPortToken(key, bad, { boxId: 'sb-a.1', port: 3000, now: 0 }),
      (e) => isSbxError(e, 'unauthorized'),
      bad,
    );
  const other = portTokenKey(randomBytes(32));
  assert.throws(
    () => verifyPortToken(other, t, { boxId: 'sb-a.1', port: 3000, now: 0 }),
    (e) => isSbxError(e, 'unauthorized'),
  );
});

test('the port-token key is derived from the secret, not the secret itself', () => {
  const secret = randomBytes(32);
  assert.notDeepEqual(portTokenKey(secret), secret);
  assert.deepEqual(portTokenKey(secret), portTokenKey(Buffer.from(secret)));
});
