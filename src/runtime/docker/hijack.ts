import type { Duplex } from 'node:stream';
import type { DockerConnection } from './connection.js';
import { toSbxError } from './errors.js';

/**
 * Every read of a hijacked stream lands in one buffer of this size, reused for the whole
 * stream: a new Buffer per read (~4 KiB each, 47,000 for 200 MB of output) grew V8's young
 * generation to its largest for the whole exec (docs/benchmarks.md, MemoryExec200M).
 */
const READ_BUFFER_BYTES = 64 * 1024;
/** An answer's head (status line and headers) longer than this is not the engine's. */
const MAX_HEAD_BYTES = 16 * 1024;
/** An error answer's body is read up to this much (the engine's message is a line of JSON). */
const MAX_ERROR_BODY_BYTES = 64 * 1024;

/**
 * POSTs `path` asking for a protocol upgrade, on a connection of its own, and returns that
 * connection once the engine switched protocols. From then on every byte the engine sends goes
 * to `take` as it is read, in a buffer that is reused for the next read: `take` copies what it
 * keeps. `take` returning false pauses reading until the socket's `resume()`. Any other answer
 * rejects with the engine's message and status as an SbxError. Errors of the connection after
 * the upgrade only close it: the caller watches 'end' and 'close'.
 */
export async function hijack(conn: DockerConnection, path: string, body: unknown, what: string, take: (bytes: Buffer) => boolean): Promise<Duplex> {
  let onBytes: (bytes: Buffer) => boolean = () => true;
  const fail = (err: unknown) => toSbxError(err, conn.address.raw, what);
  const socket = await conn
    .connect({ buffer: Buffer.allocUnsafeSlow(READ_BUFFER_BYTES), callback: (n, buf) => onBytes(Buffer.from(buf.buffer, buf.byteOffset, n)) })
    .catch((err: unknown) => {
      throw fail(err);
    });
  socket.on('error', () => undefined);
  return new Promise((resolve, reject) => {
    let head = Buffer.alloc(0);
    let answer: { status: number; length: number | undefined; chunked: boolean; body: Buffer } | undefined;
    const refuse = (err: unknown) => {
      socket.off('close', closed);
      socket.destroy();
      reject(fail(err));
    };
    // Closed before a whole answer: what node:http calls a hang-up; after an error answer's head: its message as far as it came.
    const closed = () => (answer ? refuse(engineError(answer)) : refuse(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' })));
    socket.once('close', closed);
    socket.once('error', refuse);
    onBytes = (bytes) => {
      if (answer) {
        answer.body = Buffer.concat([answer.body, bytes]).subarray(0, MAX_ERROR_BODY_BYTES);
        if (complete(answer)) refuse(engineError(answer));
        return true;
      }
      head = Buffer.concat([head, bytes]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) {
        if (head.length > MAX_HEAD_BYTES) refuse(new Error(`the engine's answer to ${path} has no end of head in ${MAX_HEAD_BYTES} bytes`));
        return true;
      }
      const lines = head.toString('latin1', 0, end).split('\r\n');
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0]!)?.[1] ?? 0);
      const rest = Buffer.from(head.subarray(end + 4));
      if (status === 101) {
        socket.off('close', closed);
        socket.off('error', refuse);
        onBytes = take;
        resolve(socket);
        return rest.length === 0 || take(rest);
      }
      const header = (name: string) =>
        lines
          .find((l) => l.toLowerCase().startsWith(`${name}:`))
          ?.slice(name.length + 1)
          .trim();
      const length = header('content-length');
      answer = { status, length: length === undefined ? undefined : Number(length), chunked: /chunked/i.test(header('transfer-encoding') ?? ''), body: rest };
      if (complete(answer)) refuse(engineError(answer));
      return true;
    };
    const payload = JSON.stringify(body);
    const host = conn.address.transport === 'tcp' ? `${conn.address.host}:${conn.address.port}` : 'localhost';
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n` +
        `Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n${payload}`,
    );
  });
}

/** Whether an error answer's body is all there (without a length or chunks: when the engine closes). */
function complete(a: { length: number | undefined; chunked: boolean; body: Buffer }): boolean {
  if (a.body.length >= MAX_ERROR_BODY_BYTES) return true;
  if (a.chunked) return a.body.subarray(-5).toString('latin1') === '0\r\n\r\n';
  return a.length !== undefined && a.body.length >= a.length;
}

/** The error an answer other than 101 stands for, as dockerode's errors carry it (toSbxError reads both). */
function engineError(a: { status: number; chunked: boolean; body: Buffer }): { statusCode: number; json: { message: string } } {
  let message = (a.chunked ? dechunk(a.body) : a.body).toString('utf8');
  try {
    message = (JSON.parse(message) as { message?: string }).message ?? message;
  } catch {
    /* plain text body */
  }
  return { statusCode: a.status, json: { message } };
}

/** The payload of a chunked body (sizes in hex, each chunk followed by CRLF, a chunk of size 0 last). */
function dechunk(body: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = body.indexOf('\r\n', at);
    const size = eol < 0 ? 0 : parseInt(body.toString('latin1', at, eol), 16);
    if (!(size > 0)) return Buffer.concat(parts);
    parts.push(body.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}
