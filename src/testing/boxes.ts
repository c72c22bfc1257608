/**
 * Real boxes for tests that need a container beside the code under test without a sandbox
 * Manager (the workspace tests mount a workspace into one). Everything goes through the Runtime,
 * never the docker CLI, and every container carries TEST_LABEL=<runId>, so
 * `assertNoContainersLeft(runtime, runId)` and scripts/test.sh see what a test forgot.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { openRuntime } from '../runtime/index.js';
import type { ContainerSpec, ExecOptions, ExecResult, Runtime } from '../runtime/types.js';
import { TEST_LABEL, testEnv } from './env.js';

/**
 * The Runtime on the engine the harness brought up.
 *
 * @example
 * const rt = openTestRuntime();
 */
export function openTestRuntime(): Runtime {
  return openRuntime(testEnv.engineAddr);
}

/**
 * Creates and starts a box (default image sbx-base) labelled for this run, and returns its id.
 * A box that fails to start is removed again.
 *
 * @example
 * const box = await startTestBox(rt, runId, { binds: [{ hostPath, containerPath: '/workspace', readOnly: true }] });
 */
export async function startTestBox(runtime: Runtime, runId: string, spec: Partial<ContainerSpec> = {}): Promise<string> {
  const id = await runtime.create({ image: testEnv.baseImage, ...spec, labels: { ...spec.labels, [TEST_LABEL]: runId } });
  try {
    await runtime.start(id);
  } catch (err) {
    await runtime.remove(id, { force: true }).catch(() => undefined);
    throw err;
  }
  return id;
}

/**
 * Runs `script` with /bin/sh in the box; a non-zero exit is a result, not an error.
 *
 * @example
 * const { exitCode, stdout } = await sh(rt, box, 'cat /workspace/a.txt', { user: '1000:1000' });
 */
export function sh(runtime: Runtime, id: string, script: string, options: ExecOptions = {}): Promise<ExecResult> {
  return runtime.exec(id, ['sh', '-c', script], options);
}

/**
 * Waits until `image` exists on the engine (scripts/images.sh may still be building it).
 *
 * @example
 * await waitForImage(rt, testEnv.baseImage, 5 * 60_000);
 */
export async function waitForImage(runtime: Runtime, image: string, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await runtime.images.exists(image))) {
    if (Date.now() > until) throw new Error(`image ${image} did not appear within ${timeoutMs / 1000} s; build it (scripts/images.sh) and rerun`);
    await sleep(2000);
  }
}

/**
 * Dials a box's port (`dialPort`) until what a connection sends matches `pattern`, and returns
 * that text; a listener that restarts between connections (`while :; do … | nc -l …; done`) is
 * dialled again. Throws after `tries` connections without a match.
 *
 * @example
 * assert.match(await readPort(rt, box, 8080, /hello/), /hello-from-box/);
 */
export async function readPort(runtime: Runtime, id: string, port: number, pattern: RegExp, tries = 50): Promise<string> {
  let text = '';
  for (let i = 0; i < tries; i++) {
    const sock = await runtime.dialPort(id, port);
    text = await new Promise<string>((resolve) => {
      let got = '';
      sock.on('data', (c: Buffer) => (got += c.toString()));
      sock.on('error', () => resolve(got));
      sock.on('end', () => resolve(got));
      setTimeout(() => resolve(got), 2000);
    });
    sock.destroy();
    if (pattern.test(text)) return text;
    await sleep(100);
  }
  throw new Error(`port ${port} of box ${id} sent nothing matching ${pattern} in ${tries} connections (last: ${JSON.stringify(text)})`);
}
