/**
 * The kernel's word on whether a runc container is frozen: its cgroup freezer, read on this host.
 * The tests of pause ask this rather than the engine, whose paused flag lags (runtime/docker/freezer.ts).
 */
import { existsSync, readFileSync } from 'node:fs';

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
