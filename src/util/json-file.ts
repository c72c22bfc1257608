import { readFile } from 'node:fs/promises';
import { writeFileAtomic } from './atomic-file.js';

/**
 * A small JSON document in the data directory that a Manager keeps in memory and rewrites whole
 * (the boxes stopped on purpose, the renewed lifetimes): read once, written atomically, one write
 * at a time in call order, so a later state never lands under an earlier one.
 */
export class JsonFile {
  private saving: Promise<void> = Promise.resolve();

  constructor(readonly path: string) {}

  /** The parsed document, or undefined when the file does not exist yet. */
  read(): Promise<unknown> {
    return readFile(this.path, 'utf8').then(
      (text) => JSON.parse(text) as unknown,
      (err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
        return undefined;
      },
    );
  }

  /** Writes `value` after every earlier write; resolves once it is on disk. */
  write(value: unknown): Promise<void> {
    const text = JSON.stringify(value);
    const save = this.saving.then(() => writeFileAtomic(this.path, text));
    this.saving = save.catch(() => undefined);
    return save;
  }
}
