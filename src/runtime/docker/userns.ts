/**
 * Whether a Docker Engine runs its boxes in a user namespace (`dockerd --userns-remap`), and the
 * map: what a box's uid/gid is on the engine's machine. The engine says it is remapped
 * (`SecurityOptions` holds `name=userns`) but not to what; its data root does: a remapped daemon
 * keeps its data in `<data-root>/<uid>.<gid>`, the host ids its boxes' root maps to (moby
 * daemon/daemon_unix.go setupRemappedRoot). The size of the range is the subordinate-id range
 * starting there in /etc/subuid and /etc/subgid, which only an engine on this machine shares.
 */
import { readFile } from 'node:fs/promises';
import { SbxError } from '../../errors.js';
import type { UserNamespaceMap } from '../types.js';

/** The range dockerd's `--userns-remap=default` gives the `dockremap` user it creates. */
export const DEFAULT_REMAP_SIZE = 65536;

/** The `docker info` fields the map is read from. */
export interface EngineInfo {
  SecurityOptions?: string[] | null;
  DockerRootDir?: string;
}

/** Where subordinate id ranges are read from (tests point these elsewhere). */
export interface SubidFiles {
  subuid: string;
  subgid: string;
}

/** This machine's. */
export const HOST_SUBID_FILES: SubidFiles = { subuid: '/etc/subuid', subgid: '/etc/subgid' };

/**
 * The engine's user namespace map, or undefined when it runs boxes with the machine's own ids.
 * `subids`: the engine shares this machine's /etc/subuid and /etc/subgid (a unix socket); else
 * the size is dockremap's default.
 *
 * @example
 * await usernsOf({ SecurityOptions: ['name=userns'], DockerRootDir: '/var/lib/docker/100000.100000' }, HOST_SUBID_FILES);
 * // → { hostUid: 100000, hostGid: 100000, size: 65536 }
 */
export async function usernsOf(info: EngineInfo, subids: SubidFiles | undefined): Promise<UserNamespaceMap | undefined> {
  if (!(info.SecurityOptions ?? []).some((o) => o.split(',').includes('name=userns'))) return undefined;
  const m = /\/(\d+)\.(\d+)\/*$/.exec(info.DockerRootDir ?? '');
  if (!m) {
    // Files a box writes would belong to ids sbx cannot name: refuse rather than chown wrong.
    throw new SbxError(
      'not_available',
      `the engine runs boxes in a user namespace, but its data root '${info.DockerRootDir ?? ''}' does not name the ids (<uid>.<gid>)`,
      {
        details: { dockerRootDir: info.DockerRootDir ?? null },
      },
    );
  }
  const hostUid = Number(m[1]);
  const hostGid = Number(m[2]);
  if (!subids) return { hostUid, hostGid, size: DEFAULT_REMAP_SIZE };
  const [uids, gids] = await Promise.all([rangeAt(subids.subuid, hostUid), rangeAt(subids.subgid, hostGid)]);
  return { hostUid, hostGid, size: Math.min(uids ?? DEFAULT_REMAP_SIZE, gids ?? DEFAULT_REMAP_SIZE) };
}

/** The count of the subordinate range (`name:start:count` lines) that starts at `start`, if one does. */
async function rangeAt(file: string, start: number): Promise<number | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    return undefined;
  }
  for (const line of text.split('\n')) {
    const [, first, count] = line.trim().split(':');
    if (Number(first) === start && Number(count) > 0) return Number(count);
  }
  return undefined;
}
