/**
 * From validated CreateOptions to what the engine is asked for: the box's record (which becomes
 * its labels) and its ContainerSpec. Pure functions, so every default and refusal is testable
 * without an engine.
 */
import { SbxError, invalidArgument } from '../errors.js';
import { MAX_RUNTIME_LABEL_VALUE } from '../runtime/bounds.js';
import type { BindMount, ContainerSpec, EgressSpec, RuntimeResources } from '../runtime/types.js';
import type { NetworkPolicy } from './egress-policy.js';
import type { ResolvedPool } from './config.js';
import { networkAllowed, notListed } from './config.js';
import type { BoxRecord } from './labels.js';
import { SPEC_LABEL, containerName, recordToLabels } from './labels.js';
import { DEFAULT_PIDS_LIMIT, securityFor } from './security.js';
import type { CreateOptions, LifecyclePolicy } from './types.js';
import { DEFAULT_POLICY } from './types.js';

/** The CMD a box runs unless the caller gives one: sleeps, and exits at once on SIGTERM. */
export const GRACEFUL_CMD = ['/bin/sh', '-c', "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done"];

export const DEFAULT_WORKDIR = '/workspace';

/** Where a `vnc: true` box's VNC server listens (images/sbx-desktop runs x11vnc there). */
export const VNC_PORT = 5900;
/** /dev/shm of a VNC box: X clients and browsers in it use shared memory; the engine's default is 64 MiB. */
export const VNC_SHM_BYTES = 256 * 1024 * 1024;

export interface RecordInput {
  manager: string;
  id: string;
  owner: string;
  pool: ResolvedPool;
  opts: CreateOptions;
  now: number;
  tokenNonce: string;
}

export function newBoxRecord({ manager, id, owner, pool, opts, now, tokenNonce }: RecordInput): BoxRecord {
  const record: BoxRecord = {
    manager,
    id,
    owner,
    pool: pool.name,
    policy: (opts.policy as LifecyclePolicy | undefined) ?? DEFAULT_POLICY,
    workspaceId: opts.workspaceId ?? null,
    mountMode: opts.mountMode ?? 'rw',
    mountPath: opts.mountPath ?? DEFAULT_WORKDIR,
    idleTimeoutMs: opts.idleTimeoutMs ?? pool.idleTimeoutMs,
    idlePauseMs: opts.idlePauseMs ?? pool.idlePauseMs,
    idleArchiveMs: opts.idleArchiveMs ?? pool.idleArchiveMs,
    stopTimeoutMs: opts.stopTimeoutMs ?? pool.stopTimeoutMs,
    maxLifetimeMs: opts.maxLifetimeMs ?? pool.maxLifetimeMs,
    maxLifetimeAction: opts.maxLifetimeAction ?? 'remove',
    createdAt: now,
    vnc: opts.vnc ?? false,
    image: opts.image,
    tokenNonce,
    labels: opts.labels ?? {},
  };
  const network = boxNetwork(opts, pool);
  if (network !== undefined) record.network = network;
  checkIdleLadder(record, opts);
  return record;
}

/** The network a box is on: the one it names, else its security profile's (strict: `none`); undefined is sbx's isolated one. */
export function boxNetwork(opts: CreateOptions, pool: ResolvedPool): string | undefined {
  return opts.network ?? securityFor(opts.security ?? pool.security).network;
}

/**
 * The egress policy a new box gets: its own, else its pool's. A box without a network reaches
 * nothing whatever its policy, so the pool's default there is `'none'` unless it is `'all'`.
 * Checked (checkEgress) before any engine call.
 */
export function boxNetworkPolicy(opts: CreateOptions, pool: ResolvedPool, egressEnforced: boolean): NetworkPolicy {
  const network = boxNetwork(opts, pool);
  const fallback: NetworkPolicy = network === 'none' && pool.networkPolicy.egress !== 'all' ? { egress: 'none' } : pool.networkPolicy;
  const policy = opts.networkPolicy ?? fallback;
  checkEgress(policy, { network, egressEnforced, pool: pool.name, policyOfPool: opts.networkPolicy === undefined });
  return policy;
}

