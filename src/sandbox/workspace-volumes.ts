/**
 * Workspaces on a pool whose runtime keeps them in the cluster (Kubernetes: `Runtime`'s workspace
 * volume methods): the `WorkspaceStorage` the Manager gives that pool's node. A workspace is one
 * volume, named by its root path in the data directory (where its metadata stays); boxes mount it.
 * Its file I/O from outside any box goes through a short-lived helper pod per workspace (the agent
 * image and the volume, nothing else), one `sbx-agent fs …` per operation through `BoxFS`, with
 * the host API's lexical path policy. See docs/workspaces.md, "Kubernetes nodes".
 */
import { basename, posix } from 'node:path';
import { createReadStream as createHostReadStream } from 'node:fs';
import { realpath } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type { Logger } from 'pino';
import { SbxError, existsBy, invalidArgument, isSbxError } from '../errors.js';
import type { ExecStream, Runtime, WorkspaceHelper } from '../runtime/types.js';
import { DirHandle } from '../workspace/contained-path.js';
import { statHostSource } from '../workspace/fs.js';
import { packTree } from '../workspace/tar.js';
import type {
  DirEntry,
  FileContent,
  FileOwner,
  FileStat,
  ImportResult,
  ReadDirOptions,
  Workspace,
  WorkspaceFS,
  WorkspaceStorage,
  WorkspaceUsage,
  WriteFileOptions,
} from '../workspace/types.js';
import { decodeBase64 } from '../workspace/validation.js';
import { parseEntryPath, parseWorkspacePath } from '../workspace/workspace-path.js';
import { BoxFS, type BoxFSHost } from './box-fs.js';
import { MANAGED_BY, MANAGED_BY_VALUE } from './labels.js';

/** On helper pods: the name of the Manager that started it. No `sbx.manager` or `sbx.id`: never a box to reconciliation. */
export const HELPER_LABEL = 'sbx.workspace-helper';
/** On helper pods and volumes: the node (pool) the workspace lives on. */
export const NODE_LABEL = 'sbx.workspace-node';
/** On helper pods and volumes: the workspace's id. */
export const WORKSPACE_LABEL = 'sbx.workspace-id';
/** A helper pod is deleted after this long without a file operation. */
export const HELPER_IDLE_MS = 30_000;

/** A runtime that keeps workspaces in the cluster. */
export type VolumeRuntime = Runtime & Required<Pick<Runtime, 'createWorkspaceVolume' | 'removeWorkspaceVolume' | 'startWorkspaceHelper'>>;

/** Whether a runtime keeps workspaces in the cluster (has all three workspace volume methods). */
export function hasWorkspaceVolumes(runtime: Runtime): runtime is VolumeRuntime {
  return (
    typeof runtime.createWorkspaceVolume === 'function' &&
    typeof runtime.removeWorkspaceVolume === 'function' &&
    typeof runtime.startWorkspaceHelper === 'function'
  );
}

/** The labels of a helper pod: found by Manager and node (the start sweep), never by a box selector. */
export function helperLabels(manager: string, node: string, workspaceId: string): Record<string, string> {
  return { [MANAGED_BY]: MANAGED_BY_VALUE, [HELPER_LABEL]: manager, [NODE_LABEL]: node, [WORKSPACE_LABEL]: workspaceId };
}

/** The labels of a workspace's volume. */
export function volumeLabels(node: string, workspace: Workspace): Record<string, string> {
  return { [MANAGED_BY]: MANAGED_BY_VALUE, [NODE_LABEL]: node, [WORKSPACE_LABEL]: workspace.id, 'sbx.workspace-owner': workspace.owner };
}

export interface WorkspaceVolumesOptions {
  /** The pool's runtime (asked at each use: a pool's runtime is reopened after a close). */
  runtime: () => Runtime;
  /** The Manager's instance name (helper pods carry it). */
  manager: string;
  /** The node: the pool's name. */
  node: string;
  log: Logger;
  /** Idle time after which a helper pod is deleted (default 30 s). */
  helperIdleMs?: number;
}

/**
 * The workspace storage of one Kubernetes pool: volumes, and a helper pod per workspace for file I/O.
 *
 * @example
 * const storage = new WorkspaceVolumes({ runtime: () => pool.runtime(), manager: 'sbx', node: 'kube', log });
 * nodes.push({ name: 'kube', addr, online: true, storage });
 */
