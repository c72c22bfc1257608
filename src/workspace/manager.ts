/**
 * WorkspaceManager: create, find, update and delete workspaces on a node's disk (or in the
 * node's own storage, e.g. a Kubernetes volume, with the metadata still here), and hand out
 * their mount path and file API. The sandbox layer wires itself in through
 * `isMounted` / `setMountChecker`, `nodeForWorkspace`, `mountPath` and the nodes' `storage`;
 * nothing here knows boxes or engines.
 */
import { access, chmod, chown, lstat, mkdir, readdir, rename } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { SbxError, invalidArgument, withOptionHint } from '../errors.js';
import { DirHandle } from './contained-path.js';
import { errnoOf, storageError } from './fs-errors.js';
import { HostWorkspaceFS } from './fs.js';
import { KeyedLock } from './keyed-lock.js';
import { TRASH_PREFIX, WorkspaceLayout } from './layout.js';
import { readMetadata, writeMetadata } from './metadata.js';
import { removeIfOrphan, sweepRoot, sweepTempEntries } from './sweep.js';
import { WriterCheck, tempName } from './temp-names.js';
import { removeTree } from './tree-walk.js';
import type { UserNamespaceMap } from '../runtime/types.js';
import type {
  CreateWorkspaceOptions,
  DeleteWorkspaceOptions,
  FileOwner,
  ListWorkspacesOptions,
  MountChecker,
  UpdateWorkspaceOptions,
  Workspace,
  WorkspaceFS,
  WorkspaceManagerOptions,
  WorkspaceNode,
  WorkspaceStorage,
  WorkspaceUsage,
} from './types.js';
import { CreateWorkspaceOptionsSchema, DeleteWorkspaceOptionsSchema, UpdateWorkspaceOptionsSchema } from './schemas.js';
import { checkQuota, checkWorkspaceId, newWorkspaceId } from './validation.js';
import { parseOrThrow } from '../util/validation.js';

/** Workspaces one owner may hold unless configured otherwise: a runaway client stops long before the disk does. */
export const DEFAULT_MAX_WORKSPACES_PER_OWNER = 100;
const DEFAULT_NODES: WorkspaceNode[] = [{ name: 'local', addr: 'local', online: true }];
const SANDBOX_USER: FileOwner = { uid: 1000, gid: 1000 };
/** Metadata reads in flight while loading the index. */
const LOAD_CONCURRENCY = 64;
/** Workspaces swept at once (each walk holds a few fds per level). */
const SWEEP_CONCURRENCY = 8;

/**
 * Persistent, node-bound workspaces under `<dataDir>/workspaces/`.
 *
 * The manager keeps an in-memory index of all workspaces, loaded lazily from the metadata files
 * on first use and updated by every create/update/delete, so `get` is a map lookup and `list` a
 * filter over memory. It assumes it is the only writer of its data directory (one manager per
 * dataDir); a second manager on the same directory would not see the first one's changes
 * until restarted, though an explicit id can still never be taken twice on one node.
 *
 * @example
 * const workspaces = new WorkspaceManager({ dataDir: '/var/lib/sbx' });
 * const ws = await workspaces.create({ name: 'notes', owner: 'alice', node: 'local' });
 * const hostDir = await workspaces.mountPath(ws.id); // bind-mount this at /workspace
 * await (await workspaces.fs(ws.id)).writeFile('hello.txt', 'hi');
 */
export class WorkspaceManager {
  private readonly layout: WorkspaceLayout;
  private readonly listNodes: () => WorkspaceNode[];
  private readonly fileOwner: FileOwner;
  private readonly userns: (node: string) => Promise<UserNamespaceMap | undefined>;
  private readonly defaultQuotaBytes: number | undefined;
  private mountChecker: MountChecker;
  private index: Map<string, Workspace> | undefined;
  private loading: Promise<Map<string, Workspace>> | undefined;
  private readonly maxPerOwner: number;
  /** Creates in flight: id → owner (they count against the owner's limit before they land). */
  private readonly creating = new Map<string, string>();
  private readonly filesystems = new Map<string, Promise<WorkspaceFS>>();
  private readonly locks = new KeyedLock();

