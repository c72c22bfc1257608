/**
 * Where workspace storage lives on a node's disk. Metadata sits beside, never inside, the
 * directory boxes mount, so a box can neither rewrite its workspace's owner or node nor see
 * any other workspace:
 *
 *   <dataDir>/workspaces/<node>/<id>/workspace.json   metadata (host-private)
 *   <dataDir>/workspaces/<node>/<id>/root/            what boxes bind-mount
 *   <dataDir>/workspaces/<node>/<id>/staging/         private scratch for all-or-nothing writes
 *   <dataDir>/workspaces/<node>/.sbx-tmp-<writer>-<rand>/   a workspace being created (temp-names.ts)
 *   <dataDir>/workspaces/<node>/.trash-<id>-<rand>/   a workspace being deleted
 */
import { join, resolve } from 'node:path';

/** File name of a workspace's metadata inside its directory. */
export const METADATA_FILE = 'workspace.json';
/** Prefix of directories being deleted; never a valid id (ids start with [a-z0-9]). */
export const TRASH_PREFIX = '.trash-';

/**
 * Host paths of workspace storage under one data directory.
 *
 * @example
 * const layout = new WorkspaceLayout('/var/lib/sbx');
 * layout.root('local', 'ws-1'); // '/var/lib/sbx/workspaces/local/ws-1/root'
 */
export class WorkspaceLayout {
  readonly base: string;

  constructor(dataDir: string) {
    this.base = join(resolve(dataDir), 'workspaces');
  }

  node(node: string): string {
    return join(this.base, node);
  }

  workspace(node: string, id: string): string {
    return join(this.base, node, id);
  }

  metadata(node: string, id: string): string {
    return join(this.workspace(node, id), METADATA_FILE);
  }

  root(node: string, id: string): string {
    return join(this.workspace(node, id), 'root');
  }

  staging(node: string, id: string): string {
    return join(this.workspace(node, id), 'staging');
  }
}
