import { readFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { SbxError } from '../errors.js';
import { writeFileAtomic } from '../util/atomic-file.js';

/**
 * What a claim gave a warm spare: the labels a cold box would carry (the same record, in the same
 * encoding, so recovery reads both alike) and the env every exec of the box gets.
 */
export interface Claim {
  containerId: string;
  labels: Record<string, string>;
  env: Record<string, string>;
}

/**
 * Claimed spares, one file per container in `<dataDir>/claims/<instance>/`, each written atomically
 * before the claim returns: a Manager killed at any point after a claim recovers the box with every
 * field, and one killed before it finds an unclaimed spare.
 */
export class ClaimStore {
  private readonly claims = new Map<string, Claim>();

  constructor(private readonly dir: string) {}

  /** Reads every claim on disk (a missing directory is none). Unreadable files are skipped and named. */
  async load(): Promise<string[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const bad: string[] = [];
    for (const name of names.filter((n) => n.endsWith('.json'))) {
      try {
        const c = JSON.parse(await readFile(join(this.dir, name), 'utf8')) as Claim;
        if (typeof c.containerId === 'string' && c.labels && c.env) this.claims.set(c.containerId, c);
        else bad.push(name);
      } catch {
        bad.push(name);
      }
    }
    return bad;
  }

  get(containerId: string): Claim | undefined {
    return this.claims.get(containerId);
  }

  /** Records a claim; resolves once it is on disk. */
  async save(claim: Claim): Promise<void> {
    await writeFileAtomic(this.file(claim.containerId), JSON.stringify(claim));
    this.claims.set(claim.containerId, claim);
  }

  async delete(containerId: string): Promise<void> {
    if (!this.claims.delete(containerId)) return;
    await rm(this.file(containerId), { force: true });
  }

  private file(containerId: string): string {
    // Container ids come from the runtime; one that could leave this directory never names a file.
    if (!/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,200}$/.test(containerId)) throw new SbxError('internal', `claims: '${containerId}' is not a container id`);
    return join(this.dir, `${containerId}.json`);
  }
}
