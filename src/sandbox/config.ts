import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { LineCounter, parseDocument } from 'yaml';
import { z } from 'zod';
import { SbxError, invalidArgument } from '../errors.js';
import type { Runtime } from '../runtime/types.js';
import type { AgentDeliveryChoice, RuntimeOptions } from '../runtime/types.js';
import { AGENT_DELIVERY_CHOICES } from '../runtime/types.js';
import { MAX_PIDS, MIN_CPUS, MIN_MEMORY_BYTES, durationMs } from '../runtime/bounds.js';
import { parseDuration } from '../util/duration.js';
import { parseOrThrow } from '../util/validation.js';
import { imageRef } from '../runtime/spec.js';
import { DEFAULT_MAX_WORKSPACES_PER_OWNER } from '../workspace/manager.js';
import { DEFAULT_MAX_SNAPSHOTS_PER_OWNER } from './snapshots.js';
import { DEFAULT_NETWORK_POLICY, NetworkPolicySchema, normalizeNetworkPolicy } from './egress-policy.js';
import type { NetworkPolicy } from './egress-policy.js';
import type { SecurityProfile } from './types.js';

export const NAME_PATTERN = /^[a-z0-9][a-z0-9_-]{0,31}$/;

const ms = durationMs;

/** A box's memory and CPU unless it asks otherwise (pool keys `memory`, `cpus`; 0 = no limit). */
export const DEFAULT_BOX_MEMORY = 1024 * 1024 * 1024;
export const DEFAULT_BOX_CPUS = 1;
/** Boxes one owner may hold on a pool unless configured otherwise (`maxPerUser`; 0 = unlimited). */
export const DEFAULT_MAX_PER_USER = 100;

/** A Docker network a box may name; `host` (the host's own network stack) never. */
const networkName = z
  .string()
  .regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/, 'must be a network name')
  .refine((n) => n !== 'host', "'host' would share the host's network; not allowed");

/** A warm-pool template: `size` started spares of one image and shape, claimed by matching creates. */
export const WarmTemplateSchema = z
  .object({
    image: imageRef,
    size: z.number().int().min(0).max(64),
    // `sudo`: the shape of e2b's sandboxes (docs/e2b.md), which ask for it.
    security: z.enum(['standard', 'strict', 'sudo']).optional(),
    memory: z
      .number()
      .int()
      .refine((m) => m === 0 || m >= MIN_MEMORY_BYTES, 'must be 0 (no limit) or at least 6 MiB')
      .optional(),
    cpus: z
      .number()
      .refine((c) => c === 0 || (c >= MIN_CPUS && c <= 1024), `must be 0 (no limit) or between ${MIN_CPUS} and 1024`)
      .optional(),
    network: networkName.optional(),
  })
  .strict();