  constructor(options: WorkspaceManagerOptions) {
    if (typeof options?.dataDir !== 'string' || options.dataDir === '') throw invalidArgument('dataDir', 'is required');
    this.layout = new WorkspaceLayout(options.dataDir);
    this.listNodes = options.nodes ?? (() => DEFAULT_NODES);
    this.mountChecker = options.isMounted ?? (() => false);
    this.fileOwner = options.fileOwner ?? SANDBOX_USER;
    this.userns = options.userns ?? (() => Promise.resolve(undefined));
    this.defaultQuotaBytes = options.defaultQuotaBytes === undefined ? undefined : checkQuota(options.defaultQuotaBytes, 'defaultQuotaBytes');
    const max = options.maxPerOwner ?? DEFAULT_MAX_WORKSPACES_PER_OWNER;
    if (!Number.isInteger(max) || max < 0) throw invalidArgument('maxPerOwner', 'must be a whole number, 0 for no limit');
    this.maxPerOwner = max;
  }

  /**
   * Installs the "is a running box mounting this?" check (the seed's SetWorkspaceManager, from
   * this side), for a caller that builds the WorkspaceManager before it can answer; the sandbox
   * Manager passes `isMounted` to the constructor instead.
   *
   * @example
   * workspaces.setMountChecker((id) => [...boxes.values()].some((box) => box.workspaceId === id));
   */
  setMountChecker(check: MountChecker): void {
    this.mountChecker = check;
  }

  /**
   * The nodes workspaces can be placed on (copies).
   *
   * @example
   * workspaces.nodes().filter((n) => n.online);
   */
  nodes(): WorkspaceNode[] {
    return this.listNodes().map((node) => ({ ...node }));
  }

  /**
   * Creates a workspace on an online node. Errors: invalid_argument (bad field; `node` missing),
   * not_found (unknown node), not_available (node offline), conflict (id taken).
   *
   * @example
   * await workspaces.create({ id: 'ws-alice-notes', name: 'notes', owner: 'alice', node: 'local', quotaBytes: 2 ** 30 });
   */
  async create(options: CreateWorkspaceOptions): Promise<Workspace> {
    if (typeof options !== 'object' || options === null) throw invalidArgument('options', 'must be an object');
    const { name, owner, node: nodeName, labels = {}, id: requestedId, ...rest } = parseOrThrow(CreateWorkspaceOptionsSchema, options, 'options');
    const quotaBytes = rest.quotaBytes === undefined ? this.defaultQuotaBytes : rest.quotaBytes || undefined;
    const node = this.listNodes().find((candidate) => candidate.name === nodeName);
    if (!node)
      throw new SbxError(
        'not_found',
        `node ${nodeName} is not configured; pick one of: ${
          this.listNodes()
            .map((n) => n.name)
            .join(', ') || '(none)'
        }`,
        { details: { field: 'node' } },
      );
    if (!node.online)
      throw new SbxError('not_available', `node ${nodeName} is offline; workspaces can only be created on an online node`, { details: { field: 'node' } });

    const index = await this.loadIndex();
    const id = requestedId ?? this.unusedId(index);
    if (index.has(id) || this.creating.has(id)) throw conflictingId(id);
    this.checkOwnerLimit(index, owner);
    this.creating.set(id, owner);
    try {
      const fields = { name, owner, labels, quotaBytes };
      // A node with storage of its own keeps only the metadata here (no root/ or staging/).
      const rootOwner = node.storage ? undefined : await this.hostOwner(nodeName);
      const workspace = await this.createOnDisk(id, nodeName, fields, rootOwner).catch((err: unknown) => {
        throw storageError(err, this.layout.node(nodeName), 'create a workspace');
      });
      if (node.storage) {
        // After the id is reserved on disk, so a create that lost the id never touches the
        // winner's storage; a storage that cannot be made takes the metadata with it.
        await node.storage.create(copyOf(workspace), this.layout.root(nodeName, id)).catch(async (err: unknown) => {
          await this.discard(nodeName, id).catch(() => undefined);
          throw err;
        });
      }
      index.set(id, workspace);
      return copyOf(workspace);
    } finally {
      this.creating.delete(id);
    }
  }

  /**
   * One workspace, or `not_found`.
   *
   * @example
   * const { node, owner } = await workspaces.get('ws-1');
   */
  async get(id: string): Promise<Workspace> {
    return copyOf(await this.find(id));
  }