export class WorkspaceVolumes implements WorkspaceStorage {
  private readonly helpers = new Map<string, HelperPod>();
  private closed = false;

  constructor(private readonly o: WorkspaceVolumesOptions) {}

  private runtime(): VolumeRuntime {
    const rt = this.o.runtime();
    if (!hasWorkspaceVolumes(rt))
      throw new SbxError('not_available', `pool '${this.o.node}' no longer keeps workspaces in its cluster`, { details: { node: this.o.node } });
    return rt;
  }

  /** Makes the workspace's volume, sized by its quota (else the runtime's default); an existing volume of that name is a conflict. */
  async create(workspace: Workspace, mountPath: string): Promise<void> {
    await this.runtime().createWorkspaceVolume(mountPath, {
      exclusive: true,
      labels: volumeLabels(this.o.node, workspace),
      ...(workspace.quotaBytes ? { sizeBytes: workspace.quotaBytes } : {}),
    });
  }

  /** Deletes the workspace's helper pod, then its volume (a volume already gone is fine). */
  async remove(workspace: Workspace, mountPath: string): Promise<void> {
    const helper = this.helpers.get(workspace.id);
    this.helpers.delete(workspace.id);
    await helper?.close('deleted');
    try {
      await this.runtime().removeWorkspaceVolume(mountPath);
    } catch (err) {
      if (!isSbxError(err, 'not_found')) throw err;
    }
  }

  open(workspace: Workspace, mountPath: string, fileOwner: FileOwner): WorkspaceFS {
    if (this.closed) throw closedError(this.o.node);
    let helper = this.helpers.get(workspace.id);
    if (!helper || helper.isClosed) {
      helper = new HelperPod({
        runtime: () => this.runtime(),
        mountPath,
        workspaceId: workspace.id,
        labels: helperLabels(this.o.manager, this.o.node, workspace.id),
        owner: fileOwner,
        idleMs: this.o.helperIdleMs ?? HELPER_IDLE_MS,
        log: this.o.log,
      });
      this.helpers.set(workspace.id, helper);
    }
    return new HelperWorkspaceFS(workspace, helper);
  }

  /**
   * Deletes the helper pods of this Manager and node that this process did not start (left by a
   * crash or a kill); their count.
   */
  async sweep(): Promise<number> {
    const rt = this.runtime();
    const mine = new Set([...this.helpers.values()].flatMap((h) => h.podIds()));
    const left = (await rt.list({ labels: { [HELPER_LABEL]: this.o.manager, [NODE_LABEL]: this.o.node } })).filter((c) => !mine.has(c.id));
    await Promise.all(
      left.map((c) => rt.remove(c.id, { force: true }).catch((err: unknown) => (isSbxError(err, 'not_found') ? undefined : Promise.reject(err)))),
    );
    return left.length;
  }

  /** Deletes every helper pod; later file operations are `not_available`. */
  async close(): Promise<void> {
    this.closed = true;
    const helpers = [...this.helpers.values()];
    this.helpers.clear();
    await Promise.all(helpers.map((h) => h.close('closed')));
  }
}

function closedError(node: string): SbxError {
  return new SbxError('not_available', `the workspace storage of node '${node}' is closed (the Manager or its pool was closed)`, { details: { node } });
}

interface HelperPodOptions {
  runtime: () => VolumeRuntime;
  mountPath: string;
  workspaceId: string;
  labels: Record<string, string>;
  owner: FileOwner;
  idleMs: number;
  log: Logger;
}

/**
 * One workspace's helper pod, started on first use and deleted after `idleMs` without one. An
 * operation holds it from its start until its exec has exited (a read stream until it is read or
 * destroyed). A pod that died under it is replaced once.
 */
class HelperPod implements BoxFSHost {
  readonly boxId: string;
  private pod: Promise<WorkspaceHelper> | undefined;
  private current: WorkspaceHelper | undefined;
  private inFlight = 0;
  private idle: NodeJS.Timeout | undefined;
  private closedAs: 'deleted' | 'closed' | undefined;

  constructor(private readonly o: HelperPodOptions) {
    this.boxId = `workspace helper of ${o.workspaceId}`;
  }

