/**
 * `sbx/jsapi`: the seed's JS facade (DESIGN, Phase 2: JSAPI) over the library. Static
 * namespaces `sandbox` and `workspace`, Box and WorkspaceFS objects that hold ids, the seed's
 * snake_case options and results. Every call goes through the process-wide Manager that
 * `sandbox.Init` makes; see docs/jsapi.md for the table of seed names and library calls.
 *
 * @example
 * import { sandbox } from 'sbx-manager/jsapi';
 * await sandbox.Init();
 * const box = await sandbox.Create({ owner: 'alice', image: 'sbx-base:latest' });
 * console.log((await box.Exec(['echo', 'hi'])).stdout);
 * await sandbox.Delete(box.id);
 */
import { SbxError, invalidArgument, isSbxError } from '../errors.js';
import { Manager as LibManager, loadConfig } from '../sandbox/index.js';
import type { CreateOptions as LibCreateOptions, ListOptions as LibListOptions, Manager, ManagerConfig } from '../sandbox/index.js';
import { M, install, installed } from './singleton.js';
import type { CreateWorkspaceOptions, ListWorkspacesOptions, WorkspaceManager } from '../workspace/index.js';
import { Box, toBoxInfo } from './box.js';
import { CREATE_FIELDS, LIST_FIELDS, WORKSPACE_CREATE_FIELDS, WORKSPACE_LIST_FIELDS, dropEmpty, mapOptions, mapPorts, seedNames } from './options.js';
import type { BoxInfo, CreateOptions, ListOptions, WorkspaceCreateOptions, WorkspaceInfo, WorkspaceListOptions } from './types.js';
import { WorkspaceFS, toWorkspaceInfo } from './workspace-fs.js';

export { Box } from './box.js';
export { WorkspaceFS } from './workspace-fs.js';
export type * from './types.js';

/**
 * Creates the process-wide Manager and starts it (recovers its boxes, starts the cleanup loop).
 * Without a config it is what `new Manager()` makes (SBX_CONFIG / SBX_*, else one local pool).
 * A second Init closes the first Manager (its boxes keep running) and replaces it. A failed Init
 * (a bad config) leaves no Manager: M() is not_available until an Init succeeds.
 */
function Init(config?: ManagerConfig): Promise<Manager> {
  // One at a time: two overlapping Inits must not both close the same previous Manager.
  const run = initializing.then(() => initOnce(config));
  initializing = run.catch(() => undefined);
  return run;
}

let initializing: Promise<unknown> = Promise.resolve();

async function initOnce(config: ManagerConfig | undefined): Promise<Manager> {
  const previous = installed();
  // Neither the closed previous Manager nor one that never started may be handed out by M().
  install(undefined);
  if (previous) await previous.close();
  let manager: Manager | undefined;
  try {
    manager = new LibManager(config ?? loadConfig());
    await manager.start();
    install(manager);
    return manager;
  } catch (err) {
    await manager?.close().catch(() => undefined);
    throw err;
  }
}

/** Creates a box; with `id`, returns the box of that id if it exists (get-or-create). */
async function Create(options: CreateOptions): Promise<Box> {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) throw invalidArgument('options', 'must be an object with owner and image');
  const opts = mapOptions(options, CREATE_FIELDS, 'create');
  // The seed makes owner required: its permission model (box.owner vs Authorized()) needs one.
  if (typeof opts['owner'] !== 'string' || opts['owner'] === '') throw invalidArgument('owner', 'is required');
  if (opts['ports'] !== undefined) opts['ports'] = mapPorts(opts['ports']);
  const manager = M();
  const lib = opts as unknown as LibCreateOptions;
  return new Box(await seedNames(() => (lib.id === undefined ? manager.create(lib) : manager.getOrCreate(lib))));
}

/** The box with this id, or null. */
async function Get(id: string): Promise<Box | null> {
  try {
    return new Box(await M().get(id));
  } catch (err) {
    if (isSbxError(err, 'not_found')) return null;
    throw err;
  }
}

/** The info of every box matching the filter, asked of the engine now. */
async function List(filter?: ListOptions): Promise<BoxInfo[]> {
  const boxes = await M().list(dropEmpty(mapOptions(filter, LIST_FIELDS, 'list')) as LibListOptions);
  const infos = await Promise.all(
    boxes.map((b) =>
      b.info().catch((err: unknown) => {
        // Removed between the list and its info: not part of the answer.
        if (isSbxError(err, 'not_found')) return undefined;
        throw err;
      }),
    ),
  );
  return infos.filter((i) => i !== undefined).map(toBoxInfo);
}

/** Removes a box and its container; not_found for an unknown id. */
async function Delete(id: string): Promise<void> {
  await M().remove(id);
}

/** The seed's `sandbox` namespace. */
export const sandbox = Object.freeze({ Init, M, Create, Get, List, Delete });

/** The WorkspaceManager of the Manager `Init` made. */
function workspaceM(): WorkspaceManager {
  return M().workspaces;
}

async function workspaceCreate(options: WorkspaceCreateOptions): Promise<WorkspaceFS> {
  if (options === null || typeof options !== 'object' || Array.isArray(options))
    throw invalidArgument('options', 'must be an object with name, owner and node');
  const opts = mapOptions(options, WORKSPACE_CREATE_FIELDS, 'workspace create') as unknown as CreateWorkspaceOptions;
  return new WorkspaceFS(await workspaceM().create(opts));
}

async function workspaceGet(id: string): Promise<WorkspaceFS | null> {
  try {
    return new WorkspaceFS(await workspaceM().get(id));
  } catch (err) {
    if (isSbxError(err, 'not_found')) return null;
    throw err;
  }
}

async function workspaceList(filter?: WorkspaceListOptions): Promise<WorkspaceInfo[]> {
  const opts = dropEmpty(mapOptions(filter, WORKSPACE_LIST_FIELDS, 'workspace list')) as ListWorkspacesOptions;
  return (await workspaceM().list(opts)).map(toWorkspaceInfo);
}

/** Deletes a workspace and its files; conflict while a running box mounts it. */
async function workspaceDelete(id: string): Promise<void> {
  await workspaceM().delete(id, { force: false });
}

/** The seed's `workspace` namespace. */
export const workspace = Object.freeze({ M: workspaceM, Create: workspaceCreate, Get: workspaceGet, List: workspaceList, Delete: workspaceDelete });

export { SbxError, isSbxError };
