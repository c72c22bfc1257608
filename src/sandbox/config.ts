import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { LineCounter, parseDocument } from 'yaml';
import { z } from 'zod';
import { SbxError } from '../errors.js';
import type { Runtime } from '../runtime/types.js';
import type { RuntimeOptions } from '../runtime/index.js';
import { durationSchema } from '../util/duration.js';
import { parseOrThrow } from '../util/validation.js';

export const NAME_PATTERN = /^[a-z0-9][a-z0-9_-]{0,31}$/;

const poolSchema = z
  .object({
    name: z.string().regex(NAME_PATTERN, 'must be 1-32 of [a-z0-9_-], starting with a letter or digit'),
    addr: z.string().default('local'),
    maxPerUser: z.number().int().min(0).default(0),
    maxTotal: z.number().int().min(0).default(0),
    idleTimeout: durationSchema.default(30 * 60_000),
    maxLifetime: durationSchema.default(0),
    stopTimeout: durationSchema.default(2000),
    security: z.enum(['standard', 'strict']).default('standard'),
    ociRuntime: z
      .string()
      .regex(/^[a-zA-Z0-9_.-]+$/)
      .optional(),
    pidsLimit: z.number().int().min(0).optional(),
  })
  .strict();

const configSchema = z
  .object({
    name: z.string().regex(NAME_PATTERN, 'must be 1-32 of [a-z0-9_-]').default('sbx'),
    pools: z.array(poolSchema).min(1, 'at least one pool is required').optional(),
    cleanupInterval: durationSchema.default(60_000),
    dataDir: z.string().min(1).optional(),
    apiUrl: z.string().url().optional(),
    tokenSecret: z.string().min(16, 'must be at least 16 characters').optional(),
    tokenTtl: durationSchema.default(24 * 3_600_000),
  })
  .strict();

/** One pool as written in a config file or passed to `new Manager()`. */
export interface PoolConfig {
  name: string;
  /** Runtime address: `local`, `unix:///…`, `tcp://…`, `ssh://…`. Default `local`. */
  addr?: string;
  /** A ready Runtime to use instead of opening `addr` (embedding, tests). */
  runtime?: Runtime;
  runtimeOptions?: RuntimeOptions;
  /** Boxes per owner on this pool; 0 = unlimited. */
  maxPerUser?: number;
  /** Boxes on this pool; 0 = unlimited. */
  maxTotal?: number;
  /** Milliseconds or a string like `30m`; 0 = never idle. Default 30m. */
  idleTimeout?: number | string;
  /** Milliseconds or `2h`; 0 = no limit. */
  maxLifetime?: number | string;
  /** SIGTERM grace before SIGKILL. Default 2s. */
  stopTimeout?: number | string;
  security?: 'standard' | 'strict';
  /** OCI runtime for this pool's boxes, e.g. `runsc` (gVisor). */
  ociRuntime?: string;
  /** Default pids limit of a box (512). */
  pidsLimit?: number;
}

/** The Manager's configuration; the YAML file has the same keys. */
export interface ManagerConfig {
  /** Instance name, stamped on every box (label sbx.manager): Managers of other names leave them alone. */
  name?: string;
  pools?: PoolConfig[];
  /** Default 60s. */
  cleanupInterval?: number | string;
  /** Where the token secret and workspaces live. Default `$SBX_DATA_DIR` or `~/.sbx`. */
  dataDir?: string;
  /** URL boxes use to call back (heartbeat); handed to them as SBX_API_URL. */
  apiUrl?: string;
  /** HMAC secret for box tokens; default generated once and kept in the data dir. */
  tokenSecret?: string;
  /** Box token lifetime. Default 24h. */
  tokenTtl?: number | string;
  logger?: Logger;
}

export interface ResolvedPool {
  name: string;
  addr: string;
  runtime: Runtime | undefined;
  runtimeOptions: RuntimeOptions;
  maxPerUser: number;
  maxTotal: number;
  idleTimeoutMs: number;
  maxLifetimeMs: number;
  stopTimeoutMs: number;
  security: 'standard' | 'strict';
  ociRuntime: string | undefined;
  pidsLimit: number | undefined;
}

export interface ResolvedConfig {
  name: string;
  pools: ResolvedPool[];
  cleanupIntervalMs: number;
  dataDir: string;
  apiUrl: string | undefined;
  tokenSecret: string | undefined;
  tokenTtlMs: number;
}

/** With no config at all: one pool `local` on the local Docker Engine. */
export const EMBEDDED_DEFAULT_POOL: PoolConfig = { name: 'local', addr: 'local' };

export function resolvePool(p: PoolConfig, field?: string): ResolvedPool {
  const { runtime, runtimeOptions, ...plain } = p;
  const v = parseOrThrow(poolSchema, plain, 'pool', field);
  return {
    name: v.name,
    addr: runtime ? (p.addr ?? runtime.address) : v.addr,
    runtime,
    runtimeOptions: runtimeOptions ?? {},
    maxPerUser: v.maxPerUser,
    maxTotal: v.maxTotal,
    idleTimeoutMs: v.idleTimeout,
    maxLifetimeMs: v.maxLifetime,
    stopTimeoutMs: v.stopTimeout,
    security: v.security,
    ociRuntime: v.ociRuntime,
    pidsLimit: v.pidsLimit,
  };
}