  get isClosed(): boolean {
    return this.closedAs !== undefined;
  }

  podIds(): string[] {
    return this.current ? [this.current.id] : [];
  }

  /** Runs `fn` with the workspace's path in the helper, the helper held until it settles. */
  async use<T>(fn: (root: string) => Promise<T>): Promise<T> {
    this.lease();
    try {
      return await fn((await this.ensure()).root);
    } finally {
      this.release();
    }
  }

  async tool(): Promise<string> {
    return this.use(async () => (await this.ensure()).tool);
  }

  async run(cmd: string[], opts: { user?: string }): Promise<ExecStream> {
    this.lease();
    let stream: ExecStream;
    try {
      stream = await this.exec(cmd, opts);
    } catch (err) {
      this.release();
      throw err;
    }
    stream.wait().then(
      () => this.release(),
      () => this.release(),
    );
    return stream;
  }

  private async exec(cmd: string[], opts: { user?: string }): Promise<ExecStream> {
    for (let attempt = 0; ; attempt++) {
      const helper = await this.ensure();
      try {
        return await this.o.runtime().execStream(helper.id, cmd, opts);
      } catch (err) {
        if (attempt > 0 || !(await this.lost(helper))) throw err;
      }
    }
  }

  /** Whether the helper is gone or not running (evicted, its node lost); a lost one is dropped. */
  private async lost(helper: WorkspaceHelper): Promise<boolean> {
    const rt = this.o.runtime();
    const gone = await rt.inspect(helper.id).then(
      (info) => !info.running,
      (err: unknown) => isSbxError(err, 'not_found'),
    );
    if (gone && this.current === helper) {
      this.o.log.warn({ workspace: this.o.workspaceId, pod: helper.id }, 'workspace helper pod lost; starting another');
      this.pod = undefined;
      this.current = undefined;
      await rt.remove(helper.id, { force: true }).catch(() => undefined);
    }
    return gone;
  }

  private ensure(): Promise<WorkspaceHelper> {
    if (this.closedAs === 'deleted')
      return Promise.reject(new SbxError('not_found', `workspace ${this.o.workspaceId} not found (deleted)`, { details: { id: this.o.workspaceId } }));
    if (this.closedAs === 'closed') return Promise.reject(closedError(this.o.labels[NODE_LABEL] ?? ''));
    if (!this.pod) {
      const started = this.o.runtime().startWorkspaceHelper(this.o.mountPath, { labels: this.o.labels, uid: this.o.owner.uid, gid: this.o.owner.gid });
      this.pod = started;
      started.then(
        (helper) => {
          if (this.pod === started) this.current = helper;
        },
        () => {
          if (this.pod === started) this.pod = undefined;
        },
      );
    }
    return this.pod;
  }

  private lease(): void {
    this.inFlight++;
    clearTimeout(this.idle);
    this.idle = undefined;
  }

  private release(): void {
    this.inFlight--;
    if (this.inFlight > 0 || this.closedAs) return;
    this.idle = setTimeout(() => void this.retire(), this.o.idleMs);
    this.idle.unref();
  }

  /** Deletes the pod after idleness (a later operation starts another). */
  private async retire(): Promise<void> {
    if (this.inFlight > 0) return;
    await this.stopPod().catch((err: unknown) => this.o.log.warn({ workspace: this.o.workspaceId, err }, 'could not delete an idle workspace helper pod'));
  }

  private async stopPod(): Promise<void> {
    const pod = this.pod;
    this.pod = undefined;
    this.current = undefined;
    if (!pod) return;
    const helper = await pod.catch(() => undefined);
    if (!helper) return;
    try {
      await this.o.runtime().remove(helper.id, { force: true });
    } catch (err) {
      if (!isSbxError(err, 'not_found')) throw err;
    }
  }

  /** Deletes the pod (waiting for one being started) and refuses later operations. */
  async close(as: 'deleted' | 'closed'): Promise<void> {
    this.closedAs = as;
    clearTimeout(this.idle);
    await this.stopPod();
  }
}

/**
 * The helper's file tool with the tree operations of the workspace API (agent/fs_tar.go). Not
 * `box.files()`: those take absolute helper paths the caller has already built from parsed
 * workspace paths.
 */
