/**
 * The workspace module: persistent, node-bound storage mounted into boxes, with file I/O that
 * cannot leave the workspace root.
 *
 * @example
 * import { WorkspaceManager } from './workspace/index.js';
 * const workspaces = new WorkspaceManager({ dataDir: '/var/lib/sbx' });
 */
export { WorkspaceManager } from './manager.js';
export { HostWorkspaceFS, type HostWorkspaceFSOptions } from './fs.js';
export { parseWorkspacePath } from './workspace-path.js';
export type {
  CreateWorkspaceOptions,
  DeleteWorkspaceOptions,
  DirEntry,
  FileContent,
  FileOwner,
  FileStat,
  ImportResult,
  ListWorkspacesOptions,
  MountChecker,
  ReadDirOptions,
  UpdateWorkspaceOptions,
  Workspace,
  WorkspaceFS,
  WorkspaceManagerOptions,
  WorkspaceNode,
  WorkspaceStorage,
  WorkspaceUsage,
  WriteFileOptions,
} from './types.js';
export {
  CreateWorkspaceOptionsSchema,
  DeleteWorkspaceOptionsSchema,
  ReadDirOptionsSchema,
  UpdateWorkspaceOptionsSchema,
  WriteFileOptionsSchema,
} from './schemas.js';
