import { isIP } from 'node:net';
import { z } from 'zod';
import {
  MAX_LABEL_VALUE,
  MAX_LABELS,
  MAX_PIDS,
  MIN_CPUS,
  MIN_MEMORY_BYTES,
  absolutePath,
  bindPortNumber,
  commandLine,
  durationMs,
  envMapOf,
  portNumber,
  envName,
  plainText,
  userSpec,
} from '../runtime/bounds.js';
import { imageRef } from '../runtime/spec.js';
import { isArchiveImage } from './archiver.js';
import { NetworkPolicySchema, normalizeNetworkPolicy } from './egress-policy.js';
import { invalidArgument } from '../errors.js';
import { parseOrThrow } from '../util/validation.js';
import type { CreateOptions } from './types.js';
import { LIFECYCLE_POLICIES, MAX_LIFETIME_ACTIONS } from './types.js';

export const BOX_ID_PATTERN = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$/;
/** Owner names: what an API key acts as, stamped as a label. */
export const OWNER_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$/;
const labelKey = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$/;

function isLoopback(ip: string): boolean {
  return (isIP(ip) === 4 && ip.startsWith('127.')) || ip === '::1';
}

/**
 * CreateOptions as a schema: the library, the config loader and the HTTP API validate creates
 * with this one definition. Unknown fields are refused. Bounds that depend on the pool (the
 * memory and CPU ceilings, the security profile's network rule, the networks the pool lists)
 * are checked by the Manager.
 */
export const CreateOptionsSchema = z
  .object({
    id: z.string().regex(BOX_ID_PATTERN, 'must be 1-63 of [a-zA-Z0-9_.-], starting with a letter or digit').optional(),
    owner: z.string().regex(OWNER_PATTERN, 'must be 1-128 of [A-Za-z0-9_.@-], starting with a letter or digit').optional(),
    labels: z
      .record(z.string().regex(labelKey, 'label keys must be 1-64 of [A-Za-z0-9._/-]'), plainText(MAX_LABEL_VALUE))
      .refine((l) => Object.keys(l).length <= MAX_LABELS, `at most ${MAX_LABELS} labels`)
      .optional(),
    pool: z.string().min(1).max(32).optional(),
    // The archives of boxes are no images to create from: each holds one box's files.
    image: imageRef.refine((ref) => !isArchiveImage(ref), 'sbx-archive/… images hold archived boxes; resume the box instead'),
    cmd: commandLine.optional(),
    workDir: absolutePath('workDir').optional(),
    user: userSpec.optional(),
    env: envMapOf(envName.refine((k) => !k.startsWith('SBX_'), 'SBX_* variables are set by sbx')).optional(),
    memory: z.number().int('must be a whole number of bytes').min(MIN_MEMORY_BYTES, 'must be at least 6 MiB (bytes)').optional(),
    cpus: z.number().min(MIN_CPUS, `must be at least ${MIN_CPUS}`).max(1024).optional(),
    pidsLimit: z.number().int().min(1).max(MAX_PIDS).optional(),
    vnc: z.boolean().optional(),
    proxyAllPorts: z.boolean().optional(),
    ports: z
      .array(
        z
          .object({
            containerPort: portNumber,
            hostPort: bindPortNumber.optional(),
            hostIp: z.string().refine(isLoopback, 'only loopback addresses; reach ports from elsewhere through the proxy').optional(),
            protocol: z.enum(['tcp', 'udp']).optional(),
          })
          .strict(),
      )
      .max(64)
      .optional(),
    policy: z.enum(LIFECYCLE_POLICIES as [string, ...string[]]).optional(),
    idleTimeoutMs: durationMs.optional(),
    idlePauseMs: durationMs.optional(),
    idleArchiveMs: durationMs.optional(),
    stopTimeoutMs: durationMs.optional(),
    maxLifetimeMs: durationMs.optional(),
    maxLifetimeAction: z.enum(MAX_LIFETIME_ACTIONS as [string, ...string[]]).optional(),
    network: z
      .string()
      .regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/, 'must be a network name')
      .refine((n) => n !== 'host', "'host' would share the host's network; not allowed")
      .optional(),
    // The shape here; the entries are parsed by validateCreateOptions (normalizeNetworkPolicy).
    networkPolicy: NetworkPolicySchema.optional(),
    security: z.enum(['standard', 'strict', 'sudo']).optional(),
    workspaceId: z
      .string()
      .regex(/^[a-z0-9][a-z0-9_.-]{0,62}$/, 'must be a workspace id')
      .optional(),
    mountMode: z.enum(['rw', 'ro']).optional(),
    mountPath: absolutePath('mountPath')
      .refine((p) => p !== '/', 'must not be /')
      .optional(),
  })
  .strict();

/** Validates CreateOptions; a bad one is invalid_argument naming the field. */
export function validateCreateOptions(opts: CreateOptions): CreateOptions {
  if (opts === null || typeof opts !== 'object' || Array.isArray(opts)) throw invalidArgument('options', 'must be an object with at least an image');
  const valid = parseOrThrow(CreateOptionsSchema, opts, 'options') as CreateOptions;
  return valid.networkPolicy === undefined ? valid : { ...valid, networkPolicy: normalizeNetworkPolicy(valid.networkPolicy, 'networkPolicy') };
}