/**
 * Whether a box on `network` may have `policy` on a runtime that does (`egressEnforced`) or does
 * not enforce egress: `'all'` always; a box without a network only `'all'` or `'none'`
 * (invalid_argument: it reaches nothing anyway); anything else only where the runtime enforces
 * it (not_available, reason `egress`).
 */
export function checkEgress(
  policy: NetworkPolicy,
  where: { network: string | undefined; egressEnforced: boolean; pool: string; id?: string; policyOfPool?: boolean },
): void {
  const egress = policy.egress;
  if (egress === 'all') return;
  if (where.network === 'none' && egress !== 'none') {
    throw invalidArgument(
      'networkPolicy.egress',
      `${where.id ? `box '${where.id}'` : 'the box'} has no network (network 'none', or the strict profile): it can reach nothing whatever the policy, so only 'all' or 'none'; give it a network (security 'standard') for allow and deny lists`,
    );
  }
  if (!where.egressEnforced) {
    const whose = where.policyOfPool
      ? `pool '${where.pool}' defaults to egress policy ${JSON.stringify(egress)}, but its runtime`
      : `pool '${where.pool}' runs on a runtime that`;
    throw new SbxError('not_available', `${whose} cannot enforce egress rules; only networkPolicy { egress: 'all' } works there`, {
      details: { pool: where.pool, reason: 'egress', ...(where.id ? { id: where.id } : {}) },
    });
  }
}

/**
 * The idle ladder's steps come in order, pause before archive before the idle timeout: a step at
 * or after a later one would never come (a persistent box has no idle timeout step). A step the
 * caller set that comes too late is invalid_argument naming it; one from the pool's defaults is
 * dropped instead (0), so a pool's ladder never breaks a create that sets a shorter idle timeout.
 */
function checkIdleLadder(record: BoxRecord, opts: CreateOptions): void {
  const fields = ['idlePauseMs', 'idleArchiveMs', 'idleTimeoutMs'] as const;
  const what = { idlePauseMs: 'idle pause', idleArchiveMs: 'idle archive', idleTimeoutMs: 'idle timeout' };
  const ms = (f: (typeof fields)[number]) => (f === 'idleTimeoutMs' && record.policy === 'persistent' ? 0 : record[f]);
  fields.forEach((early, i) => {
    for (const late of fields.slice(i + 1)) {
      if (ms(early) === 0 || ms(late) === 0 || ms(early) < ms(late)) continue;
      if (opts[early] !== undefined) {
        throw invalidArgument(
          early,
          `the ${what[early]} (${ms(early)} ms) must come before the ${what[late]} (${ms(late)} ms): the idle ladder goes pause, archive, idle timeout`,
        );
      }
      record[early] = 0;
    }
  });
}

/**
 * The memory and CPU a box gets: what it asked for, else the pool's default, never more than
 * the pool's ceiling (configured, else the engine machine's size when known).
 */
export function boxResources(opts: CreateOptions, pool: ResolvedPool, machine: RuntimeResources | undefined): { memory: number; cpus: number } {
  const maxMemory = pool.maxMemory ?? machine?.memoryBytes ?? 0;
  const maxCpus = pool.maxCpus ?? machine?.cpus ?? 0;
  if (opts.memory !== undefined && maxMemory > 0 && opts.memory > maxMemory) {
    throw invalidArgument('memory', `${opts.memory} bytes is more than pool '${pool.name}' allows (${maxMemory} bytes)`);
  }
  if (opts.cpus !== undefined && maxCpus > 0 && opts.cpus > maxCpus) {
    throw invalidArgument('cpus', `${opts.cpus} is more than pool '${pool.name}' allows (${maxCpus} cores)`);
  }
  const cap = (value: number, max: number) => (max > 0 && value > max ? max : value);
  return { memory: opts.memory ?? cap(pool.memory, maxMemory), cpus: opts.cpus ?? cap(pool.cpus, maxCpus) };
}

export interface SpecInput {
  record: BoxRecord;
  opts: CreateOptions;
  pool: ResolvedPool;
  /** Variables sbx hands every box (SBX_SANDBOX_ID, SBX_TOKEN, ...), over the caller's. */
  sbxEnv: Record<string, string>;
  mount: BindMount | undefined;
  /** Keep the spec in a label (SPEC_LABEL) for an archive's restore: on pools that can archive. */
  keepSpec?: boolean;
  machine: RuntimeResources | undefined;
  /** The box's egress rules (compileEgress), where the runtime enforces them. */
  egress?: EgressSpec | undefined;
}