/** One pool's settings: the config file's `pools` entries, `addPool()` and `POST /v1/pools` alike. */
export const PoolConfigSchema = z
  .object({
    name: z.string().regex(NAME_PATTERN, 'must be 1-32 of [a-z0-9_-], starting with a letter or digit'),
    addr: z.string().min(1, "must not be empty; use 'local' for the local Docker Engine").default('local'),
    maxPerUser: z.number().int().min(0).default(DEFAULT_MAX_PER_USER),
    maxTotal: z.number().int().min(0).default(0),
    idleTimeoutMs: ms.default(30 * 60_000),
    idlePauseMs: ms.default(0),
    idleArchiveMs: ms.default(0),
    maxLifetimeMs: ms.default(0),
    stopTimeoutMs: ms.default(2000),
    security: z.enum(['standard', 'strict']).default('standard'),
    pauseMemory: z.enum(['hold', 'release']).default('hold'),
    ociRuntime: z
      .string()
      .regex(/^[a-zA-Z0-9_.-]+$/)
      .optional(),
    pidsLimit: z.number().int().min(0).max(MAX_PIDS).optional(),
    memory: z
      .number()
      .int()
      .refine((m) => m === 0 || m >= MIN_MEMORY_BYTES, 'must be 0 (no limit) or at least 6 MiB')
      .default(DEFAULT_BOX_MEMORY),
    cpus: z
      .number()
      .refine((c) => c === 0 || (c >= MIN_CPUS && c <= 1024), `must be 0 (no limit) or between ${MIN_CPUS} and 1024`)
      .default(DEFAULT_BOX_CPUS),
    maxMemory: z.number().int().min(MIN_MEMORY_BYTES).optional(),
    maxCpus: z.number().min(MIN_CPUS).max(1024).optional(),
    agent: z.boolean().default(true),
    agentImage: imageRef.optional(),
    agentDelivery: z.enum(AGENT_DELIVERY_CHOICES).optional(),
    readyTimeoutMs: ms.refine((v) => v > 0, 'must be more than 0').optional(),
    storageClass: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/, 'must be a StorageClass name (a DNS subdomain)')
      .optional(),
    networks: z.array(networkName).max(64).default([]),
    networkPolicy: NetworkPolicySchema.optional(),
    warm: z.array(WarmTemplateSchema).max(16).default([]),
  })
  .strict()
  // A template's network is the operator's too, and held to the same list as a create's.
  .superRefine((p, ctx) => {
    for (const [i, t] of p.warm.entries()) {
      if (t.network !== undefined && !networkAllowed(t.network, p.networks)) {
        ctx.addIssue({ code: 'custom', path: ['warm', i, 'network'], message: notListed(t.network, p.name) });
      }
    }
    // The pool's idle ladder in order (a box's own steps are checked at create).
    const ladder = (['idlePauseMs', 'idleArchiveMs', 'idleTimeoutMs'] as const).filter((k) => p[k] > 0);
    for (let i = 1; i < ladder.length; i++) {
      const [early, late] = [ladder[i - 1]!, ladder[i]!];
      if (p[early] >= p[late])
        ctx.addIssue({ code: 'custom', path: [early], message: `must be shorter than ${late} (the idle ladder goes pause, archive, idle timeout)` });
    }
  });

/** Whether a box of a pool listing `networks` may name `network`: `none`, or one of them. */
export function networkAllowed(network: string, networks: readonly string[]): boolean {
  return network === 'none' || networks.includes(network);
}

/** Why a network a box named is refused on a pool. */
export function notListed(network: string, pool: string): string {
  return `'${network}' is not a network boxes of pool '${pool}' may join; a box names 'none' or a network the operator lists for the pool (pool key networks), or names none to join sbx's isolated network`;
}

/** How the Manager meets its remote nodes (docs/nodes.md). */
export const NodesConfigSchema = z
  .object({
    listen: z
      .string()
      .regex(/^(\[[0-9a-fA-F:]+\]|[^:\s]+):\d{1,5}$/, 'must be host:port')
      .optional(),
    pingIntervalMs: ms.refine((v) => v >= 100, 'must be at least 100 ms').optional(),
    offlineAfterMs: ms.refine((v) => v >= 500, 'must be at least 500 ms').optional(),
  })
  .strict();

