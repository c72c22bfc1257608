/**
 * What the test harness (scripts/test.sh) hands the tests. Defaults match the harness, so a
 * single file also runs with plain `node --import tsx --test <file>` once the harness ran once.
 */
export const testEnv = {
  /** busybox image with the graceful-shutdown CMD and a `sandbox` user (uid 1000). */
  baseImage: process.env['SBX_BASE_IMAGE'] ?? 'sbx-base:latest',
  /** sbx-base plus node and the in-box WebSocket echo (3000) and SSE (3001) services. */
  testImage: process.env['SBX_TEST_IMAGE'] ?? 'sbx-test:latest',
  /** sbx-base plus Xvfb, twm and x11vnc on :5900, started by its entrypoint (images/sbx-desktop). */
  desktopImage: process.env['SBX_DESKTOP_IMAGE'] ?? 'sbx-desktop:latest',
  /** sbx-base plus bash and e2b's `user` account (uid 1000, home /home/user): the e2b template (images/sbx-e2b). */
  e2bImage: process.env['SBX_E2B_IMAGE'] ?? 'sbx-e2b:latest',
  registry: process.env['SBX_TEST_REGISTRY'] ?? '127.0.0.1:5000',
  authRegistry: process.env['SBX_TEST_REGISTRY_AUTH'] ?? '127.0.0.1:5001',
  registryUser: process.env['SBX_TEST_REGISTRY_USER'] ?? 'sbx',
  registryPass: process.env['SBX_TEST_REGISTRY_PASS'] ?? 'sbx-test-pass',
  pullImage: process.env['SBX_TEST_PULL_IMAGE'] ?? '127.0.0.1:5000/sbx/pulltest:latest',
  engineAddr: process.env['SBX_TEST_ENGINE'] ?? 'local',
  /** The engine's gVisor runtime (scripts/gvisor.sh registers `runsc`). */
  gvisorRuntime: process.env['SBX_TEST_GVISOR_RUNTIME'] ?? 'runsc',
};

/** Label every container a test creates carries; scripts/test.sh fails the run if any remain. */
export const TEST_LABEL = 'sbx.test';

/** A label value unique to one test file's run, so its own leak check sees only its containers. */
export function testRunId(name: string): string {
  return `${name}-${process.pid}-${Date.now().toString(36)}`;
}