/**
 * A box that names a network joins it instead of sbx's isolated one (docs/network.md): it may
 * name `none`, or a network the operator lists for the pool; any other (Docker's default
 * `bridge`, another application's network) would put it beside other containers and the host.
 */
export function checkNetwork(opts: CreateOptions, pool: ResolvedPool): void {
  if (opts.network !== undefined && !networkAllowed(opts.network, pool.networks)) throw invalidArgument('network', notListed(opts.network, pool.name));
}

export function buildContainerSpec({ record, opts, pool, sbxEnv, mount, machine, keepSpec, egress }: SpecInput): ContainerSpec {
  checkNetwork(opts, pool);
  const profileName = opts.security ?? pool.security;
  const profile = securityFor(profileName);
  if (profile.network && opts.network !== undefined && opts.network !== profile.network) {
    throw invalidArgument('network', `the '${profileName}' security profile means network '${profile.network}'; use security 'standard' for a network`);
  }
  const network = opts.network ?? profile.network;
  if (record.vnc && network === 'none') {
    throw invalidArgument('vnc', `a box without a network cannot publish its VNC port; use security 'standard' and a network`);
  }
  const { memory, cpus } = boxResources(opts, pool, machine);
  const ports = record.vnc ? withVncPort(opts.ports) : opts.ports;
  const spec: ContainerSpec = {
    image: opts.image,
    name: containerName(record.manager, record.id),
    cmd: opts.cmd ?? GRACEFUL_CMD,
    env: { ...(opts.env ?? {}), ...sbxEnv },
    workDir: opts.workDir ?? DEFAULT_WORKDIR,
    labels: recordToLabels(record),
    pidsLimit: opts.pidsLimit ?? pool.pidsLimit ?? DEFAULT_PIDS_LIMIT,
    security: profile.security,
    ...(memory ? { memory } : {}),
    ...(cpus ? { cpus } : {}),
    ...(opts.user ? { user: opts.user } : {}),
    ...(ports?.length ? { ports } : {}),
    ...(mount ? { binds: [mount] } : {}),
    ...(network ? { network } : {}),
    ...(pool.ociRuntime ? { ociRuntime: pool.ociRuntime } : {}),
    // What VNC needs is its port and shared memory: no capability (the seed's SYS_ADMIN is not needed).
    ...(record.vnc ? { shmSize: VNC_SHM_BYTES } : {}),
    ...(opts.proxyAllPorts ? { dialAnyPort: true } : {}),
    ...(egress ? { egress } : {}),
  };
  return keepSpec ? withSpecLabel(spec) : spec;
}

/**
 * The spec with itself as a label (`sbx.spec`), what an archive's restore makes the box from
 * again: without its labels (the record's) and its env (the archive image keeps the box's, and
 * sbx's own variables are made anew). One too large for a label is left out: such a box cannot be
 * archived (not_available, reason no_spec), which is better than not being made at all.
 */
export function withSpecLabel(spec: ContainerSpec): ContainerSpec {
  // Nor its egress rules: they change while it runs (setNetwork) and a restore compiles the policy
  // of the archive's record anew; a long list would make the label too large to keep.
  const { labels: _labels, env: _env, egress: _egress, ...kept } = spec;
  const text = JSON.stringify(kept);
  return text.length > MAX_RUNTIME_LABEL_VALUE ? spec : { ...spec, labels: { ...spec.labels, [SPEC_LABEL]: text } };
}

/** The caller's ports plus the VNC port on loopback (the engine picks the host port), unless already listed. */
function withVncPort(ports: CreateOptions['ports']): NonNullable<CreateOptions['ports']> {
  const list = ports ?? [];
  if (list.some((p) => p.containerPort === VNC_PORT && (p.protocol ?? 'tcp') === 'tcp')) return list;
  return [...list, { containerPort: VNC_PORT, hostIp: '127.0.0.1' }];
}
