import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { join } from 'node:path';
import { inspect } from 'node:util';
import Docker from 'dockerode';
import type { RuntimeOptions, TlsOptions } from '../types.js';
import type { RuntimeAddress } from './address.js';

/**
 * One engine endpoint: a dockerode client for plain calls and raw `node:http` requests for the
 * hijacked exec streams, both aimed at the same address.
 */
export class DockerConnection {
  readonly docker: Docker;
  private readonly agent: http.Agent;
  private readonly base: http.RequestOptions;
  private readonly secure: boolean;

  constructor(
    readonly address: RuntimeAddress,
    options: RuntimeOptions = {},
  ) {
    const maxSockets = options.maxConnections ?? 10;
    const tls = address.transport === 'tcp' && address.tls ? resolveTls(options.tls) : undefined;
    this.secure = tls !== undefined;
    this.agent = this.secure ? new https.Agent({ keepAlive: true, maxSockets, ...tls }) : new http.Agent({ keepAlive: true, maxSockets });
    // docker-modem util.inspect()s every request's options (the agent and all its sockets
    // included) even with debug off: 13x raw's client CPU on 50 parallel execs (bench).
    Object.defineProperty(this.agent, inspect.custom, { value: () => `[docker agent ${address.raw}]` });
    switch (address.transport) {
      case 'unix':
        this.base = { socketPath: address.socketPath };
        this.docker = new Docker({ socketPath: address.socketPath, agent: this.agent } as Docker.DockerOptions);
        break;
      case 'tcp':
        this.base = { host: address.host, port: address.port, ...(tls ?? {}) };
        this.docker = new Docker({
          host: address.host,
          port: address.port,
          protocol: this.secure ? 'https' : 'http',
          agent: this.agent,
          ...(tls ?? {}),
        } as Docker.DockerOptions);
        break;
      case 'ssh':
        // docker-modem tunnels every request through `docker system dial-stdio` over ssh2.
        this.base = {};
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
   * A request on a connection of its own (never pooled): hijacked streams take over the socket.
   * ssh engines go through docker-modem's own tunnelling agent.
   */
  rawRequest(options: http.RequestOptions): http.ClientRequest {
    const modemAgent = (this.docker.modem as unknown as { agent?: http.Agent }).agent;
    if (this.address.transport === 'ssh') {
      return http.request({ ...options, agent: modemAgent, host: this.address.host });
    }
    const opts = { ...this.base, ...options, agent: false as const };
    return this.secure ? https.request(opts) : http.request(opts);
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