/** A DNS name (at least two labels) under which `<port>-<id>.<domain>` hosts a box's port. */
export const PROXY_DOMAIN = /^(?=.{1,200}$)([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$/;

const configSchema = z
  .object({
    name: z.string().regex(NAME_PATTERN, 'must be 1-32 of [a-z0-9_-]').default('sbx'),
    pools: z.array(PoolConfigSchema).min(1, 'at least one pool is required').optional(),
    cleanupIntervalMs: ms.default(60_000),
    dataDir: z.string().min(1).optional(),
    apiUrl: z.string().url().optional(),
    tokenSecret: z.string().min(16, 'must be at least 16 characters').optional(),
    tokenTtlMs: ms.default(24 * 3_600_000),
    heartbeatIntervalMs: ms.refine((v) => v >= 10, 'must be at least 10 ms').optional(),
    maxWorkspacesPerOwner: z.number().int().min(0).default(DEFAULT_MAX_WORKSPACES_PER_OWNER),
    maxSnapshotsPerOwner: z.number().int().min(0).default(DEFAULT_MAX_SNAPSHOTS_PER_OWNER),
    publicUrl: z
      .string()
      .url()
      .refine((u) => /^https?:\/\//.test(u) && !/[?#]/.test(u), 'must be an http(s) URL without query or fragment')
      .optional(),
    proxyDomain: z
      .string()
      .regex(PROXY_DOMAIN, 'must be a DNS name like sbx.example.com')
      .transform((d) => d.toLowerCase())
      .optional(),
    nodes: NodesConfigSchema.optional(),
  })
  .strict();

/** One pool, as passed to `new Manager()` or `addPool()`; `pools()` returns the same fields. */
export interface PoolConfig {
  name: string;
  /** Runtime address: `local`, `unix:///…`, `tcp://…`, `ssh://…` (Docker) or `k8s://?kubeconfig=…&context=…&namespace=…` (Kubernetes). Default `local`. */
  addr?: string;
  /** A ready Runtime to use instead of opening `addr` (embedding, tests). */
  runtime?: Runtime;
  runtimeOptions?: RuntimeOptions;
  /** Boxes per owner on this pool; 0 = unlimited. Default 100: one runaway client cannot fill the machine. */
  maxPerUser?: number;
  /** Boxes on this pool; 0 = unlimited. */
  maxTotal?: number;
  /** 0 = never idle. Default 30 minutes. */
  idleTimeoutMs?: number;
  /** Idle time after which a box is paused (the idle ladder's first step); 0 = never (default). */
  idlePauseMs?: number;
  /** Idle time after which a box is archived (the idle ladder's second step); 0 = never (default). */
  idleArchiveMs?: number;
  /** 0 = no limit. */
  maxLifetimeMs?: number;
  /** SIGTERM grace before SIGKILL. Default 2 s. */
  stopTimeoutMs?: number;
  security?: 'standard' | 'strict';
  /**
   * What the pauses the Manager takes by itself (the idle ladder's `idlePauseMs`, `maxLifetimeAction:
   * 'pause'`) do with a box's memory: `hold` (default: the freezer) or `release` (checkpointed to
   * disk, gVisor pools; a box that cannot be is frozen instead). A caller's `pause()` says its own.
   */
  pauseMemory?: 'hold' | 'release';
  /** OCI runtime for this pool's boxes, e.g. `runsc` (gVisor). */
  ociRuntime?: string;
  /** Default pids limit of a box (512). */
  pidsLimit?: number;
  /** Memory of a box that does not ask, in bytes (files also take `512m`, `2g`); 0 = no limit. Default 1 GiB. */
  memory?: number;
  /** CPU cores of a box that does not ask; 0 = no limit. Default 1. */
  cpus?: number;
  /** Most memory a box may ask for. Default: the engine machine's memory. */
  maxMemory?: number;
  /** Most cores a box may ask for. Default: the engine machine's cores. */
  maxCpus?: number;
  /**
   * Put the in-box agent into this pool's new boxes (default true; docs/agent.md): fast exec and
   * kills that always work. false: every exec goes through the engine, as without it.
   */
  agent?: boolean;
  /**
   * Kubernetes: the image holding the agent binary (`sbx-agent:latest`, built by scripts/images.sh),
   * which an init container copies into each pod (docs/kubernetes.md). Without it a Kubernetes
   * pool's boxes have no agent, whatever `agent` says. Docker pools mount the binary instead.
   */
  agentImage?: string;
  /**
   * Kubernetes: how the agent binary gets into a pod: `auto` (default; a probe pod at the first agent
   * box picks an image volume where the cluster can mount one), `image-volume`, or `init-container`
   * (clusters whose nodes differ, some without image volumes). docs/kubernetes.md.
   */
  agentDelivery?: AgentDeliveryChoice;
  /** Kubernetes: how long a create waits for the pod to be ready (scheduled, pulled, running). Default 120 s. */
  readyTimeoutMs?: number;
  /** Kubernetes: the StorageClass of workspace volumes (PVCs); default the cluster's default class. */
  storageClass?: string;
  /**
   * Docker networks a box of this pool may name (`CreateOptions.network`, warm templates) besides
   * `none`; default none. A box that names no network joins sbx's isolated one (docs/network.md).
   */
  networks?: string[];
  /**
   * The egress policy of a box whose create gives none (docs/network.md); default `{ egress: 'all' }`.
   * Warm spares are made with it. Anything but `'all'` needs a runtime that enforces egress.
   */
  networkPolicy?: NetworkPolicy;
  /** Warm pools (docs/warm-pools.md): started spares kept ready per template; a matching create claims one. */
  warm?: WarmTemplate[];
}

/** One warm-pool template of a pool. Absent shape fields mean the pool's defaults. */
export interface WarmTemplate {
  image: string;
  /** Spares kept started and unclaimed (0..64). */
  size: number;
  security?: SecurityProfile;
  memory?: number;
  cpus?: number;
  network?: string;
}

/** The Manager's configuration. A YAML file has the same keys, durations written `idleTimeout: 30m`. */
export interface ManagerConfig {
  /** Instance name, stamped on every box (label sbx.manager): Managers of other names leave them alone. */
  name?: string;
  pools?: PoolConfig[];
  /**
   * How often the cleanup pass runs, the safety net (default 60 s): it reconciles each pool with its
   * engine and acts on anything due a deadline timer missed. Deadlines themselves (max lifetime,
   * idle timeout, the idle ladder) are acted on at the deadline, whatever this is (docs/lifecycle.md,
   * Deadlines). 0 = no automatic cleanup at all, neither the pass nor the timers: only cleanup().
   */
  cleanupIntervalMs?: number;
  /** Where the token secret and workspaces live. Default `$SBX_DATA_DIR` or `~/.sbx`. */
  dataDir?: string;
  /** URL boxes use to call back (heartbeat); handed to them as SBX_API_URL. */
  apiUrl?: string;
  /** HMAC secret for box tokens; default generated once and kept in the data dir. */
  tokenSecret?: string;
  /**
   * Base URL of the sbx server in front of this Manager: box.proxy() URLs start with it. Unset, they
   * start with the URL of the sbx serve registered last on this Manager (Manager.registerServer);
   * each server's own routes always issue URLs under its own address.
   */
  publicUrl?: string;
  /** With publicUrl: box.proxy() answers host-based URLs `<port>-<id>.<proxyDomain>`. */
  proxyDomain?: string;
  /** Box token lifetime. Default 24 h. */
  tokenTtlMs?: number;
  /** How often a box's agent heartbeats while work runs in it (SBX_HEARTBEAT_INTERVAL_MS). Default the agent's, 30 s. */
  heartbeatIntervalMs?: number;
  /** Workspaces one owner may hold (`limit_exceeded` beyond); 0 = unlimited. Default 100. */
  maxWorkspacesPerOwner?: number;
  /** Snapshots one owner may hold (`limit_exceeded` beyond); 0 = unlimited. Default 50. */
  maxSnapshotsPerOwner?: number;
  /** Remote nodes (`sbx node`): where reverse nodes dial in, how often each is PINGed, when it counts as offline. */
  nodes?: NodesConfig;
  logger?: Logger;
  /** The Manager's clock (epoch ms); tests inject one. Default `Date.now`. */
  clock?: () => number;
}

export interface ResolvedPool {
  name: string;
  addr: string;
  runtime: Runtime | undefined;
  runtimeOptions: RuntimeOptions;
  maxPerUser: number;
  maxTotal: number;
  idleTimeoutMs: number;
  idlePauseMs: number;
  idleArchiveMs: number;
  maxLifetimeMs: number;
  stopTimeoutMs: number;
  security: 'standard' | 'strict';
  pauseMemory: 'hold' | 'release';
  ociRuntime: string | undefined;
  pidsLimit: number | undefined;
  memory: number;
  cpus: number;
  maxMemory: number | undefined;
  maxCpus: number | undefined;
  agent: boolean;
  agentImage: string | undefined;
  agentDelivery: AgentDeliveryChoice | undefined;
  readyTimeoutMs: number | undefined;
  storageClass: string | undefined;
  networks: string[];
  networkPolicy: NetworkPolicy;
  warm: WarmTemplate[];
}

export interface NodesConfig {
  /** `host:port` of the TLS listener that reverse nodes dial (absent: only direct nodes). */
  listen?: string;
  /** How often a node's connection is PINGed. Default 2 s. */
  pingIntervalMs?: number;
  /** A node that answers nothing for this long is offline. Default 6 s. */
  offlineAfterMs?: number;
}

export interface ResolvedConfig {
  name: string;
  pools: ResolvedPool[];
  cleanupIntervalMs: number;
  dataDir: string;
  apiUrl: string | undefined;
  tokenSecret: string | undefined;
  tokenTtlMs: number;
  heartbeatIntervalMs: number | undefined;
  maxWorkspacesPerOwner: number;
  maxSnapshotsPerOwner: number;
  publicUrl: string | undefined;
  proxyDomain: string | undefined;
  nodes: NodesConfig;
}

/** With no config at all: one pool `local` on the local Docker Engine. */
export const EMBEDDED_DEFAULT_POOL: PoolConfig = { name: 'local', addr: 'local' };

export function resolvePool(p: PoolConfig, field?: string): ResolvedPool {
  const { runtime, runtimeOptions, ...plain } = p;
  const v = parseOrThrow(PoolConfigSchema, plain, 'pool', field);
  return {
    name: v.name,
    addr: runtime ? (p.addr ?? runtime.address) : v.addr,
    runtime,
    runtimeOptions: runtimeOptions ?? {},
    maxPerUser: v.maxPerUser,
    maxTotal: v.maxTotal,
    idleTimeoutMs: v.idleTimeoutMs,
    idlePauseMs: v.idlePauseMs,
    idleArchiveMs: v.idleArchiveMs,
    maxLifetimeMs: v.maxLifetimeMs,
    stopTimeoutMs: v.stopTimeoutMs,
    security: v.security,
    pauseMemory: v.pauseMemory,
    ociRuntime: v.ociRuntime,
    pidsLimit: v.pidsLimit,
    memory: v.memory,
    cpus: v.cpus,
    maxMemory: v.maxMemory,
    maxCpus: v.maxCpus,
    agent: v.agent,
    agentImage: v.agentImage,
    agentDelivery: v.agentDelivery,
    readyTimeoutMs: v.readyTimeoutMs,
    storageClass: v.storageClass,
    networks: [...v.networks],
    networkPolicy: normalizeNetworkPolicy(v.networkPolicy ?? DEFAULT_NETWORK_POLICY, field ? `${field}.networkPolicy` : 'networkPolicy'),
    warm: v.warm.map((t) => ({ ...t })),
  };
}

export function resolveConfig(config: ManagerConfig = {}, env: NodeJS.ProcessEnv = process.env): ResolvedConfig {
  const { logger: _logger, clock: _clock, pools, ...plain } = config;
  const v = parseOrThrow(configSchema, plain, 'config');
  const resolvedPools = (pools && pools.length > 0 ? pools : [EMBEDDED_DEFAULT_POOL]).map((p, i) => resolvePool(p, `pools.${i}`));
  const names = new Set<string>();
  for (const [i, p] of resolvedPools.entries()) {
    if (names.has(p.name))
      throw new SbxError('invalid_argument', `pools.${i}.name: duplicate pool name '${p.name}'`, { details: { field: `pools.${i}.name` } });
    names.add(p.name);
  }
  const dataDir = v.dataDir ?? env['SBX_DATA_DIR'] ?? join(homedir(), '.sbx');
  return {
    name: v.name,
    pools: resolvedPools,
    cleanupIntervalMs: v.cleanupIntervalMs,
    dataDir,
    apiUrl: v.apiUrl,
    tokenSecret: v.tokenSecret,
    tokenTtlMs: v.tokenTtlMs,
    heartbeatIntervalMs: v.heartbeatIntervalMs,
    maxWorkspacesPerOwner: v.maxWorkspacesPerOwner,
    maxSnapshotsPerOwner: v.maxSnapshotsPerOwner,
    publicUrl: v.publicUrl,
    proxyDomain: v.proxyDomain,
    nodes: v.nodes ?? {},
  };
}

/** Config-file keys written as human durations (`30m`, or a number of ms) -> the TS object's `…Ms` key. */
const FILE_DURATIONS: Record<string, string> = { cleanupInterval: 'cleanupIntervalMs', tokenTtl: 'tokenTtlMs', heartbeatInterval: 'heartbeatIntervalMs' };
const FILE_NODES_DURATIONS: Record<string, string> = { pingInterval: 'pingIntervalMs', offlineAfter: 'offlineAfterMs' };
const FILE_POOL_DURATIONS: Record<string, string> = {
  idleTimeout: 'idleTimeoutMs',
  idlePause: 'idlePauseMs',
  idleArchive: 'idleArchiveMs',
  maxLifetime: 'maxLifetimeMs',
  stopTimeout: 'stopTimeoutMs',
  readyTimeout: 'readyTimeoutMs',
};

const ENV_KEYS: Record<string, string> = {
  SBX_NAME: 'name',
  SBX_DATA_DIR: 'dataDir',
  SBX_API_URL: 'apiUrl',
  SBX_CLEANUP_INTERVAL: 'cleanupInterval',
  SBX_TOKEN_SECRET: 'tokenSecret',
  SBX_TOKEN_TTL: 'tokenTtl',
};

const POOL_ENV_KEYS: Record<string, string> = {
  ADDR: 'addr',
  MAX_PER_USER: 'maxPerUser',
  MAX_TOTAL: 'maxTotal',
  IDLE_TIMEOUT: 'idleTimeout',
  IDLE_PAUSE: 'idlePause',
  IDLE_ARCHIVE: 'idleArchive',
  MAX_LIFETIME: 'maxLifetime',
  STOP_TIMEOUT: 'stopTimeout',
  SECURITY: 'security',
  OCI_RUNTIME: 'ociRuntime',
  PAUSE_MEMORY: 'pauseMemory',
  PIDS_LIMIT: 'pidsLimit',
  MEMORY: 'memory',
  CPUS: 'cpus',
  MAX_MEMORY: 'maxMemory',
  MAX_CPUS: 'maxCpus',
  AGENT: 'agent',
  AGENT_IMAGE: 'agentImage',
  AGENT_DELIVERY: 'agentDelivery',
  READY_TIMEOUT: 'readyTimeout',
  STORAGE_CLASS: 'storageClass',
  NETWORKS: 'networks',
};

/** SBX_POOL_<NAME>_<KEY> for every key above (a hand-kept list here once missed IDLE_PAUSE and IDLE_ARCHIVE). */
const POOL_ENV_PATTERN = new RegExp(`^SBX_POOL_(.+?)_(${Object.keys(POOL_ENV_KEYS).join('|')})$`);

const NUMERIC_POOL_KEYS = new Set(['maxPerUser', 'maxTotal', 'pidsLimit', 'cpus', 'maxCpus']);
const BYTE_POOL_KEYS = ['memory', 'maxMemory'];

function envBoolean(key: string, value: string): boolean {
  if (/^(1|true|yes|on)$/i.test(value)) return true;
  if (/^(0|false|no|off)$/i.test(value)) return false;
  throw new SbxError('invalid_argument', `${key}: must be true or false, got '${value}'`, { details: { field: key } });
}

/**
 * A YAML config file, read and parsed; `locate(path)` names the file and the line of a key, for
 * messages. Unreadable or malformed files are invalid_argument naming the file and line.
 *
 * @example
 * const { value, locate } = readConfigFile('/etc/sbx.yaml'); // locate(['pools', 0, 'name']) -> ' (/etc/sbx.yaml:3)'
 */
export function readConfigFile(file: string): { value: unknown; locate: (path: (string | number)[]) => string } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (cause) {
    throw new SbxError('invalid_argument', `config: cannot read ${file}: ${(cause as Error).message}`, { cause, details: { field: 'config' } });
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines });
  if (doc.errors.length > 0) {
    const e = doc.errors[0]!;
    throw new SbxError('invalid_argument', `config: ${file}:${e.linePos?.[0]?.line ?? '?'}: ${e.message.split('\n')[0]}`, { details: { field: 'config' } });
  }
  return {
    value: doc.toJS(),
    locate: (path) => {
      const node = doc.getIn(path, true) as { range?: [number, number, number] } | undefined;
      return node?.range ? ` (${file}:${lines.linePos(node.range[0]).line})` : ` (${file})`;
    },
  };
}

/**
 * Loads a config: the YAML file at `file` (or `$SBX_CONFIG`), then `SBX_*` overrides
 * (`SBX_DATA_DIR`, `SBX_CLEANUP_INTERVAL`, …, and per pool `SBX_POOL_<NAME>_<KEY>`, e.g.
 * `SBX_POOL_LOCAL_MAX_TOTAL=5`), validated once; errors name the key and the file line.
 * Files and variables write durations as `idleTimeout: 30m`; the result has `idleTimeoutMs`.
 * `new Manager()` with no argument is `new Manager(loadConfig())`.
 *
 * @example
 * const manager = new Manager(loadConfig({ file: '/etc/sbx/config.yaml' }));
 */
export function loadConfig(opts: { file?: string; env?: NodeJS.ProcessEnv } = {}): ManagerConfig {
  const env = opts.env ?? process.env;
  const file = opts.file ?? env['SBX_CONFIG'];
  let config: Record<string, unknown> = {};
  let locate: (path: (string | number)[]) => string = () => '';
  if (file) {
    const read = readConfigFile(file);
    const value: unknown = read.value ?? {};
    if (typeof value !== 'object' || Array.isArray(value))
      throw new SbxError('invalid_argument', `config: ${file}: must be a mapping`, { details: { field: 'config' } });
    config = value as Record<string, unknown>;
    // `server:` is sbx serve's section (src/server/config-file.ts reads it); the Manager's config is the rest.
    delete config['server'];
    locate = read.locate;
  }
  for (const [envKey, key] of Object.entries(ENV_KEYS)) if (env[envKey] !== undefined) config[key] = env[envKey];
  // Without a file's pools, the embedded default pool: made once, so that every SBX_POOL_LOCAL_* variable lands on it.
  let pools = Array.isArray(config['pools']) ? (config['pools'] as Record<string, unknown>[]) : undefined;
  for (const [envKey, value] of Object.entries(env)) {
    const m = POOL_ENV_PATTERN.exec(envKey);
    if (!m || value === undefined) continue;
    const wanted = m[1]!.toLowerCase().replace(/_/g, '-');
    const list = (pools ??= [{ ...EMBEDDED_DEFAULT_POOL }]);
    const pool = list.find((p) => String(p['name']).replace(/_/g, '-') === wanted);
    if (!pool) throw new SbxError('invalid_argument', `${envKey}: no pool named '${wanted}'`, { details: { field: envKey } });
    const key = POOL_ENV_KEYS[m[2]!]!;
    pool[key] = NUMERIC_POOL_KEYS.has(key)
      ? Number(value)
      : key === 'agent'
        ? envBoolean(envKey, value)
        : key === 'networks'
          ? value
              .split(',')
              .map((n) => n.trim())
              .filter(Boolean)
          : value;
    config['pools'] = list;
  }
  const located = (e: SbxError, path: (string | number)[]) =>
    new SbxError('invalid_argument', `config: ${e.message}${locate(path)}`, { cause: e, details: e.details });
  let result: Record<string, unknown>;
  try {
    result = fromFileDurations(config, FILE_DURATIONS, '');
    const nodes = result['nodes'];
    if (nodes !== null && typeof nodes === 'object' && !Array.isArray(nodes))
      result['nodes'] = fromFileDurations(nodes as Record<string, unknown>, FILE_NODES_DURATIONS, 'nodes.');
    if (Array.isArray(result['pools']))
      result['pools'] = (result['pools'] as unknown[]).map((p, i) =>
        p !== null && typeof p === 'object' && !Array.isArray(p) ? fromFileDurations(p as Record<string, unknown>, FILE_POOL_DURATIONS, `pools.${i}.`) : p,
      );
    resolveConfig(result as ManagerConfig, env);
  } catch (e) {
    if (e instanceof SbxError && typeof e.details?.['field'] === 'string') {
      // Name the key as the file wrote it: `idleTimeout`, not the `idleTimeoutMs` it became.
      const fileKey = new RegExp(
        `(${[...Object.keys(FILE_DURATIONS), ...Object.keys(FILE_POOL_DURATIONS), ...Object.keys(FILE_NODES_DURATIONS)].join('|')})Ms$`,
      );
      const field = e.details['field'].replace(fileKey, '$1');
      throw located(new SbxError('invalid_argument', e.message.replace(e.details['field'], field), { details: { field } }), toPath(field));
    }
    throw e;
  }
  return result as ManagerConfig;
}

const BYTE_UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gib: 1024 ** 3,
  t: 1024 ** 4,
  tib: 1024 ** 4,
};

