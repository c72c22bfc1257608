/**
 * Plain data types of the workspace module: what a workspace is, the nodes it can live on,
 * what the file API offers and returns, and what a node with storage of its own provides.
 * No behaviour here.
 */
import type { Readable } from 'node:stream';
import type { UserNamespaceMap } from '../runtime/types.js';

/**
 * A machine that can hold workspace storage (the seed's Tai node).
 *
 * @example
 * const local: WorkspaceNode = { name: 'local', addr: 'local', online: true };
 */
export interface WorkspaceNode {
  name: string;
  addr: string;
  online: boolean;
  /**
   * Where the node keeps workspace data when it is not this machine's disk (a Kubernetes pool:
   * one PersistentVolumeClaim per workspace). Absent: the data is the `root/` directory under the
   * data directory, which boxes bind-mount.
   */
  storage?: WorkspaceStorage;
}

/**
 * Storage of a node whose workspace data lives elsewhere (the sandbox layer provides it for
 * Kubernetes pools). Metadata stays in this machine's data directory either way; `mountPath`,
 * the workspace's root path there, is only the storage's name for the workspace (what boxes
 * "bind-mount"), no directory is made for it.
 *
 * @example
 * const node: WorkspaceNode = { name: 'kube', addr: 'k8s://', online: true, storage: volumes };
 */
export interface WorkspaceStorage {
  /** Makes the storage of a new workspace (sized by its quota when it has one). */
  create(workspace: Workspace, mountPath: string): Promise<void>;
  /** Removes the storage and its data; storage that is already gone is fine. */
  remove(workspace: Workspace, mountPath: string): Promise<void>;
  /** The workspace's file API; what it creates belongs to `fileOwner`. */
  open(workspace: Workspace, mountPath: string, fileOwner: FileOwner): WorkspaceFS;
}

/**
 * A persistent, node-bound directory that boxes mount. Times are ISO 8601.
 *
 * @example
 * const ws: Workspace = await manager.get('ws-1a2b3c');
 * console.log(ws.node, ws.labels.team);
 */
export interface Workspace {
  id: string;
  name: string;
  owner: string;
  node: string;
  labels: Record<string, string>;
  createdAt: string;
  updatedAt: string;
  /** Bytes the API may fill; absent = no quota. */
  quotaBytes?: number;
}

/**
 * uid/gid given to what the API creates inside a workspace when sbx runs as root.
 *
 * @example
 * const sandboxUser: FileOwner = { uid: 1000, gid: 1000 };
 */
export interface FileOwner {
  uid: number;
  gid: number;
}

/**
 * Answers "does a running box mount this workspace right now?". The sandbox Manager provides it.
 *
 * @example
 * const check: MountChecker = (id) => boxes.some((b) => b.running && b.workspaceId === id);
 */
export type MountChecker = (workspaceId: string) => boolean | Promise<boolean>;

/**
 * Options of `new WorkspaceManager(...)`.
 *
 * @example
 * const options: WorkspaceManagerOptions = { dataDir: '/var/lib/sbx', defaultQuotaBytes: 10 * 2 ** 30 };
 */
export interface WorkspaceManagerOptions {
  /** Storage lives under `<dataDir>/workspaces/`. */
  dataDir: string;
  /** Nodes a workspace can be placed on; default one online node named `local`. */
  nodes?: () => WorkspaceNode[];
  /** True while a running box mounts the workspace; `delete` refuses then unless forced. */
  isMounted?: MountChecker;
  /** Owner of workspace roots and of files the API writes, applied only when sbx runs as root. Default 1000:1000. */
  fileOwner?: FileOwner;
  /**
   * The user namespace a node's boxes run in (an engine with userns-remap), asked when a
   * workspace's root on this machine is made or its file API opened: what the API makes is then
   * owned by `fileOwner`'s host ids in it. Absent, or undefined for a node: box ids are this machine's.
   */
  userns?: (node: string) => Promise<UserNamespaceMap | undefined>;
  /** Quota for workspaces created without `quotaBytes`; 0 or absent = none. */
  defaultQuotaBytes?: number;
  /** Workspaces one owner may hold (`limit_exceeded` beyond); 0 = no limit. Default 100. */
  maxPerOwner?: number;
}

/**
 * Input of `WorkspaceManager.create`.
 *
 * @example
 * await manager.create({ name: 'notes', owner: 'alice', node: 'local', labels: { team: 'a' } });
 */
export interface CreateWorkspaceOptions {
  /** Explicit id (`[a-z0-9][a-z0-9_.-]{0,62}`); absent = `ws-<random>`. */
  id?: string;
  name: string;
  owner: string;
  node: string;
  labels?: Record<string, string>;
  /** 0 = no quota; absent = the manager's default. */
  quotaBytes?: number;
}

/**
 * Filter of `WorkspaceManager.list`; every given field must match.
 *
 * @example
 * await manager.list({ owner: 'alice' });
 */
export interface ListWorkspacesOptions {
  owner?: string;
  node?: string;
}

/**
 * Input of `WorkspaceManager.update`; absent fields are left as they are, `labels` replaces all labels.
 *
 * @example
 * await manager.update('ws-1', { labels: { stage: 'done' } });
 */
export interface UpdateWorkspaceOptions {
  name?: string;
  labels?: Record<string, string>;
}

