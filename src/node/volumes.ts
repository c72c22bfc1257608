/**
 * Workspace volumes on a node: a directory per workspace under the node's data directory,
 * `<dataDir>/volumes/<sha256(hostPath) prefix>/`, holding `meta.json` (the Manager's name for it,
 * its labels) and `data/` (what boxes mount and the helper serves). The Manager names a volume by
 * its workspace's path on the Manager's machine (`hostPath`), as it does a Kubernetes PVC; a box
 * spec's bind of that name is translated to the directory here, and no other host path is ever
 * mounted (policy.ts).
 */
import { createHash } from 'node:crypto';
import { chown, mkdir, readFile, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { SbxError } from '../errors.js';
import { writeFileAtomic } from '../util/atomic-file.js';
import type { WorkspaceVolumeOptions } from '../runtime/types.js';
import type { NodeVolume } from '../runtime/remote/node-types.js';

/** The owner a new volume's directory gets (when the node runs as root): sbx-base's box user, who writes workspaces. */
const BOX_USER = { uid: 1000, gid: 1000 };

export class NodeVolumes {
  readonly root: string;

  constructor(dataDir: string) {
    this.root = join(dataDir, 'volumes');
  }

  private dirOf(hostPath: string): string {
    return join(this.root, createHash('sha256').update(hostPath).digest('hex').slice(0, 32));
  }

  /** The directory boxes mount for `hostPath`, or undefined when the node has no such volume. */
  async dataDir(hostPath: string): Promise<string | undefined> {
    const meta = await this.meta(this.dirOf(hostPath));
    return meta?.hostPath === hostPath ? join(this.dirOf(hostPath), 'data') : undefined;
  }

  /** Makes the volume (its name: `hostPath`); `exclusive`: an existing one is a conflict. */
  async create(hostPath: string, opts: WorkspaceVolumeOptions = {}): Promise<string> {
    const dir = this.dirOf(hostPath);
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    try {
      // The claim: one mkdir, so two creates of one name never both think they made it.
      await mkdir(dir, { mode: 0o711 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const meta = await this.meta(dir);
      if (meta && meta.hostPath !== hostPath) {
        throw new SbxError('conflict', `the node's volume directory for ${hostPath} holds another volume (${meta.hostPath})`, { details: { hostPath } });
      }
      if (opts.exclusive) throw new SbxError('conflict', `workspace volume ${hostPath} already exists on this node`, { details: { hostPath } });
      if (meta) return hostPath;
    }
    const data = join(dir, 'data');
    await mkdir(data, { recursive: true, mode: 0o755 });
    if (process.getuid?.() === 0) await chown(data, BOX_USER.uid, BOX_USER.gid);
    const meta: NodeVolume = { hostPath, labels: opts.labels ?? {}, createdAt: new Date().toISOString() };
    await writeFileAtomic(join(dir, 'meta.json'), JSON.stringify(meta));
    return hostPath;
  }

  /** Deletes the volume and its data; a missing one is not_found. */
  async remove(hostPath: string): Promise<void> {
    if (!(await this.dataDir(hostPath))) throw notFound(hostPath);
    await rm(this.dirOf(hostPath), { recursive: true, force: true });
  }

  /** The data directory of an existing volume, owned by `owner` (the helper's user) when the node runs as root. */
  async ownedDataDir(hostPath: string, owner: { uid: number; gid: number }): Promise<string> {
    const data = await this.dataDir(hostPath);
    if (!data) throw notFound(hostPath);
    if (process.getuid?.() === 0) {
      const st = await stat(data);
      if (st.uid !== owner.uid || st.gid !== owner.gid) await chown(data, owner.uid, owner.gid);
    }
    return data;
  }

  async list(): Promise<NodeVolume[]> {
    let names: string[];
    try {
      names = await readdir(this.root);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const metas = await Promise.all(names.map((n) => this.meta(join(this.root, n))));
    return metas.filter((m): m is NodeVolume => m !== undefined).sort((a, b) => a.hostPath.localeCompare(b.hostPath));
  }

  private async meta(dir: string): Promise<NodeVolume | undefined> {
    try {
      const m = JSON.parse(await readFile(join(dir, 'meta.json'), 'utf8')) as NodeVolume;
      return typeof m.hostPath === 'string' ? { hostPath: m.hostPath, labels: m.labels ?? {}, createdAt: m.createdAt ?? '' } : undefined;
    } catch {
      // Not there yet (a create in progress) or unreadable: no volume.
      return undefined;
    }
  }
}

function notFound(hostPath: string): SbxError {
  return new SbxError('not_found', `no workspace volume ${hostPath} on this node`, { details: { hostPath } });
}
