/**
 * Wire schemas of the HTTP API. Box and exec options are the library's own zod schemas; only
 * what exists on the wire alone (ids in paths, base64 stdin, query flags) is defined here.
 */
import { z } from 'zod';
import { ERROR_CODES, invalidArgument } from '../errors.js';
import { MAX_DURATION_MS, commandLine, portNumber } from '../runtime/bounds.js';
import { ExecOptionsSchema, ExecStreamOptionsSchema } from '../runtime/spec.js';
import type { ExecResult } from '../runtime/types.js';
import { AGENT_DELIVERY_CHOICES } from '../runtime/types.js';
import { BOX_STATUSES } from '../sandbox/types.js';
import type { BoxInfo, PauseOptions, PoolInfo, SnapshotInfo } from '../sandbox/index.js';
import type { DirEntry, FileStat, ImportResult, Workspace, WorkspaceUsage } from '../workspace/index.js';
import type { ErrorBody } from './errors.js';
import type { ApiKeyInfo, CreatedKey } from './keys.js';
import { PROXY_TTL_MAX_MS } from '../sandbox/box.js';
import { BOX_ID_PATTERN, OWNER_PATTERN } from '../sandbox/create-options.js';
import { NetworkPolicySchema } from '../sandbox/egress-policy.js';
import { WORKSPACE_ID_PATTERN } from './context.js';

export const boxIdParam = z.object({ id: z.string().regex(BOX_ID_PATTERN, 'is not a valid box id') }).strict();
export const workspaceIdParam = z.object({ id: z.string().regex(WORKSPACE_ID_PATTERN, 'is not a valid workspace id') }).strict();
export const workspacePathParams = z.object({ id: z.string().regex(WORKSPACE_ID_PATTERN, 'is not a valid workspace id'), '*': z.string().max(4096) }).strict();

/** Query flags: `?force`, `?force=true`, `?force=1`. */
export const flag = z.enum(['', 'true', 'false', '1', '0'], { error: "must be 'true' or 'false'" }).transform((v) => v === '' || v === 'true' || v === '1');

export const base64 = z
  .string()
  .max(64 * 1024 * 1024)
  .refine((s) => s.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(s), 'must be standard base64 (A-Z a-z 0-9 + /, padded with =)');

const stdin = z.union([z.string(), z.object({ base64 }).strict()], { error: 'must be a string or {"base64": "..."}' });

/** POST /v1/boxes/:id/exec — ExecOptions (minus what cannot cross the wire) plus the command. */
export const ExecBodySchema = ExecOptionsSchema.pick({ workDir: true, env: true, user: true, timeoutMs: true, maxOutputBytes: true })
  .extend({ cmd: commandLine, stdin: stdin.optional() })
  .strict();
export type ExecBody = z.infer<typeof ExecBodySchema>;

/** The WebSocket exec's start message (query or first control frame `{"exec":{...}}`). */
export const WsExecSchema = ExecStreamOptionsSchema.pick({ workDir: true, env: true, user: true, timeoutMs: true, tty: true, size: true })
  .extend({ cmd: commandLine })
  .strict();
export type WsExec = z.infer<typeof WsExecSchema>;

const repeated = z.union([z.string(), z.array(z.string())]).transform((v) => (Array.isArray(v) ? v : [v]));

export const ListBoxesQuery = z
  .object({
    owner: z.string().regex(OWNER_PATTERN, 'is not a valid owner').optional(),
    pool: z.string().min(1).max(32).optional(),
    /** `label=key=value`, repeatable; every one must match. */
    label: repeated.optional(),
  })
  .strict();

export const HeartbeatBodySchema = z
  .object({
    active: z.boolean({ error: 'must be true or false' }),
    processCount: z.number().int().min(0).max(1_000_000).optional(),
  })
  .strict();

export function decodeStdin(s: ExecBody['stdin']): string | Uint8Array | undefined {
  if (s === undefined || typeof s === 'string') return s;
  return Buffer.from(s.base64, 'base64');
}

/** `k=v` strings → a record; a string without `=` is invalid. */
export function parseLabelFilters(list: string[] | undefined): Record<string, string> | undefined {
  if (!list) return undefined;
  const out: Record<string, string> = {};
  for (const item of list) {
    const i = item.indexOf('=');
    if (i <= 0) throw invalidArgument('label', `must be key=value, got ${JSON.stringify(item)}`);
    out[item.slice(0, i)] = item.slice(i + 1);
  }
  return out;
}

