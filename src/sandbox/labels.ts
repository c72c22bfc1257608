import type { LifecyclePolicy, MaxLifetimeAction, MountMode } from './types.js';
import type { NetworkPolicy } from './egress-policy.js';
import { normalizePolicy } from './policy.js';

/** Every label sbx writes starts with this; user labels live under `sbx.label.`. */
export const LABEL_PREFIX = 'sbx.';
export const USER_LABEL_PREFIX = 'sbx.label.';
export const MANAGED_BY = 'sbx.managed-by';
export const MANAGED_BY_VALUE = 'sbx';

const L = {
  manager: 'sbx.manager',
  id: 'sbx.id',
  owner: 'sbx.owner',
  pool: 'sbx.pool',
  policy: 'sbx.policy',
  workspace: 'sbx.workspace',
  mountMode: 'sbx.mount-mode',
  mountPath: 'sbx.mount-path',
  idleTimeout: 'sbx.idle-timeout-ms',
  idlePause: 'sbx.idle-pause-ms',
  idleArchive: 'sbx.idle-archive-ms',
  stopTimeout: 'sbx.stop-timeout-ms',
  maxLifetime: 'sbx.max-lifetime-ms',
  maxLifetimeAction: 'sbx.max-lifetime-action',
  createdAt: 'sbx.created-at',
  vnc: 'sbx.vnc',
  image: 'sbx.image',
  tokenNonce: 'sbx.token-nonce',
  network: 'sbx.box-network',
} as const;

/** Everything recovery needs to rebuild a box after a restart; the labels are the database. */
export interface BoxRecord {
  manager: string;
  id: string;
  owner: string;
  pool: string;
  policy: LifecyclePolicy;
  workspaceId: string | null;
  mountMode: MountMode;
  mountPath: string;
  idleTimeoutMs: number;
  /** Idle time after which the box is paused (the idle ladder's first step); 0: never. */
  idlePauseMs: number;
  /** Idle time after which the box is archived (the idle ladder's second step); 0: never. */
  idleArchiveMs: number;
  stopTimeoutMs: number;
  maxLifetimeMs: number;
  maxLifetimeAction: MaxLifetimeAction;
  createdAt: number;
  vnc: boolean;
  image: string;
  tokenNonce: string;
  labels: Record<string, string>;
  /** The network the box was created on when not sbx's isolated one (`none`, a listed network): label `sbx.box-network` (`sbx.network` labels Docker's networks themselves). */
  network?: string;
  /**
   * The box's egress policy as last set (create, setNetwork); no label (it changes while the box
   * runs): a runtime that enforces egress keeps it (Runtime.getEgress), an archive's record too.
   */
  networkPolicy?: NetworkPolicy;
}

export function recordToLabels(r: BoxRecord): Record<string, string> {
  const out: Record<string, string> = {
    [MANAGED_BY]: MANAGED_BY_VALUE,
    [L.manager]: r.manager,
    [L.id]: r.id,
    [L.owner]: r.owner,
    [L.pool]: r.pool,
    [L.policy]: r.policy,
    [L.workspace]: r.workspaceId ?? '',
    [L.mountMode]: r.mountMode,
    [L.mountPath]: r.mountPath,
    [L.idleTimeout]: String(r.idleTimeoutMs),
    [L.idlePause]: String(r.idlePauseMs),
    [L.idleArchive]: String(r.idleArchiveMs),
    [L.stopTimeout]: String(r.stopTimeoutMs),
    [L.maxLifetime]: String(r.maxLifetimeMs),
    [L.maxLifetimeAction]: r.maxLifetimeAction,
    [L.createdAt]: new Date(r.createdAt).toISOString(),
    [L.vnc]: String(r.vnc),
    [L.image]: r.image,
    [L.tokenNonce]: r.tokenNonce,
    ...(r.network ? { [L.network]: r.network } : {}),
  };
  for (const [k, v] of Object.entries(r.labels)) out[USER_LABEL_PREFIX + k] = v;
  return out;
}

