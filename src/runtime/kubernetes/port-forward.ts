/**
 * A TCP connection to a port of a pod through the API server's port-forward
 * (`/pods/<name>/portforward?ports=<p>` over WebSocket, protocol `v4.channel.k8s.io`): channel 0
 * carries the data, channel 1 the kubelet's error text; each may first carry the port number
 * (2 bytes, little-endian, a message of its own). There is no half-close: ending the write side is kept until
 * the connection is closed by either side, and the end of the read side ends both (as a
 * net.Socket without allowHalfOpen), so the Duplex closes.
 */
import { Duplex } from 'node:stream';
import { SbxError } from '../../errors.js';
import type { KubeConnection } from './connection.js';
import { frame } from './exec-channel.js';

export const PORT_FORWARD_PROTOCOLS = ['v4.channel.k8s.io'];

export async function portForward(conn: KubeConnection, pod: string, port: number, signal?: AbortSignal): Promise<Duplex> {
  const path = `/api/v1/namespaces/${encodeURIComponent(conn.namespace)}/pods/${encodeURIComponent(pod)}/portforward?ports=${port}`;
  const ws = await conn.openWebSocket(path, PORT_FORWARD_PROTOCOLS, `port-forward to port ${port} of pod ${pod}`, signal);
  const duplex = new Duplex({
    allowHalfOpen: false,
    read() {
      ws.resume();
    },
    write(chunk: Buffer, _enc, cb) {
      ws.send(frame(0, chunk), (err) => cb(err ?? null));
    },
    final(cb) {
      cb();
    },
    destroy(err, cb) {
      ws.terminate();
      cb(err);
    },
  });
  const isPrefix = portPrefix(port);
  ws.on('message', (raw: Buffer, isBinary: boolean) => {
    if (!isBinary || raw.length === 0) return;
    const channel = raw[0]!;
    const payload = raw.subarray(1);
    if (isPrefix(channel, payload)) return;
    if (payload.length === 0) return;
    if (channel === 0 && !duplex.push(payload)) ws.pause();
    // The kubelet could not connect (nothing listens) or lost the connection.
    if (channel === 1) {
      duplex.destroy(
        new SbxError('not_available', `port ${port} of pod ${pod} is not listening (${payload.toString('utf8').trim()})`, {
          details: { id: pod, port, reason: 'port_not_listening' },
        }),
      );
    }
  });
  ws.on('close', () => duplex.push(null));
  ws.on('error', (err) => duplex.destroy(err));
  return duplex;
}

/**
 * Tells the port number's message from data: the port (2 bytes, little-endian) is the first
 * message of each channel, a message of its own, when it comes at all (on the test cluster, 1.36,
 * it sometimes did not). Only the first message of a channel is looked at, so later data from the
 * box, whatever its bytes, is never taken for it.
 */
export function portPrefix(port: number): (channel: number, payload: Buffer) => boolean {
  const portBytes = Buffer.from([port & 0xff, port >> 8]);
  const seen = [false, false];
  return (channel, payload) => {
    if (channel > 1 || seen[channel]) return false;
    seen[channel] = true;
    return payload.length === 2 && payload.equals(portBytes);
  };
}
