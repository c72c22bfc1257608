/**
 * Boxes paused with their memory released (`box.pause({ memory: 'release' })`): their container
 * was checkpointed to disk and ended, so the engine reads it `exited` like a stopped box. This
 * store, in the data directory and written before each engine call, is what tells them apart
 * after a restart, so recovery neither starts such a box afresh (its processes would be lost)
 * nor reads it as stopped. Keyed by container id, as the renewed lifetimes are.
 */
import { isSbxError } from '../errors.js';
import type { Runtime } from '../runtime/types.js';
import { JsonMap } from '../util/json-map.js';

/** `checkpointing`: asked of the engine, not known to have ended; `checkpointed`: on disk, the container ended. */
export type CheckpointState = 'checkpointing' | 'checkpointed';

export interface CheckpointEntry {
  /** The engine's name of the checkpoint. */
  name: string;
  state: CheckpointState;
}

/** Where each box's checkpoint stands, by container id; `set(id, undefined)` forgets it. */
export class CheckpointStore extends JsonMap<CheckpointEntry> {
  constructor(file: string) {
    super(file, (raw) => {
      const e = raw as Partial<CheckpointEntry> | null;
      return typeof e?.name === 'string' && (e.state === 'checkpointing' || e.state === 'checkpointed') ? { name: e.name, state: e.state } : undefined;
    });
  }
}

/**
 * What a checkpoint asked of the engine came to, by the engine's word: the container still runs
 * (the checkpoint failed, or never began: the box is running), it ended with the checkpoint on
 * disk (the box is paused with its memory released), it ended without one (stopped: its files are
 * kept, its processes are not), or it is gone.
 */
export async function checkpointOutcome(runtime: Runtime, containerId: string, name: string): Promise<'running' | 'released' | 'stopped' | 'gone'> {
  let status;
  try {
    status = (await runtime.inspect(containerId)).status;
  } catch (err) {
    if (isSbxError(err, 'not_found')) return 'gone';
    throw err;
  }
  if (status === 'running' || status === 'paused' || status === 'restarting') return 'running';
  const names = (await runtime.checkpoints?.(containerId)) ?? [];
  return names.includes(name) ? 'released' : 'stopped';
}