/** A port access token's lifetime, as the library bounds it (PROXY_TTL_MAX_MS). */
const TokenTtlMsSchema = z.number().int().min(1_000).max(PROXY_TTL_MAX_MS).optional();

/** POST /v1/boxes/:id/proxy-url — box.proxy()'s arguments (Box.proxy checks them again). */
export const ProxyUrlBodySchema = z
  .object({
    port: portNumber,
    path: z.string().max(4096).optional(),
    signed: z.boolean().optional(),
    ttlMs: TokenTtlMsSchema,
  })
  .strict();

/** POST /v1/boxes/:id/renew-lifetime — box.renewLifetime()'s argument (the library checks it again). */
export const RenewLifetimeBodySchema = z.object({ lifetimeMs: z.number().int().min(1).max(MAX_DURATION_MS) }).strict();

/** POST /v1/boxes/:id/pause — box.pause()'s options (no body: hold). */
export const PauseBodySchema = z
  .object({
    memory: z
      .enum(['hold', 'release'])
      .optional()
      .describe(
        'hold (default): frozen in place, memory kept. release: checkpointed to disk with its processes and memory, none left on the host; a use restores it (gVisor pools only, else 503 not_available, reason checkpoint_unsupported)',
      ),
  })
  .strict();
exact<Exact<z.infer<typeof PauseBodySchema>, PauseOptions>>(true);

/** POST /v1/boxes/:id/vnc-url — box.vnc()'s options. */
export const VncUrlBodySchema = z.object({ ttlMs: TokenTtlMsSchema }).strict();

// --- Answers. With fastify-type-provider-zod a route's `response` schema is also its serializer:
// an object answer is encoded through it (fields it does not name are dropped) and one that does
// not fit is a 500. So each schema below is the wire form exactly; `Exact` makes the compiler
// hold it to the library's type, so a field added there fails the typecheck until it is here.

type Exact<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
function exact<T>(_check: T extends true ? true : never): void {}

export const isoTime = z.string().describe('ISO 8601');

/** Every error answer: `{"error":{"code","message","details"?}}` (src/server/errors.ts). */
export const ErrorBodySchema = z
  .object({
    error: z.object({
      code: z.enum(ERROR_CODES).describe('stable; callers switch on it, never on message'),
      message: z.string(),
      details: z.record(z.string(), z.unknown()).optional().describe('plain data to act on: the bad field, the limit, ...'),
    }),
  })
  .meta({ id: 'Error' });
exact<Exact<z.infer<typeof ErrorBodySchema>, ErrorBody>>(true);

/**
 * `{ egress: 'all' | 'none' | { allow?, deny? } }`: what a box may connect to (docs/network.md).
 * The entries' grammar is checked by the library (invalid_argument naming `networkPolicy.egress.allow[i]`).
 */
export const NetworkPolicyWireSchema = NetworkPolicySchema.meta({ id: 'NetworkPolicy' });

export const BoxInfoSchema = z
  .object({
    id: z.string(),
    containerId: z.string(),
    pool: z.string(),
    owner: z.string(),
    status: z.enum(BOX_STATUSES),
    policy: z.enum(['oneshot', 'session', 'longrunning', 'persistent']),
    labels: z.record(z.string(), z.string()),
    image: z.string(),
    createdAt: isoTime,
    lastActive: isoTime,
    processCount: z.number().int(),
    vnc: z.boolean(),
    workspaceId: z.string().nullable(),
    mountPath: z.string(),
    idleTimeoutMs: z.number().int(),
    idlePauseMs: z.number().int(),
    idleArchiveMs: z.number().int(),
    maxLifetimeMs: z.number().int(),
    maxLifetimeAction: z.enum(['remove', 'pause']),
    stopTimeoutMs: z.number().int(),
    ports: z.array(z.object({ containerPort: z.number().int(), hostIp: z.string(), hostPort: z.number().int(), protocol: z.enum(['tcp', 'udp']) })),
    execPath: z.enum(['agent', 'engine']),
    exitCode: z.number().int().nullable(),
    oomKilled: z.boolean(),
    pausedMemory: z
      .enum(['held', 'released'])
      .nullable()
      .describe("a paused box's memory: held (frozen in place) or released (checkpointed to disk, none on the host); null unless paused"),
    networkPolicy: NetworkPolicyWireSchema,
  })
  .meta({ id: 'BoxInfo' });
