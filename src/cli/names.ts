/**
 * Workspaces by name where the CLI takes a workspace id. The server lists only what the key may
 * see (its owner's workspaces; every one for an admin), so a name resolves among those alone.
 */
import type { Sbx } from '../client/index.js';
import { SbxError } from '../errors.js';

/**
 * The id of the workspace `idOrName` names: an id as given; else the one workspace with that
 * name. Nothing found: the argument unchanged (the server's not_found then names it); several
 * of that name: invalid_argument listing their ids.
 */
export async function resolveWorkspace(sbx: Sbx, idOrName: string): Promise<string> {
  const all = await sbx.workspaces.list();
  if (all.some((w) => w.id === idOrName)) return idOrName;
  const named = all.filter((w) => w.name === idOrName);
  if (named.length === 1) return named[0]!.id;
  if (named.length > 1)
    throw new SbxError('invalid_argument', `${named.length} workspaces are named '${idOrName}' (${named.map((w) => w.id).join(', ')}): give an id`, {
      details: { field: 'workspace', ids: named.map((w) => w.id) },
    });
  return idOrName;
}
