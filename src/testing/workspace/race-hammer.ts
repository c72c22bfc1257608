/**
 * The host side of the race tests: calls WorkspaceFS on `d/...` in a tight loop while something
 * else swaps `d` between a real directory (holding `file` = "inside") and a symlink to an
 * outside directory (holding `file` = secret, and `only-outside`).
 */
import { isSbxError } from '../../errors.js';
import type { WorkspaceFS } from '../../workspace/fs.js';

/** What the loop saw. */
export interface HammerCounts {
  calls: number;
  okReads: number;
  /** Calls refused with invalid_argument (symlink met) or not_found (mid-swap gap, or inside `d`). */
  refused: number;
  refusedByCode: Record<string, number>;
  /** Calls that returned, listed, moved or deleted outside content: must stay 0. */
  leaks: number;
  unexpected: string[];
  byOperation: Record<string, { ok: number; refused: number }>;
}

async function drain(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks).toString('latin1');
}

/**
 * Runs the loop for `durationMs`, rotating through read, stream, list, stat, export, rename and removal.
 *
 * @example
 * const counts = await hammerWorkspace(fs, { secret, durationMs: 3000 });
 */
export async function hammerWorkspace(fs: WorkspaceFS, options: { secret: string; durationMs: number }): Promise<HammerCounts> {
  const counts: HammerCounts = { calls: 0, okReads: 0, refused: 0, refusedByCode: {}, leaks: 0, unexpected: [], byOperation: {} };
  // Each operation answers whether it leaked: returned, listed, moved or deleted anything of the
  // outside directory. None of them creates `d` (that would break the swap loop's rhythm).
  const leaked = (text: string) => text.includes(options.secret) || text.includes('only-outside');
  const operations: Array<[string, () => Promise<boolean>]> = [
    ['readFile', async () => readInside(await fs.readFile('d/file', 'utf8'))],
    ['readFile', async () => readInside(await fs.readFile('d/file', 'utf8'))],
    ['createReadStream', async () => readInside(await drain(await fs.createReadStream('d/file')))],
    ['readDir', async () => leaked((await fs.readDir('d', { recursive: true })).map((e) => e.name).join(','))],
    ['stat', async () => (await fs.stat('d/only-outside'), true)],
    ['exportTar', async () => leaked(await drain(await fs.exportTar('d')))],
    ['rename', async () => (await fs.rename('d/only-outside', 'stolen'), true)],
    ['remove', async () => (await fs.remove('d/only-outside'), true)],
    ['removeAll', async () => (await fs.removeAll('d/only-outside'), false)],
  ];
  const readInside = (text: string): boolean => {
    if (text !== 'inside') return true;
    counts.okReads += 1;
    return false;
  };
  const until = Date.now() + options.durationMs;
  let i = 0;
  while (Date.now() < until) {
    const [name, run] = operations[i++ % operations.length] as [string, () => Promise<boolean>];
    const tally = (counts.byOperation[name] ??= { ok: 0, refused: 0 });
    counts.calls += 1;
    try {
      if (await run()) counts.leaks += 1;
      tally.ok += 1;
    } catch (err) {
      if (isSbxError(err, 'invalid_argument') || isSbxError(err, 'not_found')) {
        counts.refused += 1;
        tally.refused += 1;
        counts.refusedByCode[err.code] = (counts.refusedByCode[err.code] ?? 0) + 1;
      } else if (counts.unexpected.length < 5) {
        counts.unexpected.push(`${name}: ${String(err)}`);
      }
    }
  }
  return counts;
}
