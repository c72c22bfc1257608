/**
 * Docker CLI helpers for the box-level workspace tests (setup only; sbx itself never shells out).
 */
import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';

/** The busybox image boxes run (scripts/test.sh exports SBX_BASE_IMAGE). */
export const BASE_IMAGE = process.env.SBX_BASE_IMAGE ?? 'sbx-base:latest';

/** Label on every container these tests start, so `after` can remove them all. */
export const TEST_LABEL = 'sbx.test=workspace';

/** Result of one docker CLI call; never rejects on a non-zero exit. */
export interface DockerResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `docker ...args`.
 *
 * @example
 * const { stdout } = await docker(['exec', id, 'cat', '/workspace/a.txt']);
 */
export function docker(args: string[], timeoutMs = 60_000): Promise<DockerResult> {
  return new Promise((resolve) => {
    execFile('docker', args, { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * Waits until `image` exists locally (another engineer may still be building it).
 *
 * @example
 * await waitForImage('sbx-base:latest', 5 * 60_000);
 */
export async function waitForImage(image: string, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if ((await docker(['image', 'inspect', image])).code === 0) return;
    if (Date.now() > until) throw new Error(`image ${image} did not appear within ${timeoutMs / 1000} s; build it (scripts/images.sh) and rerun`);
    await sleep(2000);
  }
}

/**
 * Starts a labelled box with `hostPath` bind-mounted at /workspace and returns its id.
 *
 * @example
 * const box = await startBox(await manager.mountPath(ws.id), { readOnly: true });
 */
export async function startBox(hostPath: string, options: { readOnly?: boolean } = {}): Promise<string> {
  const mount = `${hostPath}:/workspace${options.readOnly ? ':ro' : ''}`;
  const run = await docker(['run', '-d', '--label', TEST_LABEL, '-v', mount, BASE_IMAGE]);
  if (run.code !== 0) throw new Error(`docker run failed: ${run.stderr}`);
  return run.stdout.trim();
}

/** Ids of the containers carrying the test label, running or not. */
export async function labelledContainers(): Promise<string[]> {
  const { stdout } = await docker(['ps', '-aq', '--filter', `label=${TEST_LABEL}`]);
  return stdout.split('\n').filter(Boolean);
}

/** Force-removes every labelled test container. */
export async function removeLabelledContainers(): Promise<void> {
  const ids = await labelledContainers();
  if (ids.length > 0) await docker(['rm', '-f', ...ids]);
}
