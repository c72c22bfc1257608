import { mkdir, open, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';

/**
 * Writes `path` so that a crash at any point leaves the old content or the new, never a mix:
 * a temp file beside it (named by this process), fsync, rename, fsync of the directory. The
 * directory is made (0700) when missing.
 *
 * @example
 * await writeFileAtomic('/var/lib/sbx/stopped/sbx.json', JSON.stringify(ids), 0o600);
 */
export async function writeFileAtomic(path: string, data: string, mode = 0o600): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const temp = `${path}.${process.pid}.${Math.random().toString(36).slice(2, 8)}.tmp`;
  try {
    const fh = await open(temp, 'w', mode);
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(temp, path);
    // The rename itself survives a power loss only once the directory is synced.
    const dir = await open(dirname(path), 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  } catch (err) {
    await rm(temp, { force: true }).catch(() => undefined);
    throw err;
  }
}
