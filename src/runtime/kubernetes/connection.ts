/**
 * One cluster connection: the kubeconfig (a file, or the pod's own service account in-cluster),
 * the typed API client, and WebSockets (exec, port-forward) with the same credentials. TLS is
 * always verified: a kubeconfig that asks to skip verification is refused, not obeyed.
 */
import type { IncomingMessage } from 'node:http';
import https from 'node:https';
import type * as KubeClientModule from '@kubernetes/client-node';
import type { CoreV1Api, KubeConfig, RequestContext, SecurityAuthentication, VersionApi, Watch } from '@kubernetes/client-node';
import WebSocket from 'ws';
import { SbxError } from '../../errors.js';
import type { KubeAddress } from './address.js';
import { answerReadsWithin, answerTimeoutOf } from '../answer-deadline.js';
import { statusError, toSbxError } from './errors.js';

/** The client library, loaded by `KubeConnection.open` (only a k8s:// pool needs it). */
type KubeClient = typeof KubeClientModule;

export class KubeConnection {
  readonly config: KubeConfig;
  readonly core: CoreV1Api;
  readonly versionApi: VersionApi;
  readonly watcher: Watch;
  readonly namespace: string;

  /**
   * Loads @kubernetes/client-node (~1,900 files, ~130 MiB of RSS: nothing a Manager without
   * k8s:// pools may pay), then the kubeconfig.
   */
  static async open(address: KubeAddress, opts: { answerTimeoutMs?: number } = {}, env: NodeJS.ProcessEnv = process.env): Promise<KubeConnection> {
    return new KubeConnection(await import('@kubernetes/client-node'), address, answerTimeoutOf(opts), env);
  }

  private constructor(
    { CoreV1Api, KubeConfig, ServerConfiguration, VersionApi, Watch, createConfiguration }: KubeClient,
    readonly address: KubeAddress,
    answerTimeoutMs: number,
    env: NodeJS.ProcessEnv,
  ) {
    const kc = new KubeConfig();
    try {
      if (address.kubeconfig) kc.loadFromFile(address.kubeconfig);
      else if (env['KUBERNETES_SERVICE_HOST'] && !env['KUBECONFIG']) kc.loadFromCluster();
      else kc.loadFromDefault();
      if (address.context) kc.setCurrentContext(address.context);
    } catch (cause) {
      throw new SbxError('invalid_argument', `addr: cannot load the Kubernetes config for '${address.raw}': ${(cause as Error).message}`, {
        cause,
        details: { field: 'addr' },
      });
    }
    const cluster = kc.getCurrentCluster();
    if (!cluster)
      throw new SbxError('invalid_argument', `addr: the kubeconfig of '${address.raw}' has no cluster for its context`, { details: { field: 'addr' } });
    if (cluster.skipTLSVerify) {
      throw new SbxError(
        'invalid_argument',
        `addr: cluster '${cluster.name}' asks to skip TLS verification; sbx always verifies (give the CA in the kubeconfig)`,
        {
          details: { field: 'addr' },
        },
      );
    }
    this.config = kc;
    // As kc.makeApiClient does, with connections kept alive (KeepAliveAuth).
    const api = createConfiguration({
      baseServer: new ServerConfiguration(cluster.server, {}),
      authMethods: { default: new KeepAliveAuth(kc, answerTimeoutMs) },
    });
    this.core = new CoreV1Api(api);
    this.versionApi = new VersionApi(api);
    // The watch's requests too are verified whatever NODE_TLS_REJECT_UNAUTHORIZED says.
    const fetchOptions = kc.applyToFetchOptions.bind(kc);
    kc.applyToFetchOptions = async (opts) => {
      const init = await fetchOptions(opts);
      if (init.agent instanceof https.Agent) init.agent.options.rejectUnauthorized = true;
      return init;
    };
    this.watcher = new Watch(kc);
    this.namespace = address.namespace ?? kc.getContextObject(kc.getCurrentContext())?.namespace ?? 'default';
  }

  /** The API server's base URL, e.g. https://127.0.0.1:6443. */
  get server(): string {
    return this.config.getCurrentCluster()!.server.replace(/\/+$/, '');
  }

