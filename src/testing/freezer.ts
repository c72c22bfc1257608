/**
 * The kernel's word on whether a runc container is frozen: its cgroup freezer, read on this host.
 * The tests of pause ask this rather than the engine, whose paused flag lags (runtime/docker/freezer.ts).
 */
import { existsSync, readFileSync } from 'node:fs';
import type { ContainerStatus, Runtime } from '../runtime/types.js';
import { waitFor } from './wait.js';

/** Where the container's freezer state is, for the engine's cgroupfs and systemd drivers on cgroup v1 and v2. */
function freezerFile(containerId: string): { path: string; v2: boolean } {
  const candidates = [
    { path: `/sys/fs/cgroup/freezer/docker/${containerId}/freezer.state`, v2: false },
    { path: `/sys/fs/cgroup/freezer/system.slice/docker-${containerId}.scope/freezer.state`, v2: false },
    { path: `/sys/fs/cgroup/docker/${containerId}/cgroup.events`, v2: true },
    { path: `/sys/fs/cgroup/system.slice/docker-${containerId}.scope/cgroup.events`, v2: true },
  ];
  const found = candidates.find((c) => existsSync(c.path));
  if (!found) throw new Error(`no cgroup freezer found for container ${containerId} on this host`);
  return found;
}

/** Whether the kernel has the container frozen now (a freeze in progress counts as frozen). */
export function kernelFrozen(containerId: string): boolean {
  const { path, v2 } = freezerFile(containerId);
  const text = readFileSync(path, 'utf8');
  if (v2) return /^frozen 1$/m.test(text);
  return text.trim() !== 'THAWED';
}

/**
 * Until the engine's `inspect` says `status` (fails naming it after HANG_MS): Docker's paused flag
 * can lag a pause or an unpause for a moment, a late containerd event of an earlier one flipping it
 * back, and then converges. A box sbx left in the wrong state never gets there.
 */
export async function untilEngineSays(
  rt: Pick<Runtime, 'inspect'>,
  containerId: string,
  status: ContainerStatus,
  what = `the engine to say ${status}`,
): Promise<void> {
  await waitFor(async () => (await rt.inspect(containerId)).status === status, { what });
}