exact<Exact<z.infer<typeof BoxInfoSchema>, BoxInfo>>(true);

export const BoxListSchema = z.object({ boxes: z.array(BoxInfoSchema) });

/** A buffered exec's answer (written by exec-json.ts, not encoded: the schema documents it). */
export const ExecResultSchema = z
  .object({
    exitCode: z.number().int(),
    stdout: z.string(),
    stderr: z.string(),
    truncated: z.boolean(),
    timedOut: z.boolean(),
    durationMs: z.number(),
  })
  .meta({ id: 'ExecResult' });
exact<Exact<z.infer<typeof ExecResultSchema>, ExecResult>>(true);

export const SignedUrlSchema = z.object({ url: z.string(), expiresAt: isoTime.optional() });
export const VncUrlSchema = z.object({ url: z.string(), expiresAt: isoTime });

export const WorkspaceInfoSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    owner: z.string(),
    node: z.string(),
    labels: z.record(z.string(), z.string()),
    createdAt: isoTime,
    updatedAt: isoTime,
    quotaBytes: z.number().int().optional(),
  })
  .meta({ id: 'WorkspaceInfo' });
exact<Exact<z.infer<typeof WorkspaceInfoSchema>, Workspace>>(true);

export const WorkspaceListSchema = z.object({ workspaces: z.array(WorkspaceInfoSchema) });
export const WorkspaceUsageSchema = z.object({ bytes: z.number().int(), files: z.number().int(), quotaBytes: z.number().int().optional() });
exact<Exact<z.infer<typeof WorkspaceUsageSchema>, WorkspaceUsage>>(true);

const dirEntryShape = {
  name: z.string(),
  isDir: z.boolean(),
  isSymlink: z.boolean(),
  size: z.number().int(),
  mode: z.number().int().describe('permission bits, e.g. 420 (0o644)'),
  mtime: isoTime,
};
export const DirEntrySchema = z.object(dirEntryShape).meta({ id: 'DirEntry' });
exact<Exact<z.infer<typeof DirEntrySchema>, DirEntry>>(true);
export const FileStatSchema = z.object({ ...dirEntryShape, isFile: z.boolean() }).meta({ id: 'FileStat' });
exact<Exact<z.infer<typeof FileStatSchema>, FileStat>>(true);
export const DirListSchema = z.object({ entries: z.array(DirEntrySchema) });
export const ImportResultSchema = z.object({ entries: z.number().int(), bytes: z.number().int() });
exact<Exact<z.infer<typeof ImportResultSchema>, ImportResult>>(true);

const warmTemplateSchema = z.object({
  image: z.string(),
  size: z.number().int(),
  security: z.enum(['standard', 'strict', 'sudo']).optional(),
  memory: z.number().int().optional(),
  cpus: z.number().optional(),
  network: z.string().optional(),
});
export const PoolInfoSchema = z
  .object({
    name: z.string(),
    addr: z.string(),
    connected: z.boolean(),
    boxes: z.number().int(),
    maxPerUser: z.number().int(),
    maxTotal: z.number().int(),
    idleTimeoutMs: z.number().int(),
    idlePauseMs: z.number().int(),
    idleArchiveMs: z.number().int(),
    maxLifetimeMs: z.number().int(),
    stopTimeoutMs: z.number().int(),
    security: z.enum(['standard', 'strict']),
    memory: z.number().int(),
    cpus: z.number(),
    agent: z.boolean(),
    networks: z.array(z.string()),
    networkPolicy: NetworkPolicyWireSchema,
    warm: z.array(warmTemplateSchema),
    ociRuntime: z.string().optional(),
    pauseMemory: z.enum(['hold', 'release']).optional(),
    pidsLimit: z.number().int().optional(),
    maxMemory: z.number().int().optional(),
    maxCpus: z.number().optional(),
    agentImage: z.string().optional(),
    agentDelivery: z.enum(AGENT_DELIVERY_CHOICES).optional(),
    readyTimeoutMs: z.number().int().optional(),
    storageClass: z.string().optional(),
  })
  .meta({ id: 'PoolInfo' });