export function resolveConfig(config: ManagerConfig = {}, env: NodeJS.ProcessEnv = process.env): ResolvedConfig {
  const { logger: _logger, pools, ...plain } = config;
  const v = parseOrThrow(configSchema, plain, 'config');
  const resolvedPools = (pools && pools.length > 0 ? pools : [EMBEDDED_DEFAULT_POOL]).map((p, i) => resolvePool(p, `pools.${i}`));
  const names = new Set<string>();
  for (const [i, p] of resolvedPools.entries()) {
    if (names.has(p.name))
      throw new SbxError('invalid_argument', `pools.${i}.name: duplicate pool name '${p.name}'`, { details: { field: `pools.${i}.name` } });
    names.add(p.name);
  }
  return {
    name: v.name,
    pools: resolvedPools,
    cleanupIntervalMs: v.cleanupInterval,
    dataDir: v.dataDir ?? env['SBX_DATA_DIR'] ?? join(homedir(), '.sbx'),
    apiUrl: v.apiUrl,
    tokenSecret: v.tokenSecret,
    tokenTtlMs: v.tokenTtl,
  };
}

const ENV_KEYS: Record<string, keyof ManagerConfig> = {
  SBX_NAME: 'name',
  SBX_DATA_DIR: 'dataDir',
  SBX_API_URL: 'apiUrl',
  SBX_CLEANUP_INTERVAL: 'cleanupInterval',
  SBX_TOKEN_SECRET: 'tokenSecret',
  SBX_TOKEN_TTL: 'tokenTtl',
};

const POOL_ENV_KEYS: Record<string, keyof PoolConfig> = {
  ADDR: 'addr',
  MAX_PER_USER: 'maxPerUser',
  MAX_TOTAL: 'maxTotal',
  IDLE_TIMEOUT: 'idleTimeout',
  MAX_LIFETIME: 'maxLifetime',
  STOP_TIMEOUT: 'stopTimeout',
  SECURITY: 'security',
  OCI_RUNTIME: 'ociRuntime',
  PIDS_LIMIT: 'pidsLimit',
};

const NUMERIC_POOL_KEYS = new Set<keyof PoolConfig>(['maxPerUser', 'maxTotal', 'pidsLimit']);

/**
 * Loads a config: the YAML file at `file` (or `$SBX_CONFIG`), then `SBX_*` overrides
 * (`SBX_DATA_DIR`, `SBX_CLEANUP_INTERVAL`, …, and per pool `SBX_POOL_<NAME>_<KEY>`, e.g.
 * `SBX_POOL_LOCAL_MAX_TOTAL=5`), validated once; errors name the key and the file line.
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
    const value: unknown = doc.toJS() ?? {};
    if (typeof value !== 'object' || Array.isArray(value))
      throw new SbxError('invalid_argument', `config: ${file}: must be a mapping`, { details: { field: 'config' } });
    config = value as Record<string, unknown>;
    locate = (path) => {
      const node = doc.getIn(path, true) as { range?: [number, number, number] } | undefined;
      return node?.range ? ` (${file}:${lines.linePos(node.range[0]).line})` : ` (${file})`;
    };
  }
  for (const [envKey, key] of Object.entries(ENV_KEYS)) if (env[envKey] !== undefined) config[key] = env[envKey];
  const pools = Array.isArray(config['pools']) ? (config['pools'] as Record<string, unknown>[]) : undefined;
  for (const [envKey, value] of Object.entries(env)) {
    const m = /^SBX_POOL_(.+?)_(ADDR|MAX_PER_USER|MAX_TOTAL|IDLE_TIMEOUT|MAX_LIFETIME|STOP_TIMEOUT|SECURITY|OCI_RUNTIME|PIDS_LIMIT)$/.exec(envKey);
    if (!m || value === undefined) continue;
    const wanted = m[1]!.toLowerCase().replace(/_/g, '-');
    const list = pools ?? [{ ...EMBEDDED_DEFAULT_POOL }];
    const pool = list.find((p) => String(p['name']).replace(/_/g, '-') === wanted);
    if (!pool) throw new SbxError('invalid_argument', `${envKey}: no pool named '${wanted}'`, { details: { field: envKey } });
    const key = POOL_ENV_KEYS[m[2]!]!;
    pool[key] = NUMERIC_POOL_KEYS.has(key) ? Number(value) : value;
    config['pools'] = list;
  }
  try {
    resolveConfig(config as ManagerConfig, env);
  } catch (e) {
    if (e instanceof SbxError && typeof e.details?.['field'] === 'string') {
      const path = e.details['field'].split('.').map((p) => (/^\d+$/.test(p) ? Number(p) : p));
      throw new SbxError('invalid_argument', `config: ${e.message}${locate(path)}`, { cause: e, details: e.details });
    }
    throw e;
  }
  return config as ManagerConfig;
}
