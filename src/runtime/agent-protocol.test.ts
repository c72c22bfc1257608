// The host's reader of agent frames takes nothing on trust: a box can stand in for its agent
// (or a broken transport can misalign the stream), and that must fail one exec, not the process.
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { AgentFrameReader, F, frame } from './agent-protocol.js';

function read(bytes: Buffer, onControl: (type: number, payload: Buffer) => void = (_t, p) => JSON.parse(p.toString())): Promise<Error | undefined> {
  const reader = new AgentFrameReader(new PassThrough(), new PassThrough(), onControl);
  return new Promise((resolve) => {
    reader.once('error', resolve);
    reader.once('finish', () => resolve(undefined));
    reader.end(bytes);
  });
}

test('a control frame whose payload the handler cannot take is an error of the reader, not an exception', async () => {
  const err = await read(frame(F.started, 'not json'));
  assert.match(String(err), /malformed frame of type 0x82/);
});

test('a frame of a type no agent sends is an error', async () => {
  assert.match(String(await read(frame(0x99, '{}'))), /unknown type 0x99/);
  // Host-to-agent types coming back are unknown too.
  assert.match(String(await read(frame(F.start, '{}'))), /unknown type 0x2/);
});

test('well-formed frames pass: output to its side, control to the handler', async () => {
  const out = new PassThrough();
  const seen: number[] = [];
  const reader = new AgentFrameReader(out, new PassThrough(), (t) => seen.push(t));
  const chunks: Buffer[] = [];
  out.on('data', (c: Buffer) => chunks.push(c));
  reader.end(Buffer.concat([frame(F.helloOk, '{}'), frame(F.stdout, 'hi'), frame(F.exit, '{"exitCode":0}')]));
  await new Promise((r) => reader.once('finish', r));
  assert.deepEqual(seen, [F.helloOk, F.exit]);
  assert.equal(Buffer.concat(chunks).toString(), 'hi');
});