/**
 * Rebuilds a record from container labels. Missing or garbled numbers fall back to the pool's
 * values (`fallback`), a missing created-at to the container's own creation time, an unknown
 * policy to the default: nothing recovered is ever immortal by accident.
 */
export function labelsToRecord(
  labels: Record<string, string>,
  fallback: {
    idleTimeoutMs: number;
    idlePauseMs?: number;
    idleArchiveMs?: number;
    stopTimeoutMs: number;
    maxLifetimeMs: number;
    createdAt: number;
    image: string;
  },
): BoxRecord | null {
  const id = labels[L.id];
  const pool = labels[L.pool];
  if (labels[MANAGED_BY] !== MANAGED_BY_VALUE || !id || !pool) return null;
  const num = (key: string, dflt: number) => {
    const n = Number(labels[key]);
    return labels[key] !== undefined && labels[key] !== '' && Number.isFinite(n) && n >= 0 ? n : dflt;
  };
  const created = Date.parse(labels[L.createdAt] ?? '');
  const user: Record<string, string> = {};
  for (const [k, v] of Object.entries(labels)) if (k.startsWith(USER_LABEL_PREFIX)) user[k.slice(USER_LABEL_PREFIX.length)] = v;
  return {
    manager: labels[L.manager] ?? '',
    id,
    owner: labels[L.owner] ?? '',
    pool,
    policy: normalizePolicy(labels[L.policy]),
    workspaceId: labels[L.workspace] || null,
    mountMode: labels[L.mountMode] === 'ro' ? 'ro' : 'rw',
    mountPath: labels[L.mountPath] || '/workspace',
    idleTimeoutMs: num(L.idleTimeout, fallback.idleTimeoutMs),
    idlePauseMs: num(L.idlePause, fallback.idlePauseMs ?? 0),
    idleArchiveMs: num(L.idleArchive, fallback.idleArchiveMs ?? 0),
    stopTimeoutMs: num(L.stopTimeout, fallback.stopTimeoutMs),
    maxLifetimeMs: num(L.maxLifetime, fallback.maxLifetimeMs),
    // Anything but a known action is the default: a garbled label never keeps a box past its end.
    maxLifetimeAction: labels[L.maxLifetimeAction] === 'pause' ? 'pause' : 'remove',
    createdAt: Number.isFinite(created) ? created : fallback.createdAt,
    vnc: labels[L.vnc] === 'true',
    image: labels[L.image] || fallback.image,
    tokenNonce: labels[L.tokenNonce] ?? '',
    labels: user,
    ...(labels[L.network] ? { network: labels[L.network] } : {}),
  };
}

/**
 * The spec a box was created with (its labels aside), as JSON: what an archive's restore creates
 * the box from again (src/sandbox/archiver.ts). Boxes made before it existed cannot be archived.
 */
export const SPEC_LABEL = 'sbx.spec';

/** Marks an image holding an archived box's filesystem: its value is the box id. */
export const ARCHIVE_LABEL = 'sbx.archive';

/** The container's name: one per Manager and box id, so an engine never holds two of a box. */
export function containerName(manager: string, id: string): string {
  return `sbx-${manager}-${id}`;
}

/** The label filter of one box of a Manager on a pool. */
export function boxSelector(manager: string, pool: string, id: string): Record<string, string> {
  return { ...managerSelector(manager, pool), [L.id]: id };
}

/** Label filter selecting one Manager's boxes (optionally of one pool) on a runtime. */
export function managerSelector(manager: string, pool?: string): Record<string, string> {
  return { [MANAGED_BY]: MANAGED_BY_VALUE, [L.manager]: manager, ...(pool ? { [L.pool]: pool } : {}) };
}

export function userLabelSelector(labels: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).map(([k, v]) => [USER_LABEL_PREFIX + k, v]));
}
