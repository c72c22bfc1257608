import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SbxError } from '../errors.js';

const FILE = 'box-token.key';

/**
 * The HMAC secret of box tokens: generated once per data directory (mode 0600) and read back
 * on every start, so tokens survive a restart. Two Managers starting together agree on one.
 */
export async function loadTokenSecret(dataDir: string): Promise<Buffer> {
  const file = join(dataDir, FILE);
  try {
    const existing = await readSecret(file);
    if (existing) return existing;
    await mkdir(dataDir, { recursive: true, mode: 0o700 });
    const secret = randomBytes(32);
    try {
      await writeFile(file, secret.toString('base64'), { mode: 0o600, flag: 'wx' });
    } catch (err) {
      // Another Manager on the same data dir won the race: use its secret.
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return (await readSecret(file))!;
      throw err;
    }
    await chmod(file, 0o600);
    return secret;
  } catch (err) {
    if (err instanceof SbxError) throw err;
    throw new SbxError('internal', `box token secret ${file}: ${(err as Error).message}; check that the data directory is writable`, {
      cause: err,
      details: { path: file },
    });
  }
}

async function readSecret(file: string): Promise<Buffer | undefined> {
  try {
    const secret = Buffer.from((await readFile(file, 'utf8')).trim(), 'base64');
    if (secret.length < 16)
      throw new SbxError('internal', `box token secret ${file} is too short or garbled; remove it to make a new one (old tokens stop working)`);
    return secret;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}