/**
 * Input of `WorkspaceManager.delete`.
 *
 * @example
 * await manager.delete('ws-1', { force: true }); // even while a box mounts it
 */
export interface DeleteWorkspaceOptions {
  force?: boolean;
}

/**
 * What a workspace holds: apparent size of its regular files (hard links counted once) and their number.
 *
 * @example
 * const { bytes, quotaBytes } = await manager.usage('ws-1');
 */
export interface WorkspaceUsage {
  bytes: number;
  files: number;
  quotaBytes?: number;
}

/**
 * One entry of `WorkspaceFS.readDir`. Symlinks are reported as themselves (lstat), never followed.
 *
 * @example
 * for (const e of await ws.readDir('src', { recursive: true })) if (!e.isDir) console.log(e.name, e.size);
 */
export interface DirEntry {
  /** Entry name; with `recursive`, the path relative to the listed directory. */
  name: string;
  isDir: boolean;
  isSymlink: boolean;
  size: number;
  /** Permission bits, e.g. 0o644. */
  mode: number;
  /** ISO 8601. */
  mtime: string;
}

/**
 * What `WorkspaceFS.stat` returns (lstat semantics: a symlink is described, not followed).
 *
 * @example
 * const st = await ws.stat('build/out.bin'); if (st.isFile) console.log(st.size);
 */
export interface FileStat extends DirEntry {
  isFile: boolean;
}

/**
 * Options of `WorkspaceFS.writeFile`.
 *
 * @example
 * await ws.writeFile('run.sh', '#!/bin/sh\necho hi\n', { mode: 0o755 });
 */
export interface WriteFileOptions {
  /** Permission bits (masked to 0o777). Default: the replaced file's, else 0o644. */
  mode?: number;
}

/**
 * Options of `WorkspaceFS.readDir`.
 *
 * @example
 * await ws.readDir('', { recursive: true });
 */
export interface ReadDirOptions {
  recursive?: boolean;
}

/**
 * Result of `WorkspaceFS.importTar`.
 *
 * @example
 * const { entries, bytes } = await ws.importTar('vendor', fs.createReadStream('deps.tar'));
 */
export interface ImportResult {
  /** Archive entries created (directories, files, symlinks, hard links). */
  entries: number;
  /** File content bytes written. */
  bytes: number;
}

/** Data `WorkspaceFS.writeFile` accepts: whole content, or a stream written with bounded memory. */
export type FileContent = string | Uint8Array | AsyncIterable<Uint8Array | string>;

/**
 * The file API of one workspace (`workspaces.fs(id)`, `box.workspace()`). Paths are relative to
 * the workspace root and use `/`; '' and '.' are the root; the lexical policy of
 * workspace-path.ts applies to every call. On a host node it is `HostWorkspaceFS` (fs.ts:
 * contained, no symlink ever followed); on a node with its own storage it is that storage's
 * (docs/workspaces.md says what each one can do).
 *
 * @example
 * const ws: WorkspaceFS = await workspaces.fs('ws-1');
 * await ws.writeFile('src/main.ts', 'console.log(1)\n');
 * console.log(await ws.readFile('src/main.ts', 'utf8'));
 */
export interface WorkspaceFS {
  readonly id: string;
  /** Whole file content. */
  readFile(path: string): Promise<Buffer>;
  readFile(path: string, encoding: BufferEncoding): Promise<string>;
  /** A stream of a (large) file; errors resolving the path reject the promise. */
  createReadStream(path: string): Promise<Readable>;
  /** Writes a file atomically (old content or new, never a mix); streams are written with bounded memory. */
  writeFile(path: string, data: FileContent | Readable, options?: WriteFileOptions): Promise<void>;
  /** Directory listing; symlinks listed as themselves. With `recursive`, names are relative paths. */
  readDir(path: string, options?: ReadDirOptions): Promise<DirEntry[]>;
  /** Describes a path without following a final symlink (lstat). '' describes the root. */
  stat(path: string): Promise<FileStat>;
  /** Whether something (a symlink counts) exists at `path`. */
  exists(path: string): Promise<boolean>;
  /** `mkdir -p`; an existing non-directory is a `conflict`. */
  mkdirAll(path: string, mode?: number): Promise<void>;
  /** Removes a file, a symlink (not its target) or an empty directory. */
  remove(path: string): Promise<void>;
  /** `rm -rf`; a missing path is fine, the root is refused. */
  removeAll(path: string): Promise<void>;
  /** rename(2) within the workspace. */
  rename(from: string, to: string): Promise<void>;
  /** Copies a file, symlink or directory tree within the workspace. */
  copy(from: string, to: string): Promise<void>;
  readFileBase64(path: string): Promise<string>;
  writeFileBase64(path: string, base64: string, options?: WriteFileOptions): Promise<void>;
  /** Copies a host file or directory tree into the workspace (`dest` defaults to its basename). */
  copyFromHost(hostPath: string, dest?: string): Promise<void>;
  /** A tar stream of directory `path`. */
  exportTar(path: string): Promise<Readable>;
  /** Extracts a tar stream into directory `dest`, all or nothing. */
  importTar(dest: string, tarStream: Readable | NodeJS.ReadableStream | Uint8Array): Promise<ImportResult>;
  /** Bytes and files in the workspace now (box writes included) and its quota. */
  usage(): Promise<WorkspaceUsage>;
}
