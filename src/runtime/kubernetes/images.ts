/**
 * Images on Kubernetes: the kubelet pulls an image when a pod needs it (`IfNotPresent`), with the
 * node's credentials or the pod's imagePullSecrets, so sbx has no pull, build or remove of its
 * own there. `exists` and `list` read the nodes' image lists, which needs cluster-scope `get` on
 * nodes; a Role without it (the least-privilege one) cannot tell, and says so (`not_available`).
 */
import type { Readable } from 'node:stream';
import type { V1Node } from '@kubernetes/client-node';
import { SbxError } from '../../errors.js';
import { formatImageRef, parseImageRef } from '../image-ref.js';
import type { ImageInfo, Images, PullProgress, RegistryAuth } from '../types.js';
import type { KubeConnection } from './connection.js';
import { toSbxError } from './errors.js';

/** `sbx-base:latest` → `docker.io/library/sbx-base:latest`: how the kubelet lists image names. */
export function canonicalImage(ref: string): string {
  const r = parseImageRef(ref);
  const registry = r.registry ?? 'docker.io';
  const repository = !r.registry && !r.repository.includes('/') ? `library/${r.repository}` : r.repository;
  return formatImageRef({ registry, repository, ...(r.digest ? { digest: r.digest } : { tag: r.tag ?? 'latest' }) });
}

export class KubeImages implements Images {
  /** The connection is the runtime's, loaded at its first use. */
  constructor(private readonly connection: () => KubeConnection) {}

  private get conn(): KubeConnection {
    return this.connection();
  }

  private async nodes(): Promise<V1Node[]> {
    try {
      return (await this.conn.core.listNode()).items;
    } catch (err) {
      const e = toSbxError(err, this.conn.address.raw, 'list nodes');
      if (e.code !== 'forbidden') throw e;
      throw new SbxError('not_available', `whether an image is on the nodes of ${this.conn.address.raw} is unknown: ${e.message}`, {
        cause: e,
        details: { reason: 'nodes_forbidden' },
      });
    }
  }

  async exists(ref: string): Promise<boolean> {
    const want = canonicalImage(ref);
    return (await this.nodes()).some((n) => (n.status?.images ?? []).some((i) => (i.names ?? []).includes(want)));
  }

  /** Nothing to do: the kubelet pulls on demand. One event says so. */
  async *pull(ref: string, _opts?: { auth?: RegistryAuth; signal?: AbortSignal }): AsyncIterable<PullProgress> {
    parseImageRef(ref);
    yield { status: `not pulled by sbx: the kubelet pulls ${ref} when a box needs it (imagePullPolicy IfNotPresent)` };
  }

  async list(): Promise<ImageInfo[]> {
    const seen = new Map<string, ImageInfo>();
    for (const n of await this.nodes()) {
      for (const i of n.status?.images ?? []) {
        const names = i.names ?? [];
        const id = names.find((x) => x.includes('@')) ?? names[0] ?? '';
        if (!seen.has(id)) seen.set(id, { id, tags: names.filter((x) => !x.includes('@')), sizeBytes: i.sizeBytes ?? 0, createdAt: new Date(0).toISOString() });
      }
    }
    return [...seen.values()];
  }

  remove(ref: string): Promise<void> {
    return Promise.reject(
      new SbxError('not_available', `images are the kubelet's on Kubernetes (its image garbage collection removes them), not sbx's: cannot remove ${ref}`),
    );
  }

  // eslint-disable-next-line require-yield
  async *build(_context: Readable, tag: string): AsyncIterable<string> {
    throw new SbxError('not_available', `a Kubernetes pool cannot build images: build ${tag} elsewhere and push it to a registry the nodes pull from`);
  }
}
