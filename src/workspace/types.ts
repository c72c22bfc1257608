/**
 * Plain data types of the workspace module: what a workspace is, the nodes it can live on,
 * and what the file API returns. No behaviour here.
 */

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
  /** Quota for workspaces created without `quotaBytes`; 0 or absent = none. */
  defaultQuotaBytes?: number;
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
