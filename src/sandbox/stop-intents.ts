import { JsonFile } from '../util/json-file.js';

/**
 * The boxes a Manager stopped on purpose (a caller's stop(), a longrunning box stopped for
 * idleness), kept in the data directory so a Manager that restarts still knows them. Any other
 * stopped box of a restartable policy was stopped behind sbx, by an engine restart, and is started again.
 */
export class StopIntents {
  private readonly ids = new Set<string>();
  private readonly file: JsonFile;
  private loaded: Promise<void> | undefined;

  constructor(file: string) {
    this.file = new JsonFile(file);
  }

  /** Reads the file once; later calls wait for that read (the set is the truth from then on). */
  load(): Promise<void> {
    this.loaded ??= this.file.read().then((ids) => {
      if (Array.isArray(ids)) for (const id of ids) if (typeof id === 'string') this.ids.add(id);
    });
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
    await this.file.write([...this.ids]);
  }
}
