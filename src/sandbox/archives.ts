import type { ContainerSpec } from '../runtime/types.js';
import { JsonFile } from '../util/json-file.js';
import type { BoxRecord } from './labels.js';

/**
 * Where an archive or a restore of a box stands, written before each step that cannot be undone,
 * so a Manager killed anywhere finds either the old box or the new one, never neither:
 *
 * - `archiving`: the container may be stopped, the image may be half made: the container is the
 *   box (recovery drops the image and the entry, the old box stays).
 * - `archived`: the image is complete and the entry is the box (a container still there is
 *   removed by recovery).
 * - `restoring`: a new container from the image may exist: one that got past `created` is the
 *   box (recovery drops the entry and the image), otherwise it is removed and the box stays
 *   archived.
 */
export type ArchiveState = 'archiving' | 'archived' | 'restoring';

export interface ArchiveEntry {
  state: ArchiveState;
  record: BoxRecord;
  /** The image holding the box's filesystem. */
  image: string;
  /** The spec the box was created with (its own labels aside); a restore creates from it. */
  spec: ContainerSpec;
  /** A claimed warm spare's identity env (the spec is the spare's): the restored box gets it as its own. */
  execEnv: Record<string, string>;
  /** The container archived (gone once `archived`). */
  containerId: string;
  /** When the archive was complete (epoch ms). */
  archivedAt?: number;
  /** The box ran when its archive began: an archive cut short starts it again. */
  wasRunning?: boolean;
}

/** The archived boxes of a Manager, in its data directory (`archives.json`), keyed by box id. */
export class ArchiveStore {
  private readonly entries = new Map<string, ArchiveEntry>();
  private readonly file: JsonFile;
  private loaded: Promise<void> | undefined;

  constructor(file: string) {
    this.file = new JsonFile(file);
  }

  /** Reads the file once; later calls wait for that read (the map is the truth from then on). */
  load(): Promise<void> {
    this.loaded ??= this.file.read().then((doc) => {
      if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) return;
      for (const [id, e] of Object.entries(doc as Record<string, ArchiveEntry>)) {
        if (e && typeof e === 'object' && ['archiving', 'archived', 'restoring'].includes(e.state) && e.record?.id === id) this.entries.set(id, e);
      }
    });
    return this.loaded;
  }

  get(id: string): ArchiveEntry | undefined {
    return this.entries.get(id);
  }

  all(): ArchiveEntry[] {
    return [...this.entries.values()];
  }

  /** Records an entry (or its next state); resolves once it is on disk. */
  async put(entry: ArchiveEntry): Promise<void> {
    this.entries.set(entry.record.id, entry);
    await this.file.write(Object.fromEntries(this.entries));
  }

  /** Forgets a box's entry; resolves once that is on disk. */
  async delete(id: string): Promise<void> {
    if (!this.entries.delete(id)) return;
    await this.file.write(Object.fromEntries(this.entries));
  }
}
