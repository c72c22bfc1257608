import type { SecuritySpec } from '../runtime/types.js';
import type { SecurityProfile } from './types.js';

/**
 * The capabilities a `standard` box keeps: enough for package managers and servers on high
 * ports (ownership, setuid/gid to drop privileges, kill), without raw sockets, mknod,
 * chroot, audit or file capabilities that Docker's default set still grants.
 */
const STANDARD_CAPS = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID', 'NET_BIND_SERVICE'];

export const DEFAULT_PIDS_LIMIT = 512;

export interface ResolvedSecurity {
  security: SecuritySpec;
  /** A network mode the profile imposes when the caller asked for none. */
  network?: string;
}

export function securityFor(profile: SecurityProfile): ResolvedSecurity {
  switch (profile) {
    case 'standard':
      return { security: { noNewPrivileges: true, capDrop: ['ALL'], capAdd: STANDARD_CAPS } };
    case 'sudo':
      // What a caller can already do with exec as user 0; the bounding set stays standard's.
      return { security: { capDrop: ['ALL'], capAdd: STANDARD_CAPS } };
    case 'strict':
      return {
        security: { noNewPrivileges: true, capDrop: ['ALL'], readOnlyRootfs: true, tmpfs: { '/tmp': 'rw,nosuid,nodev,size=64m' } },
        network: 'none',
      };
  }
}
