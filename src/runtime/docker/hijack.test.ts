/**
 * The hijacked start request against a stand-in engine on a unix socket: the answers the real
 * engine gives (an upgrade with output in the same packet as its head, errors with a length or
 * in chunks) and one it should not (hanging up without an answer).
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { parseRuntimeAddress } from './address.js';
import { DockerConnection } from './connection.js';
import { hijack } from './hijack.js';

const dir = mkdtempSync(join(tmpdir(), 'sbx-hijack-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let served = 0;

/** A stand-in engine that reads one request head and body, then writes `answer` (in pieces, each its own write). */
async function engine(answer: Array<string | Buffer>, then: 'keep' | 'close' = 'keep'): Promise<{ conn: DockerConnection; request: Promise<string> }> {
  const path = join(dir, `e${served++}.sock`);
  let got!: (s: string) => void;
  const request = new Promise<string>((resolve) => (got = resolve));
  const server = net.createServer((s) => {
    let text = '';
    s.on('data', (c: Buffer) => {
      text += c.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? 0);
      if (end < 0 || text.length < end + 4 + length) return;
      got(text);
      for (const piece of answer) s.write(piece);
      if (then === 'close') s.end();
    });
    s.on('error', () => undefined);
  });
  server.listen(path);
  await once(server, 'listening');
  after(() => server.close());
  const conn = new DockerConnection(parseRuntimeAddress(`unix://${path}`));
  after(() => conn.close());
  return { conn, request };
}

/** Hijacks and collects what `take` is given (copied: the buffer is reused) until the stream ends. */
async function collect(conn: DockerConnection): Promise<Buffer> {
  const got: Buffer[] = [];
  const socket = await hijack(conn, '/exec/abc/start', { Detach: false, Tty: false }, 'exec in container c1', (bytes) => {
    got.push(Buffer.from(bytes));
    return true;
  });
  await once(socket, 'close');
  return Buffer.concat(got);
}

test('an upgrade hands on every byte after the head, output in the head packet too; the request is the engine API call', async () => {
  const output = Buffer.alloc(300_000);
  for (let i = 0; i < output.length; i++) output[i] = (i * 31) & 0xff;
  const head = 'HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n';
  const { conn, request } = await engine([Buffer.concat([Buffer.from(head), output.subarray(0, 7)]), output.subarray(7)], 'close');
  const bytes = await collect(conn);
  assert.ok(bytes.equals(output), `${bytes.length} of ${output.length} bytes, exact`);
  const req = await request;
  assert.match(req, /^POST \/exec\/abc\/start HTTP\/1\.1\r\n/);
  assert.match(req, /\r\nUpgrade: tcp\r\n/);
  assert.ok(req.endsWith('\r\n\r\n{"Detach":false,"Tty":false}'));
});

test("an error answer with a length is the engine's message under a stable code", async () => {
  const body = '{"message":"No such exec instance: abc"}\n';
  const { conn } = await engine([`HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`, body]);
  await assert.rejects(collect(conn), (e) => isSbxError(e, 'not_found') && e.message === 'exec in container c1: No such exec instance: abc');
});

test('an error answer in chunks, split anywhere, is read whole', async () => {
  const message = `container c1 is paused ${'x'.repeat(3000)}`;
  const json = JSON.stringify({ message });
  const body = `${(1000).toString(16)}\r\n${json.slice(0, 1000)}\r\n${(json.length - 1000).toString(16)}\r\n${json.slice(1000)}\r\n0\r\n\r\n`;
  const answer = `HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n${body}`;
  const { conn } = await engine([answer.slice(0, 60), answer.slice(60, 1500), answer.slice(1500)]);
  await assert.rejects(collect(conn), (e) => isSbxError(e, 'conflict') && e.message === `exec in container c1: ${message}`);
});

test('an engine that hangs up without an answer is unavailable; one that is not there too', async () => {
  const { conn } = await engine([], 'close');
  await assert.rejects(collect(conn), (e) => isSbxError(e, 'runtime_unavailable'));
  const none = new DockerConnection(parseRuntimeAddress(`unix://${join(dir, 'none.sock')}`));
  await assert.rejects(collect(none), (e) => isSbxError(e, 'runtime_unavailable'));
});
