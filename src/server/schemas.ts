/**
 * Wire schemas of the HTTP API. Box and exec options are the library's own zod schemas; only
 * what exists on the wire alone (ids in paths, base64 stdin, query flags) is defined here.
 */
import { z } from 'zod';
import { invalidArgument } from '../errors.js';
import { MAX_DURATION_MS, commandLine, portNumber } from '../runtime/bounds.js';
import { ExecOptionsSchema, ExecStreamOptionsSchema } from '../runtime/spec.js';
import { PROXY_TTL_MAX_MS } from '../sandbox/box.js';
import { BOX_ID_PATTERN, OWNER_PATTERN } from '../sandbox/create-options.js';
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

/** POST /v1/boxes/:id/vnc-url — box.vnc()'s options. */
export const VncUrlBodySchema = z.object({ ttlMs: TokenTtlMsSchema }).strict();
