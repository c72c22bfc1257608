/**
 * What a node keeps of its membership, in `<dataDir>/node.json` (0600): its name, how it meets its
 * Manager, the credential it got at join and the Manager's pinned certificate. Its own TLS
 * identity is beside it (`<dataDir>/identity/`). Written by `sbx node join`, read by `sbx node`.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { SbxError } from '../errors.js';
import { writeFileAtomic } from '../util/atomic-file.js';

const stateSchema = z.object({
  name: z.string(),
  mode: z.enum(['direct', 'reverse']),
  /** The Manager's API (where it joined). */
  managerUrl: z.string(),
  /** Direct: the address the node listens on. */
  listen: z.string().optional(),
  /** Reverse: the Manager's node listener this node dials. */
  managerNodeAddress: z.string().optional(),
  credential: z.string(),
  managerCert: z.string(),
  managerFingerprint: z.string(),
  joinedAt: z.string(),
});
export type NodeState = z.infer<typeof stateSchema>;

export function statePath(dataDir: string): string {
  return join(dataDir, 'node.json');
}

export function identityDir(dataDir: string): string {
  return join(dataDir, 'identity');
}

export async function readNodeState(dataDir: string): Promise<NodeState> {
  let text: string;
  try {
    text = await readFile(statePath(dataDir), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      throw new SbxError('not_found', `this node has not joined a Manager (no ${statePath(dataDir)}); run 'sbx node join' first`);
    throw err;
  }
  const parsed = stateSchema.safeParse(JSON.parse(text));
  if (!parsed.success) throw new SbxError('invalid_argument', `${statePath(dataDir)} is damaged; join again with a new token`);
  return parsed.data;
}

export async function writeNodeState(dataDir: string, state: NodeState): Promise<void> {
  await writeFileAtomic(statePath(dataDir), JSON.stringify(stateSchema.parse(state), null, 2), 0o600);
}