  /**
   * All workspaces matching the filter, oldest first.
   *
   * @example
   * await workspaces.list({ owner: 'alice', node: 'local' });
   */
  async list(filter: ListWorkspacesOptions = {}): Promise<Workspace[]> {
    const index = await this.loadIndex();
    const matches: Workspace[] = [];
    for (const workspace of index.values()) {
      if (filter.owner !== undefined && workspace.owner !== filter.owner) continue;
      if (filter.node !== undefined && workspace.node !== filter.node) continue;
      matches.push(copyOf(workspace));
    }
    return matches.sort((a, b) => (a.createdAt === b.createdAt ? a.id.localeCompare(b.id) : a.createdAt.localeCompare(b.createdAt)));
  }

  /**
   * Renames and/or relabels (given labels replace all labels); bumps `updatedAt`.
   *
   * @example
   * await workspaces.update('ws-1', { name: 'archive', labels: {} });
   */
  async update(id: string, changes: UpdateWorkspaceOptions): Promise<Workspace> {
    if (typeof changes !== 'object' || changes === null) throw invalidArgument('changes', 'must be an object');
    const { name, labels } = parseOrThrow(UpdateWorkspaceOptionsSchema, changes, 'changes');
    return this.locks.run(id, async () => {
      const current = await this.find(id);
      const next: Workspace = {
        ...current,
        name: name ?? current.name,
        labels: labels ?? current.labels,
        updatedAt: laterThan(current.updatedAt),
      };
      await writeMetadata(this.layout.workspace(next.node, next.id), next);
      (await this.loadIndex()).set(id, next);
      return copyOf(next);
    });
  }

  /**
   * Deletes a workspace and everything in it. Refused with `conflict` while a running box mounts
   * it, unless `force` (the box then keeps an empty, deleted directory). On a node with storage
   * of its own, the storage goes first (a failure keeps the workspace); when that node no longer
   * offers storage it is `not_available`, and `force` deletes the metadata alone.
   *
   * @example
   * await workspaces.delete('ws-1');
   */
  async delete(id: string, options: DeleteWorkspaceOptions = {}): Promise<void> {
    parseOrThrow(DeleteWorkspaceOptionsSchema, options, 'options');
    await this.locks.run(id, async () => {
      const workspace = await this.find(id);
      if (!options.force && (await this.mountChecker(id))) {
        throw withOptionHint('conflict', `workspace ${id} is mounted by a running box; stop or remove the box first, or delete it anyway:`, 'force', { id });
      }
      const storage = await this.storageOf(workspace).catch((err: unknown) => {
        if (options.force && err instanceof SbxError && err.code === 'not_available') return undefined;
        throw err;
      });
      if (storage) await storage.remove(copyOf(workspace), this.layout.root(workspace.node, id));
      await this.discard(workspace.node, id, async () => {
        (await this.loadIndex()).delete(id);
        this.filesystems.delete(id);
      });
    });
  }

  /**
   * Takes a workspace's directory out of existence: one rename to a trash name (metadata and
   * data at once; `gone` runs right after it), then the slow removal of its contents under a name
   * no lookup matches.
   */
  private async discard(node: string, id: string, gone: () => Promise<void> = async () => undefined): Promise<void> {
    const trash = `${TRASH_PREFIX}${id}-${randomBytes(4).toString('hex')}`;
    await rename(this.layout.workspace(node, id), join(this.layout.node(node), trash));
    await gone();
    await using nodeDir = await DirHandle.openHostDir(this.layout.node(node));
    await nodeDir.sync();
    // Removal is by fds (box-written content may hold symlinks). If a force-deleted box keeps
    // writing, what is left stays in the trash and is retried when the index is next loaded.
    await removeTree(nodeDir, trash).catch(() => undefined);
  }

  /**
   * Where a workspace's files are: here (undefined: its `root/` is on this disk) or in its node's
   * storage; `not_available` when they are not here and the node offers no storage now.
   */
  private async storageOf(workspace: Workspace): Promise<WorkspaceStorage | undefined> {
    const here = await lstat(this.layout.root(workspace.node, workspace.id)).then(
      () => true,
      (err: unknown) => errnoOf(err) !== 'ENOENT',
    );
    if (here) return undefined;
    const storage = this.listNodes().find((n) => n.name === workspace.node)?.storage;
    if (storage) return storage;
    throw new SbxError(
      'not_available',
      `the files of workspace ${workspace.id} are not on this machine and node ${workspace.node} offers no storage now (its pool was removed or changed?)`,
      { details: { id: workspace.id, node: workspace.node } },
    );
  }

