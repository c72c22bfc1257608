/**
 * One cluster connection: the kubeconfig (a file, or the pod's own service account in-cluster),
 * the typed API client, and WebSockets (exec, port-forward) with the same credentials. TLS is
 * always verified: a kubeconfig that asks to skip verification is refused, not obeyed.
 */
import { CoreV1Api, KubeConfig, VersionApi, Watch } from '@kubernetes/client-node';
import WebSocket from 'ws';
import { SbxError } from '../../errors.js';
import type { KubeAddress } from './address.js';
import { statusError, toSbxError } from './errors.js';

export class KubeConnection {
  readonly config: KubeConfig;
  readonly core: CoreV1Api;
  readonly versionApi: VersionApi;
  readonly watcher: Watch;
  readonly namespace: string;

  constructor(
    readonly address: KubeAddress,
    env: NodeJS.ProcessEnv = process.env,
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
    this.core = kc.makeApiClient(CoreV1Api);
    this.versionApi = kc.makeApiClient(VersionApi);
    this.watcher = new Watch(kc);
    this.namespace = address.namespace ?? kc.getContextObject(kc.getCurrentContext())?.namespace ?? 'default';
  }

  /** The API server's base URL, e.g. https://127.0.0.1:6443. */
  get server(): string {
    return this.config.getCurrentCluster()!.server.replace(/\/+$/, '');
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
