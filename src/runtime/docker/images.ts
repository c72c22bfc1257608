import type { Readable } from 'node:stream';
import { SbxError } from '../../errors.js';
import type { ImageInfo, Images, PullProgress, RegistryAuth } from '../types.js';
import type { DockerConnection } from './connection.js';
import { engineText, toSbxError } from './errors.js';
import { jsonLines } from './json-lines.js';
import { pullFailure, toPullProgress } from './pull-progress.js';

/** Image operations of one Docker Engine. */
export class DockerImages implements Images {
  constructor(private readonly conn: DockerConnection) {}

  async exists(ref: string): Promise<boolean> {
    try {
      await this.conn.docker.getImage(ref).inspect();
      return true;
    } catch (err) {
      const e = toSbxError(err, this.conn.address.raw, `image ${ref}`);
      if (e.code === 'not_found') return false;
      throw e;
    }
  }

  async *pull(ref: string, opts: { auth?: RegistryAuth; signal?: AbortSignal } = {}): AsyncGenerator<PullProgress> {
    if (!ref) throw new SbxError('invalid_argument', 'ref: image reference is required', { details: { field: 'ref' } });
    const what = `pull ${ref}`;
    let body: Readable;
    try {
      const auth = opts.auth ? { username: opts.auth.username, password: opts.auth.password, serveraddress: opts.auth.server ?? registryOf(ref) } : undefined;
      body = (await this.conn.docker.pull(ref, {
        ...(auth ? { authconfig: auth } : {}),
        ...(opts.signal ? { abortSignal: opts.signal } : {}),
      })) as Readable;
    } catch (err) {
      // The engine answers 500 when it cannot reach the registry at all: its words say why.
      const e = toSbxError(err, this.conn.address.raw, what);
      throw e.code === 'internal' ? pullFailure(engineText(err as object), ref, this.conn.address.raw, err) : e;
    }
    try {
      for await (const line of jsonLines(body)) yield toPullProgress(line, ref, this.conn.address.raw);
    } finally {
      body.destroy();
    }
  }

  async list(): Promise<ImageInfo[]> {
    try {
      const images = await this.conn.docker.listImages();
      return images.map((i) => ({
        id: i.Id,
        tags: (i.RepoTags ?? []).filter((t) => t !== '<none>:<none>'),
        sizeBytes: i.Size,
        createdAt: new Date(i.Created * 1000).toISOString(),
      }));
    } catch (err) {
      throw toSbxError(err, this.conn.address.raw, 'list images');
    }
  }

  async remove(ref: string, opts: { force?: boolean } = {}): Promise<void> {
    try {
      await this.conn.docker.getImage(ref).remove({ force: opts.force ?? false });
    } catch (err) {
      throw toSbxError(err, this.conn.address.raw, `image ${ref}`);
    }
  }

  async *build(context: Readable, tag: string, opts: { labels?: Record<string, string> } = {}): AsyncGenerator<string> {
    const what = `build ${tag}`;
    let body: Readable;
    try {
      body = (await this.conn.docker.buildImage(context, { t: tag, rm: true, forcerm: true, ...(opts.labels ? { labels: opts.labels } : {}) })) as Readable;
    } catch (err) {
      throw toSbxError(err, this.conn.address.raw, what);
    }
    for await (const line of jsonLines(body)) {
      const error = line['error'] ?? (line['errorDetail'] as { message?: unknown } | undefined)?.message;
      if (error !== undefined) throw new SbxError('invalid_argument', `${what}: ${String(error).trim()}`, { details: { image: tag } });
      if (typeof line['stream'] === 'string') yield line['stream'];
    }
  }
}

/** The registry host of an image reference (`127.0.0.1:5000/a/b:c` -> `127.0.0.1:5000`). */
export function registryOf(ref: string): string {
  const first = ref.split('/')[0] ?? '';
  return ref.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost') ? first : 'https://index.docker.io/v1/';
}
