import { randomBytes } from 'node:crypto';
import { DEFAULT_WORKDIR, GRACEFUL_CMD } from '../../src/sandbox/box-spec.js';
import { DEFAULT_BOX_CPUS, DEFAULT_BOX_MEMORY } from '../../src/sandbox/config.js';
import { BOX_NETWORK } from '../../src/runtime/docker/box-network.js';
import { EGRESS_ALL } from '../../src/runtime/egress-spec.js';
import { DEFAULT_PIDS_LIMIT, securityFor } from '../../src/sandbox/security.js';
import { BASE_IMAGE, BENCH_CONTAINER_LABEL } from '../core/identity.js';

/**
 * The create body sbx sends for `manager.create({ image })` on a `standard` pool, written out
 * by hand so the raw side pays none of sbx's validation or label building per call. The
 * constants come from sbx so the hardening cannot drift; core/parity.ts checks the rest
 * against a real sbx container at start-up.
 */
export interface RawCreateTemplate {
  hostConfig: Record<string, unknown>;
  /** What sbx keeps of the spec as a label (`sbx.spec`, for a restore), of the same shape and size. */
  specLabel: string;
  manager: string;
  runId: string;
}

export function rawCreateTemplate(manager: string, runId: string): RawCreateTemplate {
  const { security } = securityFor('standard');
  const specLabel = JSON.stringify({
    image: BASE_IMAGE,
    cmd: GRACEFUL_CMD,
    workDir: DEFAULT_WORKDIR,
    memory: DEFAULT_BOX_MEMORY,
    cpus: DEFAULT_BOX_CPUS,
    pidsLimit: DEFAULT_PIDS_LIMIT,
    network: BOX_NETWORK,
    security,
  });
  return {
    manager,
    runId,
    specLabel,
    hostConfig: {
      Memory: DEFAULT_BOX_MEMORY,
      MemorySwap: DEFAULT_BOX_MEMORY,
      NanoCpus: DEFAULT_BOX_CPUS * 1e9,
      PidsLimit: DEFAULT_PIDS_LIMIT,
      // sbx's isolated network, which parity's sbx box made: a box that names none joins it.
      NetworkMode: BOX_NETWORK,
      ...(security.noNewPrivileges ? { SecurityOpt: ['no-new-privileges'] } : {}),
      ...(security.capDrop?.length ? { CapDrop: security.capDrop } : {}),
      ...(security.capAdd?.length ? { CapAdd: security.capAdd } : {}),
    },
  };
}

/** One container's name and body: fresh id, nonce and timestamps, like every sbx box gets. */
export function rawCreateBody(t: RawCreateTemplate): { name: string; id: string; body: Record<string, unknown> } {
  const id = `sb-${randomBytes(6).toString('hex')}`;
  const nonce = randomBytes(9).toString('base64url');
  // Same shape and length as an sbx box token; the raw side has no secret to sign with.
  const token = `sbxb1.${id}.${nonce}.${Date.now() + 86_400_000}.${randomBytes(32).toString('base64url')}`;
  return {
    id,
    name: `sbx-${t.manager}-${id}`,
    body: {
      Image: BASE_IMAGE,
      Cmd: GRACEFUL_CMD,
      Env: [`SBX_SANDBOX_ID=${id}`, `SBX_TOKEN=${token}`],
      WorkingDir: DEFAULT_WORKDIR,
      Labels: {
        'sbx.managed-by': 'sbx',
        'sbx.manager': t.manager,
        'sbx.id': id,
        'sbx.owner': 'default',
        'sbx.pool': 'local',
        'sbx.policy': 'session',
        'sbx.workspace': '',
        'sbx.mount-mode': 'rw',
        'sbx.mount-path': DEFAULT_WORKDIR,
        'sbx.idle-timeout-ms': '1800000',
        'sbx.idle-pause-ms': '0',
        'sbx.idle-archive-ms': '0',
        'sbx.stop-timeout-ms': '2000',
        'sbx.max-lifetime-ms': '0',
        'sbx.max-lifetime-action': 'remove',
        'sbx.created-at': new Date().toISOString(),
        'sbx.vnc': 'false',
        'sbx.image': BASE_IMAGE,
        'sbx.token-nonce': nonce,
        'sbx.spec': t.specLabel,
        // The rules of egress 'all' (sbx's default policy), as the runtime labels every box.
        'sbx.egress': JSON.stringify(EGRESS_ALL),
        [BENCH_CONTAINER_LABEL]: t.runId,
      },
      HostConfig: t.hostConfig,
    },
  };
}