  /**
   * A GET of an API path whose answer is read as a stream (pod logs), with the kubeconfig's
   * credentials and CA. Resolves with the response once it is 200; any other status is the
   * API server's Status as an SbxError.
   */
  async getStream(path: string, what: string, signal?: AbortSignal): Promise<IncomingMessage> {
    const opts: https.RequestOptions = { method: 'GET', rejectUnauthorized: true, ...(signal ? { signal } : {}) };
    try {
      await this.config.applyToHTTPSOptions(opts);
    } catch (err) {
      throw toSbxError(err, this.address.raw, what);
    }
    const url = new URL(this.server + path);
    return new Promise<IncomingMessage>((resolve, reject) => {
      const req = https.request(url, { ...opts, rejectUnauthorized: true }, (res) => {
        if (res.statusCode === 200) return resolve(res);
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => reject(statusError(res.statusCode ?? 0, Buffer.concat(chunks).toString('utf8'), this.address.raw, what)));
        res.on('error', (err) => reject(toSbxError(err, this.address.raw, what)));
      });
      req.on('error', (err) => reject(signal?.aborted ? new SbxError('cancelled', `${what} cancelled`) : toSbxError(err, this.address.raw, what)));
      req.end();
    });
  }

  /**
   * Opens a WebSocket to an API path with the kubeconfig's credentials and CA. A refused
   * upgrade is read for the API server's Status, so a 403 says which permission is missing.
   */
  async openWebSocket(path: string, protocols: string[], what: string, signal?: AbortSignal): Promise<WebSocket> {
    // Verified whatever NODE_TLS_REJECT_UNAUTHORIZED says (client-node leaves it to the environment when unset).
    const opts: WebSocket.ClientOptions = { perMessageDeflate: false, handshakeTimeout: 30_000, rejectUnauthorized: true };
    try {
      await this.config.applyToHTTPSOptions(opts);
    } catch (err) {
      throw toSbxError(err, this.address.raw, what);
    }
    const url = this.server.replace(/^http/, 'ws') + path;
    return new Promise<WebSocket>((resolve, reject) => {
      const ws = new WebSocket(url, protocols, opts);
      const onAbort = () => {
        ws.terminate();
        reject(new SbxError('cancelled', `${what} cancelled`));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const settle = () => signal?.removeEventListener('abort', onAbort);
      ws.once('open', () => {
        settle();
        resolve(ws);
      });
      ws.once('unexpected-response', (_req, res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          settle();
          ws.terminate();
          reject(statusError(res.statusCode ?? 0, Buffer.concat(chunks).toString('utf8'), this.address.raw, what));
        });
        res.on('error', (err) => reject(toSbxError(err, this.address.raw, what)));
      });
      ws.once('error', (err) => {
        settle();
        reject(toSbxError(err, this.address.raw, what));
      });
    });
  }
}

/**
 * The kubeconfig's authentication with one keep-alive agent: client-node makes a new https.Agent,
 * so a new TLS handshake, for every API call (~2.5 ms and most of the client's CPU per call here).
 * The agent is made again when the TLS identity changes (a rotated client certificate); a proxy
 * agent of the kubeconfig's is used as client-node made it (without the answer deadline).
 */
class KeepAliveAuth implements SecurityAuthentication {
  private agent: https.Agent | undefined;
  private identity = '';

  constructor(
    private readonly kc: KubeConfig,
    private readonly answerTimeoutMs: number,
  ) {}

  getName(): string {
    return 'kubeconfig authentication, kept alive';
  }

  async applySecurityAuthentication(context: RequestContext): Promise<void> {
    await this.kc.applySecurityAuthentication(context);
    const made = context.getAgent();
    if (!(made instanceof https.Agent) || made.constructor !== https.Agent) return;
    const o = made.options;
    const identity = JSON.stringify(
      [o.ca, o.cert, o.key, o.pfx, o.passphrase, o.servername, o.rejectUnauthorized].map((v) => (v === undefined ? null : String(v))),
    );
    if (identity !== this.identity || !this.agent) {
      this.agent?.destroy();
      // Verified whatever NODE_TLS_REJECT_UNAUTHORIZED says (client-node leaves it unset).
      this.agent = new https.Agent({ ...o, rejectUnauthorized: true, keepAlive: true, maxSockets: 64 });
      // Every read (get, list) fails once it waited that long for the API server.
      answerReadsWithin(this.agent, this.answerTimeoutMs);
      this.identity = identity;
    }
    made.destroy();
    context.setAgent(this.agent);
  }
}
