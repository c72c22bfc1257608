/**
 * What a box on gVisor (an engine runtime that is runsc, docs/isolation.md) needs beside a runc
 * box's create, because its processes live in gVisor's own kernel (the Sentry), not the host's:
 *
 * - memory: the host cgroup's limit holds the Sentry itself (about 16 MiB idle) beside the box's
 *   memory, and runsc sizes the box's memory from it; a limit below GVISOR_MIN_MEMORY_BYTES leaves
 *   the sandbox no room to start (`cannot read client sync file`, or a failing network hook).
 *   Going over it, the host's OOM killer ends the sandbox: the whole box stops (exit 137, OOMKilled).
 * - pids: the engine's pids limit is the host cgroup's, where the sandbox's own tasks count (about
 *   30 idle) and about two per box process (systrap's stubs), and where going over it ends the
 *   sandbox (exit 2) rather than failing a fork; a limit below GVISOR_MIN_PIDS leaves the sandbox
 *   no room to start. The Sentry's own pids controller cannot stand in: at cgroup v1 (runsc's
 *   default) a fork is charged to one of the task's seven cgroups picked by Go map order (gVisor's
 *   Task.chargeLocked), so pids.max holds one fork in seven; at v2 it holds, but the engine mounts
 *   /sys/fs/cgroup read-only and runsc applies no limit of the spec there. So the limit stays a
 *   bound on the sandbox, and `capabilities.pidsLimit` is false for gVisor boxes.
 * - /tmp: runsc mounts a tmpfs of its own at an empty /tmp of the image, so what a box writes
 *   there would be in no commit, no archive and no restart; a marker file makes it not empty.
 * - processes: the engine's `top` matches the Sentry's process ids against the host's `ps`, and
 *   lists the host's processes of those ids; the box's own /proc is read instead (`sbx-agent ps`).
 */
import type Docker from 'dockerode';
import * as tar from 'tar-stream';
import { invalidArgument } from '../../errors.js';
import type { ContainerSpec, ProcessInfo } from '../types.js';

/** The least memory a gVisor box may have: the Sentry takes about 16 MiB of it idle. */
export const GVISOR_MIN_MEMORY_BYTES = 32 * 1024 * 1024;

/** The least pids limit a gVisor box may have: the sandbox's own tasks are about 30 of it. */
export const GVISOR_MIN_PIDS = 64;

/** The file that keeps /tmp of a gVisor box in its root filesystem (runsc's tmpfs goes only on an empty one). */
export const GVISOR_TMP_MARKER = '/tmp/.sbx-rootfs';

/** Whether an engine runtime (an entry of `docker info`'s Runtimes) is gVisor's runsc. */
export function isGvisorRuntime(name: string, entry: { path?: string; runtimeType?: string } | undefined): boolean {
  const path = entry?.path ?? entry?.runtimeType ?? '';
  return name === 'runsc' || /(^|\/)runsc$/.test(path) || /\.runsc\.v\d+$/.test(path);
}

/** A gVisor box's spec, checked for limits its sandbox can start under. */
export function checkGvisorSpec(spec: ContainerSpec): void {
  if (spec.memory && spec.memory < GVISOR_MIN_MEMORY_BYTES) {
    throw invalidArgument(
      'memory',
      `a gVisor box (runtime ${spec.ociRuntime}) needs at least ${GVISOR_MIN_MEMORY_BYTES / 1024 / 1024} MiB: its memory limit holds gVisor's own kernel (about 16 MiB) beside the box's processes`,
    );
  }
  if (spec.pidsLimit && spec.pidsLimit < GVISOR_MIN_PIDS) {
    throw invalidArgument(
      'pidsLimit',
      `a gVisor box (runtime ${spec.ociRuntime}) needs a pids limit of at least ${GVISOR_MIN_PIDS}: it counts gVisor's own tasks (about 30) beside about two per box process`,
    );
  }
}

/** Puts GVISOR_TMP_MARKER into a created container's filesystem (before its start). */
export async function keepTmpInRootfs(container: Docker.Container): Promise<void> {
  const pack = tar.pack();
  // /tmp as images have it (created so, should the image have none).
  pack.entry({ name: 'tmp/', type: 'directory', mode: 0o1777, uid: 0, gid: 0 });
  pack.entry({ name: GVISOR_TMP_MARKER.slice(1), type: 'file', mode: 0o444, uid: 0, gid: 0 }, '');
  pack.finalize();
  await container.putArchive(pack as unknown as NodeJS.ReadableStream, { path: '/' });
}

/** The processes `sbx-agent ps` printed (a JSON array of ProcessInfo). */
export function parseBoxPs(stdout: string): ProcessInfo[] {
  const list = JSON.parse(stdout) as unknown;
  if (!Array.isArray(list)) throw new Error('not a list');
  return list.map((p: Record<string, unknown>) => ({ pid: String(p['pid'] ?? ''), user: String(p['user'] ?? ''), command: String(p['command'] ?? '') }));
}
