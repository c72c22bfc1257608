/**
 * Shared helpers of the workspace tests (excluded from the build).
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isSbxError, type ErrorCode } from '../../errors.js';
import { WorkspaceManager } from '../../workspace/manager.js';
import { tempName } from '../../workspace/temp-names.js';
import type { WorkspaceManagerOptions } from '../../workspace/types.js';

/** A fresh temp directory and its removal. */
export async function makeTempDir(prefix: string): Promise<{ path: string; remove: () => Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), `sbx-${prefix}-`));
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}

/** A manager on its own data directory under `base`. */
export function makeManager(base: string, options: Partial<WorkspaceManagerOptions> = {}): WorkspaceManager {
  return new WorkspaceManager({ dataDir: join(base, `data-${Math.random().toString(36).slice(2)}`), ...options });
}

/** Asserts the promise rejects with an SbxError of `code` (and returns it). */
export async function rejectsWithCode(work: Promise<unknown> | (() => Promise<unknown>), code: ErrorCode, label = ''): Promise<Error> {
  let caught: unknown;
  try {
    await (typeof work === 'function' ? work() : work);
  } catch (err) {
    caught = err;
  }
  assert.ok(caught !== undefined, `${label}: expected ${code}, but it succeeded`);
  assert.ok(isSbxError(caught), `${label}: expected an SbxError ${code}, got ${String(caught)}`);
  assert.equal(caught.code, code, `${label}: expected ${code}, got ${caught.code}: ${caught.message}`);
  return caught;
}

/** Number of fds this process has open (Linux). */
export async function openFdCount(): Promise<number> {
  return (await readdir('/proc/self/fd')).length;
}

/**
 * A temp name whose writer is certainly gone: this process's pid with another start time, which
 * is what a crashed writer's pid looks like once the kernel has recycled it.
 */
export function deadWriterTempName(): string {
  return tempName().replace(/^(\.sbx-tmp-\d+-\d+-)(\d+)/, (_, head: string, start: string) => `${head}${BigInt(start) + 1n}`);
}

/** A temp name of a writer in another pid namespace (which a sweep cannot judge, so keeps). */
export function otherNamespaceTempName(): string {
  return tempName().replace(/^\.sbx-tmp-\d+-/, '.sbx-tmp-1-');
}
