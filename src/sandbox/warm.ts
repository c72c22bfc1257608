/**
 * Warm pools, the pure part: which creates a template can serve, the shape a template stands
 * for, and the container spec of a spare. A spare is a started box with no identity yet; what a
 * claim gives it (id, owner, labels, policy, timeouts, env) is recorded by the Manager, not in
 * the container, whose labels cannot change.
 */
import { createHash } from 'node:crypto';
import type { ContainerSpec, ContainerSummary, EgressSpec, RuntimeResources } from '../runtime/types.js';
import type { Claim } from './claims.js';
import { DEFAULT_WORKDIR, buildContainerSpec, newBoxRecord } from './box-spec.js';
import type { ResolvedPool, WarmTemplate } from './config.js';
import { MANAGED_BY, MANAGED_BY_VALUE, SPEC_LABEL, managerSelector } from './labels.js';
import { securityFor } from './security.js';
import type { CreateOptions, SecurityProfile } from './types.js';

/** Label of a spare: its template's key. A container with it and no claim is not a user box. */
export const WARM_LABEL = 'sbx.warm';

/** What must be equal between a create and a template: everything fixed at container create. */
interface Shape {
  image: string;
  security: SecurityProfile;
  memory: number;
  cpus: number;
  network: string | undefined;
}

/**
 * Options a claim cannot apply to a started container: the command, the container's user and
 * working directory, pids limit, ports, VNC and workspace mounts. A create giving any of them
 * goes cold. Everything else is applied at claim time (id, owner, labels, pool, env, policy and
 * timeouts) or must produce the template's shape (image, security, memory, cpus, network).
 */
const FIXED_AT_CREATE = ['cmd', 'user', 'pidsLimit', 'ports', 'vnc', 'proxyAllPorts', 'workspaceId', 'mountMode', 'mountPath'] as const;

function shapeOf(
  o: { image: string; security?: SecurityProfile; memory?: number; cpus?: number; network?: string },
  pool: ResolvedPool,
  machine: RuntimeResources | undefined,
): Shape {
  const security = o.security ?? pool.security;
  const maxMemory = pool.maxMemory ?? machine?.memoryBytes ?? 0;
  const maxCpus = pool.maxCpus ?? machine?.cpus ?? 0;
  const cap = (value: number, max: number) => (max > 0 && value > max ? max : value);
  return {
    image: o.image,
    security,
    memory: o.memory ?? cap(pool.memory, maxMemory),
    cpus: o.cpus ?? cap(pool.cpus, maxCpus),
    network: o.network ?? securityFor(security).network,
  };
}

/**
 * A stable key of a template's shape within its pool: the spare's label, so a changed config is
 * seen. Not the egress policy: a claim sets its own on the spare (Runtime.setEgress).
 */
export function templateKey(t: WarmTemplate, pool: ResolvedPool, machine: RuntimeResources | undefined): string {
  const s = shapeOf(t, pool, machine);
  // 'isolated': spares made before boxes without a network joined the runtime's isolated one
  // (docs/network.md) have another key, so they are removed, never handed out.
  const text = JSON.stringify([
    pool.name,
    s.image,
    s.security,
    s.memory,
    s.cpus,
    s.network ?? 'isolated',
    pool.ociRuntime ?? '',
    pool.pidsLimit ?? 0,
    pool.agent,
  ]);
  return createHash('sha256').update(text).digest('hex').slice(0, 16);
}

/** The template of `pool` that can serve `opts`, or undefined (then the create goes cold). */
export function matchTemplate(opts: CreateOptions, pool: ResolvedPool, machine: RuntimeResources | undefined): WarmTemplate | undefined {
  if (pool.warm.length === 0) return undefined;
  for (const key of FIXED_AT_CREATE) if (opts[key] !== undefined && !(Array.isArray(opts[key]) && opts[key].length === 0)) return undefined;
  if (opts.workDir !== undefined && opts.workDir !== DEFAULT_WORKDIR) return undefined;
  const want = shapeOf(opts, pool, machine);
  return pool.warm.find((t) => {
    if (t.size === 0) return false;
    const have = shapeOf(t, pool, machine);
    return (
      have.image === want.image && have.security === want.security && have.memory === want.memory && have.cpus === want.cpus && have.network === want.network
    );
  });
}

/** The options a create gives for the template's shape (the spare is made as a cold box of them). */
export function templateOptions(t: WarmTemplate): CreateOptions {
  return {
    image: t.image,
    ...(t.security ? { security: t.security } : {}),
    ...(t.memory !== undefined ? { memory: t.memory } : {}),
    ...(t.cpus !== undefined ? { cpus: t.cpus } : {}),
    ...(t.network ? { network: t.network } : {}),
  };
}

/**
 * The spec of a spare: a cold box's spec for the template's options, named and labelled as a
 * spare. No restart policy: a spare that dies is replaced, and a claimed box the engine stopped
 * is started again by the Manager as any other.
 */
export function spareSpec(opts: {
  manager: string;
  pool: ResolvedPool;
  template: WarmTemplate;
  key: string;
  spareId: string;
  now: number;
  machine: RuntimeResources | undefined;
  /** Keep the spec in a label (SPEC_LABEL), so a box the spare becomes can be archived. */
  keepSpec?: boolean;
  /** The spare's egress rules (the pool's policy), where the runtime enforces egress. */
  egress?: EgressSpec | undefined;
}): ContainerSpec {
  const { template: t } = opts;
  const createOpts = templateOptions(t);
  const record = newBoxRecord({ manager: opts.manager, id: opts.spareId, owner: '', pool: opts.pool, opts: createOpts, now: opts.now, tokenNonce: '' });
  const spec = buildContainerSpec({
    record,
    opts: createOpts,
    pool: opts.pool,
    sbxEnv: {},
    mount: undefined,
    machine: opts.machine,
    keepSpec: opts.keepSpec ?? false,
    egress: opts.egress,
  });
  const kept = spec.labels?.[SPEC_LABEL];
  return {
    ...spec,
    name: `sbx-${opts.manager}-${opts.spareId}`,
    labels: {
      ...managerSelector(opts.manager, opts.pool.name),
      [MANAGED_BY]: MANAGED_BY_VALUE,
      [WARM_LABEL]: opts.key,
      'sbx.image': t.image,
      ...(kept ? { [SPEC_LABEL]: kept } : {}),
    },
  };
}

/**
 * The engine's list as recovery reads it: a claimed spare is a box carrying its claim's labels
 * (the record a cold box would carry), an unclaimed one is a spare of the warm pool, anything
 * else is as listed.
 */
export function joinClaims(
  list: ContainerSummary[],
  claimOf: (containerId: string) => Claim | undefined,
): { boxes: ContainerSummary[]; spares: ContainerSummary[] } {
  const boxes: ContainerSummary[] = [];
  const spares: ContainerSummary[] = [];
  for (const c of list) {
    if (c.labels[WARM_LABEL] === undefined) boxes.push(c);
    else {
      const claim = claimOf(c.id);
      if (claim) boxes.push({ ...c, labels: { ...c.labels, ...claim.labels } });
      else spares.push(c);
    }
  }
  return { boxes, spares };
}