/** `512m`, `2g`, `1.5GiB` or a plain number of bytes (binary units, as the engine counts). */
export function parseBytes(text: string, field: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  const unit = BYTE_UNITS[(m?.[2] ?? '').toLowerCase()];
  if (!m || unit === undefined) throw invalidArgument(field, `'${text}' is not a size (use bytes or e.g. 512m, 2g)`);
  return Math.round(Number(m[1]) * unit);
}

function toPath(field: string): (string | number)[] {
  return field.split('.').map((p) => (/^\d+$/.test(p) ? Number(p) : p));
}

/** Turns `{ idleTimeout: '30m' }` into `{ idleTimeoutMs: 1800000 }`; an `…Ms` key in a file is refused. */
function fromFileDurations(obj: Record<string, unknown>, keys: Record<string, string>, prefix: string): Record<string, unknown> {
  const out: Record<string, unknown> = { ...obj };
  for (const key of prefix.startsWith('pools.') ? BYTE_POOL_KEYS : []) {
    if (typeof out[key] === 'string') out[key] = parseBytes(out[key] as string, `${prefix}${key}`);
  }
  if (prefix.startsWith('pools.') && Array.isArray(out['warm'])) {
    out['warm'] = (out['warm'] as unknown[]).map((t, i) =>
      t !== null && typeof t === 'object' && typeof (t as Record<string, unknown>)['memory'] === 'string'
        ? { ...t, memory: parseBytes((t as Record<string, string>)['memory']!, `${prefix}warm.${i}.memory`) }
        : t,
    );
  }
  for (const [fileKey, msKey] of Object.entries(keys)) {
    if (msKey in out) throw invalidArgument(`${prefix}${msKey}`, `config files write durations with a unit, as '${fileKey}: 30m'`);
    if (!(fileKey in out)) continue;
    const value = out[fileKey];
    delete out[fileKey];
    if (typeof value !== 'number' && typeof value !== 'string') throw invalidArgument(`${prefix}${fileKey}`, 'must be a duration like 30s, 30m or 2h');
    try {
      // A YAML number is a duration without a unit, refused as in flags (only 0 needs none).
      out[msKey] = parseDuration(String(value));
    } catch (e) {
      throw invalidArgument(`${prefix}${fileKey}`, (e as Error).message.replace(/^duration: /, ''));
    }
  }
  return out;
}
