/**
 * workspace.json: a workspace's metadata, stored beside its mounted root and written atomically.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { SbxError } from '../errors.js';
import { writeFileAtomic } from './atomic-write.js';
import { DirHandle } from './contained-path.js';
import { errnoOf } from './fs-errors.js';
import { METADATA_FILE } from './layout.js';
import type { Workspace } from './types.js';

const MetadataFile = z.object({
  version: z.literal(1),
  id: z.string().min(1),
  name: z.string(),
  owner: z.string(),
  node: z.string().min(1),
  labels: z.record(z.string(), z.string()),
  createdAt: z.string(),
  updatedAt: z.string(),
  quotaBytes: z.number().int().positive().optional(),
});

/**
 * Reads a metadata file; undefined when it does not exist (a create in progress or interrupted).
 *
 * @example
 * const ws = await readMetadata(layout.metadata('local', 'ws-1'));
 */
export async function readMetadata(file: string): Promise<Workspace | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return undefined;
    throw new SbxError('internal', `cannot read workspace metadata ${file}: ${(err as Error).message}`, { cause: err });
  }
  let parsed: z.infer<typeof MetadataFile>;
  try {
    parsed = MetadataFile.parse(JSON.parse(text));
  } catch (err) {
    throw new SbxError('internal', `workspace metadata ${file} is corrupt: ${(err as Error).message}`, { cause: err });
  }
  const { version: _version, ...workspace } = parsed;
  return workspace;
}

/**
 * Writes metadata atomically into directory `workspaceDir` (temp file, fsync, rename, fsync dir).
 *
 * @example
 * await writeMetadata(layout.workspace('local', 'ws-1'), workspace);
 */
export async function writeMetadata(workspaceDir: string, workspace: Workspace): Promise<void> {
  await using dir = await DirHandle.openHostDir(workspaceDir);
  const body = `${JSON.stringify({ version: 1, ...workspace }, null, 2)}\n`;
  await writeFileAtomic(dir, METADATA_FILE, body, { mode: 0o600 });
}