  /**
   * The node a workspace's storage lives on; boxes that mount it must run there.
   *
   * @example
   * const pool = poolForNode(await workspaces.nodeForWorkspace('ws-1'));
   */
  async nodeForWorkspace(id: string): Promise<string> {
    return (await this.find(id)).node;
  }

  /**
   * Host path of the directory boxes bind-mount (read-write or read-only) for this workspace.
   *
   * @example
   * binds.push({ hostPath: await workspaces.mountPath('ws-1'), containerPath: '/workspace' });
   */
  async mountPath(id: string): Promise<string> {
    const workspace = await this.find(id);
    return this.layout.root(workspace.node, workspace.id);
  }

  /**
   * The file API of a workspace (one shared instance per workspace, so quota reservations of
   * concurrent writers see each other): root-contained host I/O, or the node storage's.
   *
   * @example
   * const files = await workspaces.fs('ws-1');
   * await files.writeFile('a.txt', 'x');
   */
  async fs(id: string): Promise<WorkspaceFS> {
    const workspace = await this.find(id);
    let files = this.filesystems.get(id);
    if (!files) {
      files = this.openFS(workspace);
      this.filesystems.set(id, files);
      files.catch(() => this.filesystems.delete(id));
    }
    return files;
  }

  private async openFS(workspace: Workspace): Promise<WorkspaceFS> {
    const storage = await this.storageOf(workspace);
    if (storage) return storage.open(copyOf(workspace), this.layout.root(workspace.node, workspace.id), this.fileOwner);
    const stagingPath = this.layout.staging(workspace.node, workspace.id);
    // Staged trees a crashed process left would otherwise stay until the next sweepLeftovers;
    // those of live processes (this one included) are left alone.
    await using staging = await DirHandle.openHostDir(stagingPath);
    await sweepTempEntries(staging, new WriterCheck());
    return new HostWorkspaceFS({
      id: workspace.id,
      rootPath: this.layout.root(workspace.node, workspace.id),
      stagingPath,
      fileOwner: await this.hostOwner(workspace.node),
      quotaBytes: workspace.quotaBytes,
    });
  }

  /**
   * Bytes and files in a workspace (a fresh walk, so box writes count) and its quota.
   *
   * @example
   * const { bytes, quotaBytes } = await workspaces.usage('ws-1');
   */
  async usage(id: string): Promise<WorkspaceUsage> {
    return (await this.fs(id)).usage();
  }

  /**
   * Who owns, on this machine, what the API makes in a workspace of `node`: `fileOwner`, or the
   * host ids it has in the user namespace the node's boxes run in (so that the box's user owns it
   * there too). An engine that cannot be asked fails the call: a guess would hand the box files it
   * cannot write.
   */
  private async hostOwner(node: string): Promise<FileOwner> {
    const map = await this.userns(node);
    if (!map) return this.fileOwner;
    const { uid, gid } = this.fileOwner;
    if (uid >= map.size || gid >= map.size) {
      throw new SbxError(
        'not_available',
        `node ${node} runs boxes in a user namespace of ${map.size} ids, which has no ${uid}:${gid} (the workspaces' file owner)`,
        {
          details: { node, fileOwner: { uid, gid }, size: map.size },
        },
      );
    }
    return { uid: map.hostUid + uid, gid: map.hostGid + gid };
  }

  private async find(id: string): Promise<Workspace> {
    checkWorkspaceId(id);
    const workspace = (await this.loadIndex()).get(id);
    if (!workspace) throw new SbxError('not_found', `workspace ${id} not found`, { details: { id } });
    return workspace;
  }

  /** Counted with the creates in flight, synchronously with their registration: concurrent creates cannot overshoot. */
  private checkOwnerLimit(index: Map<string, Workspace>, owner: string): void {
    if (this.maxPerOwner === 0) return;
    let held = 0;
    for (const w of index.values()) if (w.owner === owner) held++;
    for (const o of this.creating.values()) if (o === owner) held++;
    if (held >= this.maxPerOwner) {
      throw new SbxError('limit_exceeded', `owner '${owner}' has ${held} workspace(s) (max ${this.maxPerOwner}); delete one or raise maxWorkspacesPerOwner`, {
        details: { owner, limit: 'maxWorkspacesPerOwner', max: this.maxPerOwner },
      });
    }
  }

