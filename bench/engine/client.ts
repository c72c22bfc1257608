import http from 'node:http';

/** An Engine API answer with a status the caller did not expect. */
export class EngineError extends Error {
  constructor(
    readonly status: number,
    readonly method: string,
    readonly path: string,
    body: string,
  ) {
    super(`${method} ${path}: HTTP ${status}: ${engineMessage(body)}`);
  }
}

export interface EngineResponse {
  status: number;
  body: Buffer;
}

export interface EngineClientOptions {
  socketPath?: string;
  /** Same cap as sbx's DockerConnection, so parallel rows compare like with like. */
  maxSockets?: number;
}

/**
 * The smallest Engine API client that does what the benchmark needs: plain `node:http` over
 * the unix socket with a keep-alive agent, JSON in and out, no retries, no validation. It is
 * the "raw" baseline, so it must stay thin: anything added here hides sbx's overhead.
 */
export class EngineClient {
  readonly socketPath: string;
  private readonly agent: http.Agent;

  constructor(options: EngineClientOptions = {}) {
    this.socketPath = options.socketPath ?? socketFromEnv();
    this.agent = new http.Agent({ keepAlive: true, maxSockets: options.maxSockets ?? 10 });
  }

  /** Sends `body` as JSON and buffers the whole answer; statuses outside `ok` throw. */
  async call(method: string, path: string, body?: unknown, ok: readonly number[] = [200, 201, 204, 304]): Promise<EngineResponse> {
    const res = await this.send(method, path, body);
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    const buf = Buffer.concat(chunks);
    const status = res.statusCode ?? 0;
    if (!ok.includes(status)) throw new EngineError(status, method, path, buf.toString('utf8'));
    return { status, body: buf };
  }

  async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const { body: buf } = await this.call(method, path, body);
    return JSON.parse(buf.toString('utf8')) as T;
  }

  /** The response as a stream, for bodies read frame by frame (exec output). */
  stream(method: string, path: string, body?: unknown): Promise<http.IncomingMessage> {
    return this.send(method, path, body);
  }

  close(): void {
    this.agent.destroy();
  }

  private send(method: string, path: string, body: unknown): Promise<http.IncomingMessage> {
    return new Promise((resolve, reject) => {
      const payload = body === undefined ? undefined : JSON.stringify(body);
      const req = http.request({
        socketPath: this.socketPath,
        agent: this.agent,
        method,
        // Unversioned paths, as dockerode sends them: both sides speak the engine's own API version.
        path,
        headers: payload === undefined ? {} : { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) },
      });
      req.once('response', resolve);
      req.once('error', reject);
      req.end(payload);
    });
  }
}

function socketFromEnv(): string {
  const host = process.env['DOCKER_HOST'];
  if (!host) return '/var/run/docker.sock';
  if (host.startsWith('unix://')) return host.slice('unix://'.length);
  throw new Error(`DOCKER_HOST=${host}: the benchmark's raw client speaks to unix sockets only; unset DOCKER_HOST or point it at a unix:// socket`);
}

function engineMessage(body: string): string {
  try {
    return (JSON.parse(body) as { message?: string }).message ?? body;
  } catch {
    return body.trim();
  }
}
