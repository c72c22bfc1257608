import { z } from 'zod';
import { parseOrThrow } from '../util/validation.js';
import type { ContainerSpec } from './types.js';

const port = z.number().int().min(1).max(65535);
const envName = /^[A-Za-z_][A-Za-z0-9_]*$/;
const labelKey = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;
const absolutePath = z.string().refine((p) => p.startsWith('/') && !p.includes('\0'), 'must be an absolute path');

/**
 * The engine-neutral validation of a ContainerSpec: every runtime checks specs with it, so a
 * bad field is reported the same way (invalid_argument naming it) on every engine.
 */
export const ContainerSpecSchema = z
  .object({
    image: z.string().min(1, 'is required'),
    name: z
      .string()
      .regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/, 'must be 1-128 of [a-zA-Z0-9_.-]')
      .optional(),
    cmd: z.array(z.string()).optional(),
    entrypoint: z.array(z.string()).optional(),
    env: z.record(z.string().regex(envName, 'env names must match [A-Za-z_][A-Za-z0-9_]*'), z.string()).optional(),
    workDir: absolutePath.optional(),
    user: z
      .string()
      .regex(/^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?$/, "must be 'user', 'uid' or 'uid:gid'")
      .optional(),
    labels: z.record(z.string().regex(labelKey, 'label keys must match [A-Za-z0-9][A-Za-z0-9._/-]*'), z.string()).optional(),
    memory: z
      .number()
      .int()
      .min(0)
      .refine((m) => m === 0 || m >= 6 * 1024 * 1024, 'must be 0 (none) or at least 6 MiB')
      .optional(),
    cpus: z.number().min(0).max(1024).optional(),
    pidsLimit: z.number().int().min(0).optional(),
    ports: z
      .array(
        z.object({
          containerPort: port,
          hostPort: z.number().int().min(0).max(65535).optional(),
          hostIp: z.union([z.ipv4(), z.ipv6()]).optional(),
          protocol: z.enum(['tcp', 'udp']).optional(),
        }),
      )
      .optional(),
    binds: z.array(z.object({ hostPath: absolutePath, containerPath: absolutePath, readOnly: z.boolean().optional() })).optional(),
    network: z.string().min(1).optional(),
    security: z
      .object({
        noNewPrivileges: z.boolean().optional(),
        capDrop: z.array(z.string().regex(/^[A-Z_]+$/)).optional(),
        capAdd: z.array(z.string().regex(/^[A-Z_]+$/)).optional(),
        readOnlyRootfs: z.boolean().optional(),
        tmpfs: z.record(absolutePath, z.string()).optional(),
      })
      .optional(),
    ociRuntime: z
      .string()
      .regex(/^[a-zA-Z0-9_.-]+$/)
      .optional(),
    shmSize: z.number().int().min(0).optional(),
  })
  .strict();

export function validateSpec(spec: ContainerSpec): ContainerSpec {
  return parseOrThrow(ContainerSpecSchema, spec, 'spec') as ContainerSpec;
}
