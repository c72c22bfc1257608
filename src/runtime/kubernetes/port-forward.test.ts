// The port number's message of the port-forward protocol against data that looks like it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { portPrefix } from './port-forward.js';

const port = 43011;
const prefix = Buffer.from([port & 0xff, port >> 8]);

test('the first message of each channel, when it is the port, is the prefix', () => {
  const isPrefix = portPrefix(port);
  assert.equal(isPrefix(0, prefix), true);
  assert.equal(isPrefix(1, prefix), true);
});

test('data that looks like the prefix later on a channel is data, with or without a prefix before it', () => {
  const after = portPrefix(port);
  assert.equal(after(0, prefix), true);
  assert.equal(after(0, Buffer.from('data')), false);
  assert.equal(after(0, prefix), false, 'the same two bytes again are data');
  const without = portPrefix(port);
  assert.equal(without(0, Buffer.from([0x81, 0, 0, 0, 1, 0x7b])), false, 'the server sent no prefix: the first message is data');
  assert.equal(without(0, prefix), false, 'and so is a later message of exactly the port bytes');
});

test('only channels 0 and 1 carry a prefix; another port is data', () => {
  const isPrefix = portPrefix(port);
  assert.equal(isPrefix(2, prefix), false);
  assert.equal(portPrefix(8080)(0, prefix), false);
});