class HelperFiles extends BoxFS {
  /** `fs tar-out`: the tar of a directory, streamed (the host's exportTar format). */
  exportTar(path: string): Promise<Readable> {
    return this.streamOut(['tar-out', path], path);
  }

  /** `fs tar-in`: the archive streamed in as `fs write`'s frames, staged and merged by the tool. */
  async importTar(dest: string, source: Iterable<Uint8Array> | AsyncIterable<Uint8Array | string>): Promise<ImportResult> {
    const out = await this.streamIn(['tar-in', dest], dest, source);
    return JSON.parse(out) as ImportResult;
  }

  /** `fs copy`: a directory tree (staged, merged into `to`) or a symlink, as itself. */
  async copyTree(from: string, to: string): Promise<void> {
    await this.call(['copy', from, to], from);
  }
}

/**
 * The WorkspaceFS of a workspace in a volume: every call parses its paths with the host API's
 * lexical policy, then runs as one `sbx-agent fs` operation in the workspace's helper pod
 * (BoxFS), as the workspace's file owner. Tar streams, tree copies and copies of host trees are
 * the tool's `tar-out`, `tar-in` and `copy`, staged in the volume and merged all or nothing as on
 * a host node; quotas are the volume's size, not checked by the API.
 */
class HelperWorkspaceFS implements WorkspaceFS {
  readonly id: string;
  private readonly files: HelperFiles;

  constructor(
    private readonly workspace: Workspace,
    private readonly helper: HelperPod,
  ) {
    this.id = workspace.id;
    this.files = new HelperFiles(helper);
  }

  readFile(path: string): Promise<Buffer>;
  readFile(path: string, encoding: BufferEncoding): Promise<string>;
  async readFile(path: string, encoding?: BufferEncoding): Promise<Buffer | string> {
    const { components } = parseEntryPath(path);
    const data = await this.at((abs) => this.files.readFile(abs(components)));
    return encoding ? data.toString(encoding) : data;
  }

  async createReadStream(path: string): Promise<Readable> {
    const { components } = parseEntryPath(path);
    return this.at((abs) => this.files.createReadStream(abs(components)));
  }

  async writeFile(path: string, data: FileContent | Readable, options: WriteFileOptions = {}): Promise<void> {
    const { components } = parseEntryPath(path);
    await this.at((abs) => this.files.writeFile(abs(components), data, options));
  }

  async readDir(path: string, options: ReadDirOptions = {}): Promise<DirEntry[]> {
    const components = parseWorkspacePath(path);
    return this.at((abs) => this.files.readDir(abs(components), options));
  }

  async stat(path: string): Promise<FileStat> {
    const components = parseWorkspacePath(path);
    const stat = await this.at((abs) => this.files.stat(abs(components)));
    // The root is '' as on a host node (the tool names it by its directory in the helper).
    return components.length === 0 ? { ...stat, name: '' } : stat;
  }

  exists(path: string): Promise<boolean> {
    return existsBy(this.stat(path));
  }

  async mkdirAll(path: string, mode?: number): Promise<void> {
    const components = parseWorkspacePath(path);
    await this.at((abs) => this.files.mkdirAll(abs(components), mode));
  }

  async remove(path: string): Promise<void> {
    const { components } = parseEntryPath(path);
    await this.at((abs) => this.files.remove(abs(components)));
  }

  async removeAll(path: string): Promise<void> {
    const { components } = parseEntryPath(path);
    await this.at((abs) => this.files.removeAll(abs(components)));
  }

  async rename(from: string, to: string): Promise<void> {
    const source = parseEntryPath(from);
    const target = parseEntryPath(to);
    await this.at((abs) => this.files.rename(abs(source.components), abs(target.components)));
  }

  /** A file is streamed through this process (mode kept); a directory tree or a symlink is the tool's `copy`. */
  async copy(from: string, to: string): Promise<void> {
    const source = parseEntryPath(from);
    const target = parseEntryPath(to);
    await this.at(async (abs) => {
      const stat = await this.files.stat(abs(source.components));
      if (stat.isDir || stat.isSymlink) {
        await this.files.copyTree(abs(source.components), abs(target.components));
        return;
      }
      if (!stat.isFile) {
        throw new SbxError('invalid_argument', `cannot copy ${JSON.stringify(source.components.join('/'))}: not a file, directory or symlink`, {
          details: { field: 'path', path: source.components.join('/') },
        });
      }
      const content = await this.files.createReadStream(abs(source.components));
      try {
        await this.files.writeFile(abs(target.components), content, { mode: stat.mode & 0o777 });
      } finally {
        content.destroy();
      }
    });
  }

