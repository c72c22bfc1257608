import { isIP } from 'node:net';
import { z } from 'zod';
import { parseOrThrow } from '../util/validation.js';
import type { CreateOptions } from './types.js';
import { LIFECYCLE_POLICIES } from './types.js';

export const BOX_ID_PATTERN = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$/;
const labelKey = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$/;
const envName = /^[A-Za-z_][A-Za-z0-9_]*$/;
const absolute = (what: string) =>
  z.string().refine((p) => p.startsWith('/') && !p.includes('\0') && !p.split('/').includes('..'), `${what} must be an absolute path without '..'`);
const nonNegativeMs = z
  .number()
  .int()
  .min(0)
  .max(365 * 86_400_000);

function isLoopback(ip: string): boolean {
  return (isIP(ip) === 4 && ip.startsWith('127.')) || ip === '::1';
}

const createOptionsSchema = z
  .object({
    id: z.string().regex(BOX_ID_PATTERN, 'must be 1-63 of [a-zA-Z0-9_.-], starting with a letter or digit').optional(),
    owner: z.string().min(1).max(128).optional(),
    labels: z.record(z.string().regex(labelKey, 'label keys must be 1-64 of [A-Za-z0-9._/-]'), z.string().max(1024)).optional(),
    pool: z.string().min(1).optional(),
    image: z.string({ error: 'is required' }).min(1, 'is required'),
    cmd: z.array(z.string()).min(1, 'must not be empty').optional(),
    workDir: absolute('workDir').optional(),
    user: z
      .string()
      .regex(/^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?$/, "must be 'user', 'uid' or 'uid:gid'")
      .optional(),
    env: z
      .record(
        z
          .string()
          .regex(envName, 'env names must match [A-Za-z_][A-Za-z0-9_]*')
          .refine((k) => !k.startsWith('SBX_'), 'SBX_* variables are set by sbx'),
        z.string(),
      )
      .optional(),
    memory: z
      .number()
      .int()
      .min(6 * 1024 * 1024, 'must be at least 6 MiB (bytes)')
      .optional(),
    cpus: z.number().positive().max(1024).optional(),
    pidsLimit: z.number().int().min(1).max(1_000_000).optional(),
    vnc: z.boolean().optional(),
    ports: z
      .array(
        z
          .object({
            containerPort: z.number().int().min(1).max(65535),
            hostPort: z.number().int().min(0).max(65535).optional(),
            hostIp: z.string().refine(isLoopback, 'only loopback addresses; reach ports from elsewhere through the proxy').optional(),
            protocol: z.enum(['tcp', 'udp']).optional(),
          })
          .strict(),
      )
      .max(64)
      .optional(),
    policy: z.enum(LIFECYCLE_POLICIES as [string, ...string[]]).optional(),
    idleTimeoutMs: nonNegativeMs.optional(),
    stopTimeoutMs: nonNegativeMs.optional(),
    maxLifetimeMs: nonNegativeMs.optional(),
    network: z
      .string()
      .regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/)
      .refine((n) => n !== 'host', "'host' would share the host's network; not allowed")
      .optional(),
    security: z.enum(['standard', 'strict']).optional(),
    workspaceId: z.string().min(1).optional(),
    mountMode: z.enum(['rw', 'ro']).optional(),
    mountPath: absolute('mountPath')
      .refine((p) => p !== '/', 'must not be /')
      .optional(),
  })
  .strict();

/** Validates CreateOptions; a bad one is invalid_argument naming the field. */
export function validateCreateOptions(opts: CreateOptions): CreateOptions {
  if (opts === null || typeof opts !== 'object') return parseOrThrow(createOptionsSchema, {}, 'options') as CreateOptions;
  return parseOrThrow(createOptionsSchema, opts, 'options') as CreateOptions;
}
