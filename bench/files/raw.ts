import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import type { FileSubject } from './subject.js';

/**
 * Plain `fs.promises` in a directory on the same disk, doing the durable-replace steps sbx's
 * workspace writes do (exclusive temp, write, chmod, fsync, rename, directory fsync) and none
 * of the containment work (per-component openat, symlink checks, quota bookkeeping).
 */
export class RawFileSubject implements FileSubject {
  readonly name = 'raw';

  private constructor(private readonly dir: string) {}

  static async open(dir: string): Promise<RawFileSubject> {
    await mkdir(dir, { recursive: true });
    return new RawFileSubject(dir);
  }

  async writeFile(path: string, data: Buffer): Promise<void> {
    const temp = join(this.dir, `.tmp-${randomBytes(8).toString('hex')}`);
    const file = await open(temp, 'wx', 0o600);
    try {
      await file.writeFile(data);
      await file.chmod(0o644);
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(temp, join(this.dir, path));
    const dir = await open(this.dir, 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  }

  readFile(path: string): Promise<Buffer> {
    return readFile(join(this.dir, path));
  }
}
