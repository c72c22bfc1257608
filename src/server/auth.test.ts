/** FailureLimiter on a manual clock: failures counted per address, valid credentials never refused. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SbxError, isSbxError } from '../errors.js';
import { FailureLimiter } from './auth.js';

const bad = () => Promise.reject(new SbxError('unauthorized', 'bad key'));

test('over the limit a failing attempt is limit_exceeded until its failures age out; a valid one always passes', async () => {
  let now = 0;
  const limiter = new FailureLimiter(3, 1_000, () => now);
  for (let i = 0; i < 3; i++) {
    now += 100;
    await assert.rejects(limiter.guard('a', bad), (e) => isSbxError(e, 'unauthorized'));
  }
  await assert.rejects(limiter.guard('a', bad), (e) => isSbxError(e, 'limit_exceeded') && e.details?.['retryAfterMs'] === 900);
  assert.equal(await limiter.guard('a', () => 'ok'), 'ok', 'a valid credential from the same address');
  await assert.rejects(limiter.guard('b', bad), (e) => isSbxError(e, 'unauthorized'), 'another address is not limited');
  // Not an authentication failure: passes through, not counted.
  await assert.rejects(
    limiter.guard('c', () => Promise.reject(new SbxError('not_found', 'gone'))),
    (e) => isSbxError(e, 'not_found'),
  );
  // Failures while limited count too (the latest three): the address waits for the oldest of them.
  now = 1_199;
  await assert.rejects(limiter.guard('a', bad), (e) => isSbxError(e, 'limit_exceeded') && e.details?.['retryAfterMs'] === 101);
  now = 1_300;
  await assert.rejects(limiter.guard('a', bad), (e) => isSbxError(e, 'unauthorized'), 'aged out');
});
