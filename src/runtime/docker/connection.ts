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
import type { RuntimeOptions, TlsOptions } from '../types.js';
import type { RuntimeAddress } from './address.js';
import { answerReadsWithin, answerTimeoutOf } from '../answer-deadline.js';

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
    // Every read (inspect, list, info, stats, top, logs) fails once it waited that long for the engine.
    answerReadsWithin(this.agent, answerTimeoutOf(options));
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

/** TLS for tcp:// engines; without given material, DOCKER_CERT_PATH like the docker CLI. */
function resolveTls(given: TlsOptions | undefined): TlsOptions {
  if (given && (given.ca || given.cert || given.key)) return given;
  const dir = process.env['DOCKER_CERT_PATH'];
  if (!dir) return {};
  const read = (name: string) => readFileSync(join(dir, name));
  return { ca: read('ca.pem'), cert: read('cert.pem'), key: read('key.pem') };
}
