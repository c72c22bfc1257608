import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { jsonLines } from './json-lines.js';
import { toPullProgress } from './pull-progress.js';

// Recorded from Docker Engine 20.10 pulling from a registry whose blob store lost a layer.
const RECORDED = [
  '{"status":"Pulling from sbx/pulltest","id":"latest"}\r\n',
  '{"status":"Pulling fs layer","progressDetail":{},"id":"4f4fb700ef54"}\r\n{"status":"Downloading","progressDetail":{"current":32768,"total":1034291},"progress":"[=>   ]","id":"4f4fb700ef54"}\r\n',
  '{"status":"Downloading","progressDetail":{"current":10',
  '34291,"total":1034291},"id":"4f4fb700ef54"}\r\n',
  '{"errorDetail":{"message":"filesystem layer verification failed for digest sha256:4f4f"},"error":"filesystem layer verification failed for digest sha256:4f4f"}\r\n',
];

async function parse(chunks: string[]) {
  const events = [];
  for await (const line of jsonLines(Readable.from(chunks))) events.push(toPullProgress(line, 'r/x:1'));
  return events;
}

test('pull progress parser yields typed events, then throws on the error line', async () => {
  const seen: unknown[] = [];
  await assert.rejects(
    (async () => {
      for await (const line of jsonLines(Readable.from(RECORDED))) seen.push(toPullProgress(line, '127.0.0.1:5000/sbx/pulltest'));
    })(),
    (e) => isSbxError(e, 'internal') && /verification failed/.test(e.message) && e.message.includes('127.0.0.1:5000/sbx/pulltest'),
  );
  assert.deepEqual(seen, [
    { status: 'Pulling from sbx/pulltest', id: 'latest' },
    { status: 'Pulling fs layer', id: '4f4fb700ef54' },
    { status: 'Downloading', id: '4f4fb700ef54', current: 32768, total: 1034291 },
    { status: 'Downloading', id: '4f4fb700ef54', current: 1034291, total: 1034291 },
  ]);
});

test('pull error lines map to stable codes', async () => {
  await assert.rejects(parse(['{"error":"manifest for r/x:1 not found: manifest unknown"}\n']), (e) => isSbxError(e, 'not_found'));
  await assert.rejects(parse(['{"error":"unauthorized: authentication required"}\n']), (e) => isSbxError(e, 'unauthorized'));
  await assert.rejects(parse(['{"error":"toomanyrequests: You have reached your pull rate limit."}\n']), (e) => isSbxError(e, 'limit_exceeded'));
});

test('a registry the engine cannot reach is not_available naming its host, whatever the reason', async () => {
  // Docker Engine 20.10's words, recorded.
  for (const [text, registry] of [
    ['Get \\"https://registry-1.docker.io/v2/\\": dial tcp: lookup registry-1.docker.io on 10.0.0.53:53: no such host', 'registry-1.docker.io'],
    ['Get \\"http://127.0.0.1:5999/v2/\\": dial tcp 127.0.0.1:5999: connect: connection refused', '127.0.0.1:5999'],
    ['Get \\"https://r.example/v2/\\": net/http: request canceled while waiting for connection (Client.Timeout exceeded while awaiting headers)', 'r.example'],
    ['Get \\"https://r.example/v2/\\": http: server gave HTTP response to HTTPS client', 'r.example'],
  ]) {
    await assert.rejects(
      parse([`{"error":"${text}"}\n`]),
      (e) => isSbxError(e, 'not_available') && e.details?.['registry'] === registry && e.message.includes(`registry ${registry} cannot be reached`),
      text,
    );
  }
});

test('a clean pull yields every event and no error', async () => {
  const events = await parse(['{"status":"Digest: sha256:ab"}\n{"status":"Status: Downloaded newer image for r/x:1"}\n']);
  assert.equal(events.length, 2);
  assert.equal(events[1]?.status, 'Status: Downloaded newer image for r/x:1');
});