exact<Exact<z.infer<typeof PoolInfoSchema>, PoolInfo>>(true);
export const PoolListSchema = z.object({ pools: z.array(PoolInfoSchema) });

const keyInfoShape = { id: z.string(), name: z.string(), role: z.enum(['admin', 'user']), owner: z.string(), createdAt: isoTime };
export const KeyInfoSchema = z.object(keyInfoShape).meta({ id: 'KeyInfo' });
exact<Exact<z.infer<typeof KeyInfoSchema>, ApiKeyInfo>>(true);
export const KeyListSchema = z.object({ keys: z.array(KeyInfoSchema) });
/** GET /v1/whoami: the calling key, never its secret. */
export const WhoamiSchema = z.object({ keyId: z.string(), name: z.string(), role: z.enum(['admin', 'user']), owner: z.string(), admin: z.boolean() });
/** GET /v1/images: a pool's images. */
export const ImageListSchema = z.object({
  pool: z.string(),
  images: z.array(z.object({ id: z.string(), tags: z.array(z.string()), sizeBytes: z.number().int(), createdAt: isoTime }).meta({ id: 'ImageInfo' })),
});
export const CreatedKeySchema = z.object({
  ...keyInfoShape,
  key: z.string().describe('the secret; shown in this answer only'),
  e2bKey: z.string().describe('the same key as the e2b SDK spells it'),
});
exact<Exact<z.infer<typeof CreatedKeySchema>, CreatedKey>>(true);

/** An answer without a body (204, 101, a redirect): the document gives it no content. */
export function noContent(description: string): z.ZodNull {
  return z.null().describe(description);
}

/** What each error status means, for the document. */
const ERROR_STATUSES = {
  400: 'invalid_argument: a field, parameter or body the route refuses (details.field names it)',
  401: 'unauthorized: no credential, or one that is unknown, revoked or expired',
  403: 'forbidden: the credential may not do this (a user key on an admin route, another owner named)',
  404: 'not_found / pool_not_found: no such resource, or another owner’s (which looks the same)',
  409: 'conflict / pool_in_use: the resource’s state forbids it',
  413: 'quota_exceeded, or a body larger than the server accepts (invalid_argument)',
  415: 'invalid_argument: a content type the route does not take',
  431: 'invalid_argument: the request line and headers are over 16 KiB (a long path or query)',
  429: 'limit_exceeded: a quota of boxes, or too many failed authentications (Retry-After)',
  500: 'internal: a bug; the server log has the details',
  503: 'not_available / runtime_unavailable: shutting down, or the engine does not answer',
  504: 'timeout: the engine or the box did not answer in time',
} as const;
export type ErrorStatus = keyof typeof ERROR_STATUSES;

/** The error statuses every route with a key may answer (validation, auth, a missing resource, a limit, the engine). */
export const COMMON_ERRORS: readonly ErrorStatus[] = [400, 401, 403, 404, 413, 415, 429, 431, 500, 503];

/** A route's `response`: its successes as given, and the error body under each error status. */
export function replies(ok: Record<number, z.ZodType>, errors: readonly ErrorStatus[] = COMMON_ERRORS): Record<number, z.ZodType> {
  const out: Record<number, z.ZodType> = { ...ok };
  for (const status of errors) out[status] = ErrorBodySchema.describe(ERROR_STATUSES[status]);
  return out;
}

/** A snapshot's id (`snap-…`) or its name, in a path. */
export const snapshotIdParam = z.object({ id: z.string().regex(BOX_ID_PATTERN, 'is not a valid snapshot id or name') }).strict();
export const SnapshotInfoSchema = z
  .object({
    id: z.string(),
    name: z.string().nullable(),
    owner: z.string(),
    pool: z.string(),
    sourceBoxId: z.string(),
    image: z.string().describe("the engine's image reference; a create takes it, or the id, as image"),
    sizeBytes: z.number().int(),
    createdAt: isoTime,
  })
  .meta({ id: 'SnapshotInfo' });
exact<Exact<z.infer<typeof SnapshotInfoSchema>, SnapshotInfo>>(true);
export const SnapshotListSchema = z.object({ snapshots: z.array(SnapshotInfoSchema) });
export const ListSnapshotsQuery = z.object({ owner: z.string().regex(OWNER_PATTERN, 'is not a valid owner').optional() }).strict();
