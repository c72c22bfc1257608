import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { isSbxError } from '../errors.js';
import { portTokenKey, signPortToken, verifyPortToken } from './port-tokens.js';

const key = portTokenKey(randomBytes(32));
const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const grant = { boxId: 'sb-a.1', nonce: 'n0nce-A_1', port: 3000, expiresAt: 2_000, keyId: '0123456789abcdef' };

test('a port token verifies for its box and port until it expires, and names the box nonce and the key', () => {
  const t = signPortToken(key, grant);
  assert.match(t, /^sbxp2\./);
  assert.deepEqual(verifyPortToken(key, t, { boxId: 'sb-a.1', port: 3000, now: 1_999 }), grant);
  const keyless = signPortToken(key, { ...grant, keyId: '' });
  assert.equal(verifyPortToken(key, keyless, { boxId: 'sb-a.1', port: 3000, now: 0 }).keyId, '');
  assert.throws(
    () => verifyPortToken(key, t, { boxId: 'sb-a.1', port: 3000, now: 2_000 }),
    (e) => isSbxError(e, 'unauthorized') && /expired/.test(e.message),
  );
});

test('a valid port token for another port or box is forbidden', () => {
  const t = signPortToken(key, grant);
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
  const t = signPortToken(key, grant);
  const [p, id, nonce, port, exp, keyId, mac] = t.split('.');
  const altered = [
    `${p}.${id}.${nonce}.3001.${exp}.${keyId}.${mac}`,
    `${p}.${id}.${nonce}.${port}.9999999.${keyId}.${mac}`,
    `${p}.${Buffer.from('sb-b').toString('base64url')}.${nonce}.${port}.${exp}.${keyId}.${mac}`,
    `${p}.${id}.other.${port}.${exp}.${keyId}.${mac}`,
    `${p}.${id}.${nonce}.${port}.${exp}.fedcba9876543210.${mac}`,
    `${p}.${id}.${nonce}.${port}.${exp}..${mac}`,
    // Another MAC: its first character changed (a fixed 'AA' ending was the MAC itself 1 time in 256).
    `${p}.${id}.${nonce}.${port}.${exp}.${keyId}.${mac![0] === 'A' ? 'B' : 'A'}${mac!.slice(1)}`,
    // The same MAC spelled otherwise: the last character's spare bits set (decodes to the same bytes).
    `${p}.${id}.${nonce}.${port}.${exp}.${keyId}.${mac!.slice(0, -1)}${B64URL[B64URL.indexOf(mac!.at(-1)!) ^ 1]}`,
    // The format before tokens were bound to the box's life and the key.
    `sbxp1.${id}.${port}.${exp}.${mac}`,
    'sbxp2.x.1.2',
    '',
    'Bearer x',
    t + '.x',
    `sbxb1.${id}.${nonce}.${port}.${exp}.${keyId}.${mac}`,
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