  async readFileBase64(path: string): Promise<string> {
    return (await this.readFile(path)).toString('base64');
  }

  async writeFileBase64(path: string, base64: string, options: WriteFileOptions = {}): Promise<void> {
    await this.writeFile(path, decodeBase64(base64), options);
  }

  /**
   * A host file, streamed in (mode kept); a host directory tree is packed by the host's tar
   * packer (`packTree`, so symlinks whose target leaves the tree are left out) and imported.
   */
  async copyFromHost(hostPath: string, dest?: string): Promise<void> {
    const stat = await statHostSource(hostPath);
    const destination = dest ?? basename(hostPath);
    if (stat.isDirectory()) {
      parseWorkspacePath(destination);
      // The host path is trusted and followed as given; below it, nothing is followed.
      const tree = await DirHandle.openHostDir(await realpath(hostPath));
      await this.importTar(destination, packTree(tree));
      return;
    }
    if (!stat.isFile()) throw invalidArgument('hostPath', `${hostPath} is not a regular file or directory`);
    await this.writeFile(destination, createHostReadStream(hostPath), { mode: stat.mode & 0o777 });
  }

  /** The tool's `tar-out`: a failure before the first byte rejects, one midway fails the stream. */
  async exportTar(path: string): Promise<Readable> {
    const components = parseWorkspacePath(path);
    return this.at((abs) => this.files.exportTar(abs(components)));
  }

  /** The tool's `tar-in`, fed with backpressure; an archive that cannot be read is `invalid_argument` (field `tar`), as on a host node. */
  async importTar(dest: string, tarStream: Readable | NodeJS.ReadableStream | Uint8Array): Promise<ImportResult> {
    const components = parseWorkspacePath(dest);
    const source = tarStream instanceof Uint8Array ? [tarStream] : (tarStream as AsyncIterable<Uint8Array | string>);
    try {
      return await this.at((abs) => this.files.importTar(abs(components), source));
    } catch (err) {
      if (err instanceof SbxError) throw err;
      // Not the tool's answer: the source stream failed, so the caller's archive is bad.
      throw new SbxError('invalid_argument', `tar: cannot read the archive: ${err instanceof Error ? err.message : String(err)}`, {
        cause: err,
        details: { field: 'tar' },
      });
    } finally {
      if (tarStream instanceof Readable && !tarStream.readableEnded) tarStream.destroy();
    }
  }

  /** A recursive listing, summed: regular files (hard links counted once per name, the listing has no inodes). */
  async usage(): Promise<WorkspaceUsage> {
    let bytes = 0;
    let files = 0;
    for (const e of await this.readDir('', { recursive: true })) {
      if (e.isDir || e.isSymlink) continue;
      bytes += e.size;
      files++;
    }
    return { bytes, files, ...(this.workspace.quotaBytes ? { quotaBytes: this.workspace.quotaBytes } : {}) };
  }

  /** Runs `fn` in the helper with absolute helper paths; the tool's paths in errors become workspace paths again. */
  private at<T>(fn: (abs: (components: string[]) => string) => Promise<T>): Promise<T> {
    return this.helper.use(async (root) => {
      try {
        return await fn((components) => posix.join(root, ...components));
      } catch (err) {
        throw relativeError(err, root);
      }
    });
  }
}

/** An error about `<root>/a/b` as one about `a/b` (details.path), as the host API reports it. */
function relativeError(err: unknown, root: string): unknown {
  if (!(err instanceof SbxError) || typeof err.details?.['path'] !== 'string') return err;
  const path = err.details['path'];
  const inside = path === root ? '' : path.startsWith(`${root}/`) ? path.slice(root.length + 1) : undefined;
  if (inside === undefined) return err;
  return new SbxError(err.code, err.message, { cause: err, details: { ...err.details, path: inside } });
}
