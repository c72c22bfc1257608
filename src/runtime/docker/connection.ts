import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { OnReadOpts } from 'node:net';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import { inspect } from 'node:util';
import Docker from 'dockerode';
import { invalidArgument } from '../../errors.js';
import type { RuntimeOptions, TlsOptions } from '../types.js';
import type { RuntimeAddress } from './address.js';
import { NO_ANSWER } from './errors.js';

/**
 * One engine endpoint: a dockerode client for plain calls and raw connections for the hijacked
 * exec streams, both aimed at the same address.
 */
export class DockerConnection {
  readonly docker: Docker;
  private readonly agent: http.Agent;
  private readonly tls: TlsOptions | undefined;

  constructor(
    readonly address: RuntimeAddress,
    options: RuntimeOptions = {},
  ) {
    const maxSockets = options.maxConnections ?? 10;
    const tls = address.transport === 'tcp' && address.tls ? resolveTls(options.tls) : undefined;
    this.tls = tls;
    this.agent = tls ? new https.Agent({ keepAlive: true, maxSockets, ...tls }) : new http.Agent({ keepAlive: true, maxSockets });
    const answerTimeoutMs = options.answerTimeoutMs ?? DEFAULT_ANSWER_TIMEOUT_MS;
    if (!Number.isInteger(answerTimeoutMs) || answerTimeoutMs <= 0)
      throw invalidArgument('answerTimeoutMs', `must be a positive whole number of ms, not ${answerTimeoutMs}`);
    answerReadsWithin(this.agent, answerTimeoutMs);
    // docker-modem util.inspect()s every request's options (the agent and all its sockets
    // included) even with debug off: 13x raw's client CPU on 50 parallel execs (bench).
    Object.defineProperty(this.agent, inspect.custom, { value: () => `[docker agent ${address.raw}]` });
    switch (address.transport) {
      case 'unix':
        this.docker = new Docker({ socketPath: address.socketPath, agent: this.agent } as Docker.DockerOptions);
        break;
      case 'tcp':
        this.docker = new Docker({
          host: address.host,
          port: address.port,
          protocol: tls ? 'https' : 'http',
          agent: this.agent,
          ...(tls ?? {}),
        } as Docker.DockerOptions);
        break;
      case 'ssh':
        // docker-modem tunnels every request through `docker system dial-stdio` over ssh2.
        this.docker = new Docker({
          protocol: 'ssh',
          host: address.host,
          port: address.port,
          ...(address.username ? { username: address.username } : {}),
          sshOptions: { agent: process.env['SSH_AUTH_SOCK'] },
        } as Docker.DockerOptions);
        break;
    }
  }

  /**
   * A connection of its own to the engine (never pooled: a hijacked stream takes it over). Every
   * read lands in `reads.buffer`, the same buffer for the whole connection, and is handed to
   * `reads.callback`; its false pauses reading until `resume()`. An ssh engine's tunnel (docker-
   * modem's `docker system dial-stdio` over ssh2) is no socket: its chunks go to the same callback.
   */
  connect(reads: OnReadOpts): Promise<Duplex> {
    const address = this.address;
    switch (address.transport) {
      case 'unix':
        return Promise.resolve(net.connect({ path: address.socketPath, onread: reads }));
      case 'tcp': {
        const { host, port } = address;
        if (!this.tls) return Promise.resolve(net.connect({ host, port, noDelay: true, onread: reads }));
        // tls.connect takes onread as net.connect does (its types leave it out).
        return Promise.resolve(
          tls.connect({ host, port, noDelay: true, ...(net.isIP(host) ? {} : { servername: host }), ...this.tls, onread: reads } as tls.ConnectionOptions),
        );
      }
      case 'ssh': {
        const modemAgent = (this.docker.modem as unknown as { agent: { createConnection(o: object, cb: (err: Error | null, s: Duplex) => void): void } }).agent;
        return new Promise((resolve, reject) =>
          modemAgent.createConnection({}, (err, stream) => {
            if (err) return reject(err);
            stream.on('data', (chunk: Buffer) => {
              if (reads.callback(chunk.length, chunk) === false) stream.pause();
            });
            resolve(stream);
          }),
        );
      }
    }
  }

  close(): void {
    this.agent.destroy();
  }
}

/** How long a read waits for the engine's answer by default: only a stuck engine takes this long. */
export const DEFAULT_ANSWER_TIMEOUT_MS = 60_000;

/**
 * Every GET through `agent` (inspect, list, info, stats, top, logs) fails once its connection
 * waited `timeoutMs` for the answer's head: a stuck engine (Docker 20.10's libnetwork deadlock
 * holds a container's lock for good while `/_ping` still answers) then gives callers an error
 * instead of a call that never returns. The request is destroyed, which frees its place in the
 * pool. Only reads: a create, commit, stop or removal may take long before its answer, and a
 * stream's head comes at once (the engine flushes it before the first log line or event). The
 * clock starts when the request has a socket, so a pool at its limit is not the engine's delay.
 */
function answerReadsWithin(agent: http.Agent, timeoutMs: number): void {
  // addRequest is how http.request hands a request to its agent (Node's, not in its types).
  type AddRequest = (req: http.ClientRequest, ...rest: unknown[]) => void;
  const hooked = agent as unknown as { addRequest: AddRequest };
  const add = hooked.addRequest.bind(agent);
  hooked.addRequest = (req, ...rest) => {
    if (req.method === 'GET') {
      req.once('socket', () => {
        const timer = setTimeout(() => {
          const err = Object.assign(new Error(`no answer to GET ${req.path} within ${timeoutMs} ms`), { code: NO_ANSWER, timeoutMs, path: req.path });
          req.destroy(err);
        }, timeoutMs);
        timer.unref();
        const done = () => clearTimeout(timer);
        req.once('response', done);
        req.once('close', done);
      });
    }
    add(req, ...rest);
  };
}

/** TLS for tcp:// engines; without given material, DOCKER_CERT_PATH like the docker CLI. */
function resolveTls(given: TlsOptions | undefined): TlsOptions {
  if (given && (given.ca || given.cert || given.key)) return given;
  const dir = process.env['DOCKER_CERT_PATH'];
  if (!dir) return {};
  const read = (name: string) => readFileSync(join(dir, name));
  return { ca: read('ca.pem'), cert: read('cert.pem'), key: read('key.pem') };
}
