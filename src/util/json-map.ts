import { JsonFile } from './json-file.js';

/**
 * A map of small records by key (a container id), kept in a JsonFile in the data directory: read
 * once at start, the map the truth from then on, every change on disk before `set` resolves.
 * What a file holds that `parse` refuses is skipped.
 */
export class JsonMap<T> {
  private readonly entries = new Map<string, T>();
  private readonly file: JsonFile;
  private loaded: Promise<void> | undefined;

  constructor(
    file: string,
    private readonly parse: (value: unknown) => T | undefined,
  ) {
    this.file = new JsonFile(file);
  }

  /** Reads the file once; later calls wait for that read. */
  load(): Promise<void> {
    this.loaded ??= this.file.read().then((doc) => {
      if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) return;
      for (const [key, raw] of Object.entries(doc)) {
        const value = this.parse(raw);
        if (value !== undefined) this.entries.set(key, value);
      }
    });
    return this.loaded;
  }

  get(key: string): T | undefined {
    return this.entries.get(key);
  }

  /** Records `value` under `key`, or forgets the key (`undefined`); resolves once it is on disk. */
  async set(key: string, value: T | undefined): Promise<void> {
    if (JSON.stringify(this.entries.get(key)) === JSON.stringify(value)) return;
    if (value === undefined) this.entries.delete(key);
    else this.entries.set(key, value);
    await this.file.write(Object.fromEntries(this.entries));
  }
}