  private unusedId(index: Map<string, Workspace>): string {
    for (;;) {
      const id = newWorkspaceId();
      if (!index.has(id) && !this.creating.has(id)) return id;
    }
  }

  private async createOnDisk(
    id: string,
    node: string,
    fields: { name: string; owner: string; labels: Record<string, string>; quotaBytes: number | undefined },
    /** The owner of its root/ (made only with one). */
    rootOwner: FileOwner | undefined,
  ): Promise<Workspace> {
    const nodeDir = this.layout.node(node);
    await this.makeBase();
    await mkdir(nodeDir, { recursive: true, mode: 0o700 });
    await using nodeHandle = await DirHandle.openHostDir(nodeDir);
    if (await nodeHandle.lstatIfExists(id)) throw conflictingId(id);
    // The workspace is built complete under a temp name (which names this process) and then
    // renamed to its id, so an id directory always holds its metadata: a crash mid-create leaves
    // only a temp directory that the sweep can tell is a dead writer's.
    const building = tempName();
    const dir = join(nodeDir, building);
    const now = new Date().toISOString();
    const workspace: Workspace = { id, name: fields.name, owner: fields.owner, node, labels: fields.labels, createdAt: now, updatedAt: now };
    if (fields.quotaBytes !== undefined) workspace.quotaBytes = fields.quotaBytes;
    await mkdir(dir, { mode: 0o700 });
    try {
      if (rootOwner) {
        const root = join(dir, 'root');
        await mkdir(root, { mode: 0o755 });
        if (process.getuid?.() === 0) await chown(root, rootOwner.uid, rootOwner.gid);
        await chmod(root, 0o755);
        await mkdir(join(dir, 'staging'), { mode: 0o700 });
      }
      await writeMetadata(dir, workspace);
      try {
        // The atomic reservation: rename(2) cannot replace a non-empty directory, so of concurrent
        // creators of one id (any process) exactly one succeeds; the others get ENOTEMPTY.
        await nodeHandle.rename(building, nodeHandle, id);
      } catch (err) {
        const code = errnoOf(err);
        if (code === 'ENOTEMPTY' || code === 'EEXIST' || code === 'ENOTDIR') throw conflictingId(id);
        throw err;
      }
    } catch (err) {
      await removeTree(nodeHandle, building).catch(() => undefined);
      throw err;
    }
    await nodeHandle.sync();
    return workspace;
  }

  /**
   * Removes what crashed processes left in the data directory: temp files of interrupted writes
   * (in workspace roots, at any depth, and beside metadata), staged trees of interrupted imports
   * and copies, workspaces whose create was interrupted, and workspace directories without
   * metadata. A temp entry is removed only when the process its name carries has exited, so the
   * live work of another process sharing the data directory (an import, a create) is never
   * touched; see docs/workspaces.md. Safe to call at any time, also while this manager works.
   *
   * @example
   * const { stagingRemoved, orphanDirsRemoved } = await workspaces.sweepLeftovers();
   */
  async sweepLeftovers(): Promise<{ stagingRemoved: number; orphanDirsRemoved: number }> {
    await this.loadIndex(); // also finishes interrupted deletes
    const writers = new WriterCheck();
    const counts = { stagingRemoved: 0, orphanDirsRemoved: 0 };
    for (const node of await this.nodesOnDisk()) {
      await using nodeDir = await DirHandle.openHostDir(this.layout.node(node));
      const names = await nodeDir.list();
      // Workspaces being built: a whole temp directory is one abandoned create.
      counts.orphanDirsRemoved += await sweepTempEntries(nodeDir, writers);
      const ids = names.filter(isWorkspaceId);
      for (let start = 0; start < ids.length; start += SWEEP_CONCURRENCY) {
        const found = await Promise.all(ids.slice(start, start + SWEEP_CONCURRENCY).map((id) => this.sweepWorkspace(nodeDir, node, id, writers)));
        for (const one of found) {
          counts.stagingRemoved += one.stagingRemoved;
          counts.orphanDirsRemoved += one.orphanDirsRemoved;
        }
      }
    }
    return counts;
  }

