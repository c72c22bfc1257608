import { readFile } from 'node:fs/promises';
import { writeFileAtomic } from '../util/atomic-file.js';

/**
 * The boxes a Manager stopped on purpose (a caller's stop(), a longrunning box stopped for
 * idleness), kept in the data directory so a Manager that restarts still knows them. Any other
 * stopped box of a restartable policy was stopped behind sbx, by an engine restart, and is started again.
 */
export class StopIntents {
  private readonly ids = new Set<string>();
  private loaded: Promise<void> | undefined;
  private saving: Promise<void> = Promise.resolve();

  constructor(private readonly file: string) {}

  load(): Promise<void> {
    this.loaded ??= readFile(this.file, 'utf8').then(
      (text) => {
        const ids: unknown = JSON.parse(text);
        if (Array.isArray(ids)) for (const id of ids) if (typeof id === 'string') this.ids.add(id);
      },
      (err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
      },
    );
    return this.loaded;
  }

  has(id: string): boolean {
    return this.ids.has(id);
  }

  /** Records (or forgets) that `id` was stopped on purpose; resolves once it is on disk. */
  async set(id: string, stopped: boolean): Promise<void> {
    if (this.ids.has(id) === stopped) return;
    if (stopped) this.ids.add(id);
    else this.ids.delete(id);
    const save = this.saving.then(() => this.save());
    this.saving = save.catch(() => undefined);
    await save;
  }

  private save(): Promise<void> {
    return writeFileAtomic(this.file, JSON.stringify([...this.ids]));
  }
}
