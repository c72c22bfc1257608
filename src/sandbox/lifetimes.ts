import { JsonFile } from '../util/json-file.js';

/**
 * Max lifetimes changed after create (`box.renewLifetime`), kept in the data directory because
 * a container's labels cannot change: recovery reads the label, then this. Keyed by container
 * id, not box id, so a later box that reuses an id never inherits an old box's deadline.
 */
export class LifetimeStore {
  private readonly byContainer = new Map<string, number>();
  private readonly file: JsonFile;
  private loaded: Promise<void> | undefined;

  constructor(file: string) {
    this.file = new JsonFile(file);
  }

  /** Reads the file once; later calls wait for that read (the map is the truth from then on). */
  load(): Promise<void> {
    this.loaded ??= this.file.read().then((entries) => {
      if (entries === null || typeof entries !== 'object' || Array.isArray(entries)) return;
      for (const [containerId, ms] of Object.entries(entries)) {
        if (typeof ms === 'number' && Number.isInteger(ms) && ms >= 0) this.byContainer.set(containerId, ms);
      }
    });
    return this.loaded;
  }

  /** The max lifetime (ms from the box's creation) set after create, if any. */
  get(containerId: string): number | undefined {
    return this.byContainer.get(containerId);
  }

  /** Records a box's new max lifetime, or forgets it (`undefined`); resolves once it is on disk. */
  async set(containerId: string, maxLifetimeMs: number | undefined): Promise<void> {
    if (this.byContainer.get(containerId) === maxLifetimeMs) return;
    if (maxLifetimeMs === undefined) this.byContainer.delete(containerId);
    else this.byContainer.set(containerId, maxLifetimeMs);
    await this.file.write(Object.fromEntries(this.byContainer));
  }
}
