/**
 * The node's writes to an exec's stdin and a dialed socket wait for room, on a real TCP socket:
 * many writes over a slow link leave no listeners behind (each wait used to leave two until the
 * socket closed), and a socket that closes ends the wait.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { after, before, test } from 'node:test';
import { within } from '../testing/wait.js';
import { writeWithBackpressure } from './routes.js';

let server: Server;
let peer: Promise<Socket>;
let port: number;

before(async () => {
  let accept!: (s: Socket) => void;
  peer = new Promise((resolve) => (accept = resolve));
  server = createServer(accept);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  port = (server.address() as { port: number }).port;
});

after(() => server.close());

test('a thousand writes, many of them waiting for room, leave the socket with the listeners it had', async () => {
  const sock = connect({ port, host: '127.0.0.1' });
  await once(sock, 'connect');
  const far = await peer;
  let received = 0;
  far.on('data', (c: Buffer) => (received += c.length));
  // Each drain is a write that had to wait for room (the kernel took the others at once).
  let drains = 0;
  sock.on('drain', () => drains++);
  const before = [sock.listenerCount('close'), sock.listenerCount('error'), sock.listenerCount('drain')];
  const chunk = Buffer.alloc(256 * 1024, 1);
  for (let i = 0; i < 1000; i++) await within(writeWithBackpressure(sock, chunk), `write ${i}`);
  assert.ok(drains >= 20, `only ${drains} of 1000 writes waited for room`);
  assert.deepEqual([sock.listenerCount('close'), sock.listenerCount('error'), sock.listenerCount('drain')], before);
  sock.end();
  await within(
    (async () => {
      while (received < 1000 * chunk.length) await once(far, 'data');
    })(),
    'every byte at the far end',
  );
  far.destroy();
});

test('a socket that closes during the wait ends it', async () => {
  peer = new Promise((resolve) => server.once('connection', resolve));
  const sock = connect({ port, host: '127.0.0.1' });
  await once(sock, 'connect');
  const far = await peer;
  far.pause(); // reads nothing: the write waits
  sock.on('error', () => undefined);
  let wrote: Promise<void> = Promise.resolve();
  for (let i = 0; i < 100; i++) {
    wrote = writeWithBackpressure(sock, Buffer.alloc(1024 * 1024));
    if (sock.writableNeedDrain) break;
  }
  assert.ok(sock.writableNeedDrain, 'the socket took every write without waiting');
  sock.destroy();
  await within(wrote, 'the write to end once its socket closed');
  far.destroy();
});