  private async sweepWorkspace(
    nodeDir: DirHandle,
    node: string,
    id: string,
    writers: WriterCheck,
  ): Promise<{ stagingRemoved: number; orphanDirsRemoved: number }> {
    if (await removeIfOrphan(nodeDir, id)) return { stagingRemoved: 0, orphanDirsRemoved: 1 };
    let stagingRemoved = 0;
    for (const dir of [this.layout.workspace(node, id), this.layout.staging(node, id)]) {
      const handle = await DirHandle.openHostDir(dir).catch(() => undefined);
      if (!handle) continue; // deleted meanwhile, or a hand-made directory without one
      try {
        stagingRemoved += await sweepTempEntries(handle, writers);
      } finally {
        await handle.close();
      }
    }
    const root = await DirHandle.openHostDir(this.layout.root(node, id)).catch(() => undefined);
    if (root) {
      try {
        stagingRemoved += await sweepRoot(root, writers);
      } finally {
        await root.close();
      }
    }
    return { stagingRemoved, orphanDirsRemoved: 0 };
  }

  private async nodesOnDisk(): Promise<string[]> {
    return (await readdir(this.layout.base, { withFileTypes: true }))
      .filter((e) => e.isDirectory())
      .map((e) => e.name)
      .sort();
  }

  private loadIndex(): Promise<Map<string, Workspace>> {
    if (this.index) return Promise.resolve(this.index);
    this.loading ??= this.scanDisk().then(
      (index) => (this.index = index),
      (err: unknown) => {
        this.loading = undefined;
        throw storageError(err, this.layout.base, 'read the workspaces');
      },
    );
    return this.loading;
  }

  /**
   * The workspaces directory, 0700 and the host's (made so, too, when an older sbx left it 0711):
   * what boxes write into their workspace — a setuid-root program, a device node — must not be
   * reachable, let alone runnable, by another user of the host (docs/workspaces.md).
   */
  private async makeBase(): Promise<void> {
    await mkdir(this.layout.base, { recursive: true, mode: 0o700 });
    await chmod(this.layout.base, 0o700);
  }

  /** Reads every workspace.json once; finishes deletions a crash interrupted. */
  private async scanDisk(): Promise<Map<string, Workspace>> {
    await requireProcFd();
    await this.makeBase();
    const index = new Map<string, Workspace>();
    for (const node of await this.nodesOnDisk()) {
      const entries = await readdir(this.layout.node(node), { withFileTypes: true });
      const trash = entries.filter((e) => e.isDirectory() && e.name.startsWith(TRASH_PREFIX)).map((e) => e.name);
      if (trash.length > 0) {
        await using nodeHandle = await DirHandle.openHostDir(this.layout.node(node));
        for (const name of trash) await removeTree(nodeHandle, name).catch(() => undefined);
      }
      const ids = entries.filter((e) => e.isDirectory() && isWorkspaceId(e.name)).map((e) => e.name);
      for (let start = 0; start < ids.length; start += LOAD_CONCURRENCY) {
        const batch = ids.slice(start, start + LOAD_CONCURRENCY);
        // Unreadable or mismatching metadata is left on disk untouched and out of the index.
        const found = await Promise.all(
          batch.map(async (id) => ({ id, workspace: await readMetadata(this.layout.metadata(node, id)).catch(() => undefined) })),
        );
        for (const { id, workspace } of found) {
          if (workspace && workspace.id === id && workspace.node === node && !index.has(id)) index.set(id, workspace);
        }
      }
    }
    return index;
  }
}

/** The contained resolver stands on Linux's /proc/self/fd; refuse plainly without it. */
async function requireProcFd(): Promise<void> {
  const available =
    process.platform === 'linux' &&
    (await access('/proc/self/fd').then(
      () => true,
      () => false,
    ));
  if (!available) throw new SbxError('internal', 'workspaces need Linux with /proc mounted (the contained file I/O resolves paths through /proc/self/fd)');
}

function isWorkspaceId(name: string): boolean {
  try {
    checkWorkspaceId(name);
    return true;
  } catch {
    return false;
  }
}

function conflictingId(id: string): SbxError {
  return new SbxError('conflict', `workspace id ${id} is already taken; choose another or omit id`, { details: { field: 'id', id } });
}

function copyOf(workspace: Workspace): Workspace {
  return { ...workspace, labels: { ...workspace.labels } };
}

/** Now, or 1 ms after `previous` when the clock has not moved past it, so updatedAt always grows. */
function laterThan(previous: string): string {
  const now = Date.now();
  const before = Date.parse(previous);
  return new Date(Number.isNaN(before) || now > before ? now : before + 1).toISOString();
}
