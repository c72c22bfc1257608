import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { EngineClient } from '../engine/client.js';
import { BASE_IMAGE } from './identity.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export class NotReady extends Error {}

const HOW =
  'Run `bash scripts/engine.sh` (as root on a bare machine: it installs and starts dockerd) `bash scripts/images.sh` and `bash scripts/agent.sh`, then `npm run bench` again (or pass --no-setup to skip this step).';

/**
 * Brings the engine up and builds the images and the in-box agent with the project's own scripts, so `npm run bench`
 * works on a fresh machine after `npm ci`. Both are idempotent and fast when all is in place.
 * Their output goes to stderr: stdout is reserved for the table and the JSON line.
 */
export function runSetupScripts(log: (line: string) => void): void {
  for (const script of ['scripts/engine.sh', 'scripts/images.sh', 'scripts/agent.sh']) {
    const r = spawnSync('bash', [script], { cwd: ROOT, stdio: ['ignore', 2, 2] });
    if (r.error || r.status !== 0) {
      throw new NotReady(`${script} failed (${r.error?.message ?? `exit ${r.status ?? r.signal}`}). ${HOW}`);
    }
  }
  log('setup: engine, images and in-box agent ready');
}

/** Fails with what to do when the engine or the base image is missing. */
export async function checkEngine(engine: EngineClient): Promise<void> {
  try {
    await engine.call('GET', '/_ping');
  } catch (err) {
    throw new NotReady(`no Docker Engine answers on ${engine.socketPath} (${(err as Error).message}). ${HOW}`);
  }
  try {
    await engine.call('GET', `/images/${encodeURIComponent(BASE_IMAGE)}/json`);
  } catch {
    throw new NotReady(`image ${BASE_IMAGE} is missing. ${HOW}`);
  }
}
