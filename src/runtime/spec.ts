import { z } from 'zod';
import { invalidArgument } from '../errors.js';
import { parseOrThrow } from '../util/validation.js';
import {
  MAX_RUNTIME_LABEL_VALUE,
  MAX_LOG_TAIL,
  MAX_OUTPUT_BYTES,
  MAX_PIDS,
  MIN_CPUS,
  MIN_MEMORY_BYTES,
  absolutePath,
  bindPortNumber,
  commandLine,
  durationMs,
  envMap,
  plainText,
  portNumber,
  userSpec,
} from './bounds.js';
import { parseImageRef } from './image-ref.js';
import type { ContainerSpec, EgressSpec, ExecOptions, ExecStreamOptions, LogOptions, OutputBudget } from './types.js';

const port = portNumber;
const labelKey = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;

/** An image reference checked by the one parser (image-ref.ts). */
export const imageRef = z.string({ error: 'is required' }).superRefine((ref, ctx) => {
  try {
    parseImageRef(ref);
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: (e as Error).message.replace(/^image: /, '') });
  }
});

/** Entries of an egress policy at most (allow and deny together; src/sandbox/egress-policy.ts enforces it on the user's form). */
export const MAX_EGRESS_ENTRIES = 1000;

const egressTarget = z
  .object({
    host: z.string().min(1).max(300),
    ports: z
      .tuple([port, port])
      .refine(([lo, hi]) => lo <= hi, 'must be [low, high] with low <= high')
      .optional(),
    protocol: z.enum(['tcp', 'udp']).optional(),
  })
  .strict();

/**
 * The shape of a compiled EgressSpec (types.ts), checked cheaply where it reaches a runtime: the
 * Manager has already validated each entry's grammar (src/sandbox/egress-policy.ts).
 */
export const EgressSpecSchema = z
  .object({
    mode: z.enum(['all', 'none', 'allowlist', 'denylist']),
    allow: z.array(egressTarget).max(MAX_EGRESS_ENTRIES),
    deny: z.array(egressTarget).max(MAX_EGRESS_ENTRIES),
    endpoints: z.array(egressTarget).max(64),
  })
  .strict()
  .refine((s) => s.allow.length + s.deny.length <= MAX_EGRESS_ENTRIES, `allow and deny hold at most ${MAX_EGRESS_ENTRIES} entries together`);

/** An EgressSpec's shape, or invalid_argument naming `field`. */
export function validateEgressSpec(spec: unknown, field = 'egress'): EgressSpec {
  return parseOrThrow(EgressSpecSchema, spec, field, field) as EgressSpec;
}

/**
 * The engine-neutral validation of a ContainerSpec: every runtime checks specs with it, so a
 * bad field is reported the same way (invalid_argument naming it) on every engine.
 */
export const ContainerSpecSchema = z
  .object({
    image: imageRef,
    name: z
      .string()
      .regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/, 'must be 1-128 of [a-zA-Z0-9_.-]')
      .optional(),
    cmd: commandLine.optional(),
    entrypoint: commandLine.optional(),
    env: envMap.optional(),
    workDir: absolutePath('workDir').optional(),
    user: userSpec.optional(),
    labels: z.record(z.string().regex(labelKey, 'label keys must match [A-Za-z0-9][A-Za-z0-9._/-]*'), plainText(MAX_RUNTIME_LABEL_VALUE)).optional(),
    memory: z
      .number()
      .int()
      .min(0)
      .refine((m) => m === 0 || m >= MIN_MEMORY_BYTES, 'must be 0 (none) or at least 6 MiB')
      .optional(),
    cpus: z
      .number()
      .min(0)
      .max(1024)
      .refine((c) => c === 0 || c >= MIN_CPUS, `must be 0 (none) or at least ${MIN_CPUS}`)
      .optional(),
    pidsLimit: z.number().int().min(0).max(MAX_PIDS).optional(),
    ports: z
      .array(
        z.object({
          containerPort: port,
          hostPort: bindPortNumber.optional(),
          hostIp: z.union([z.ipv4(), z.ipv6()]).optional(),
          protocol: z.enum(['tcp', 'udp']).optional(),
        }),
      )
      .optional(),
    binds: z.array(z.object({ hostPath: absolutePath('hostPath'), containerPath: absolutePath('containerPath'), readOnly: z.boolean().optional() })).optional(),
    network: z.string().min(1).optional(),
    security: z
      .object({
        noNewPrivileges: z.boolean().optional(),
        capDrop: z.array(z.string().regex(/^[A-Z_]+$/)).optional(),
        capAdd: z.array(z.string().regex(/^[A-Z_]+$/)).optional(),
        readOnlyRootfs: z.boolean().optional(),
        tmpfs: z.record(absolutePath('tmpfs'), z.string()).optional(),
      })
      .optional(),
    ociRuntime: z
      .string()
      .regex(/^[a-zA-Z0-9_.-]+$/)
      .optional(),
    shmSize: z.number().int().min(0).optional(),
    dialAnyPort: z.boolean().optional(),
    egress: EgressSpecSchema.optional(),
  })
  .strict();

export function validateSpec(spec: ContainerSpec): ContainerSpec {
  return parseOrThrow(ContainerSpecSchema, spec, 'spec') as ContainerSpec;
}

const execCommon = {
  workDir: absolutePath('workDir').optional(),
  env: envMap.optional(),
  user: userSpec.optional(),
  /** 0 = no timeout. */
  timeoutMs: durationMs.optional(),
  signal: z.instanceof(AbortSignal, { message: 'must be an AbortSignal' }).optional(),
};

/** ExecOptions of a buffered exec (Box.exec, Runtime.exec, POST /v1/boxes/:id/exec). */
export const ExecOptionsSchema = z
  .object({
    ...execCommon,
    stdin: z.union([z.string(), z.instanceof(Uint8Array)], { error: 'must be a string or bytes' }).optional(),
    maxOutputBytes: z.number().int().min(1).max(MAX_OUTPUT_BYTES, `must be at most ${MAX_OUTPUT_BYTES} bytes`).optional(),
    outputBudget: z
      .custom<OutputBudget>((v) => typeof v === 'object' && v !== null && typeof (v as OutputBudget).take === 'function', 'must have take(bytes)')
      .optional(),
  })
  .strict();

const terminalSize = z.object({ cols: z.number().int().min(1).max(10_000), rows: z.number().int().min(1).max(10_000) }).strict();

/** ExecStreamOptions of a streaming exec (Box.stream, Runtime.execStream, the WebSocket exec). */
export const ExecStreamOptionsSchema = z
  .object({
    ...execCommon,
    tty: z.boolean().optional(),
    size: terminalSize.optional(),
  })
  .strict();

export { terminalSize as TerminalSizeSchema };

/** Checks a command and buffered-exec options before anything reaches an engine. */
export function validateExec(cmd: unknown, opts: ExecOptions | undefined): ExecOptions {
  parseOrThrow(commandLine, cmd, 'cmd', 'cmd');
  return opts === undefined ? {} : (parseOrThrow(ExecOptionsSchema, objectOrThrow(opts), 'options') as ExecOptions);
}

/** Checks a command and streaming-exec options before anything reaches an engine. */
export function validateExecStream(cmd: unknown, opts: ExecStreamOptions | undefined): ExecStreamOptions {
  parseOrThrow(commandLine, cmd, 'cmd', 'cmd');
  return opts === undefined ? {} : (parseOrThrow(ExecStreamOptionsSchema, objectOrThrow(opts), 'options') as ExecStreamOptions);
}

/** The fields of a log read the HTTP query carries too (all but the signal). */
export const logQueryFields = {
  follow: z.boolean().optional(),
  tail: z.number().int('must be a whole number of lines').min(0, 'must not be negative').max(MAX_LOG_TAIL, `at most ${MAX_LOG_TAIL} lines`).optional(),
  since: z.iso.datetime({ offset: true, error: 'must be an ISO 8601 time, e.g. 2026-01-02T15:04:05Z' }).optional(),
  sinceMs: durationMs.optional(),
};

/** LogOptions (Box.logs, Runtime.logs): `since` and `sinceMs` exclude each other. */
export const LogOptionsSchema = z
  .object({ ...logQueryFields, signal: z.instanceof(AbortSignal, { message: 'must be an AbortSignal' }).optional() })
  .strict()
  .refine((o) => o.since === undefined || o.sinceMs === undefined, { message: 'give since or sinceMs, not both', path: ['sinceMs'] });

/** Checks log options before anything reaches an engine. */
export function validateLogs(opts: LogOptions | undefined): LogOptions {
  return opts === undefined ? {} : (parseOrThrow(LogOptionsSchema, objectOrThrow(opts), 'options') as LogOptions);
}

/**
 * An ISO 8601 time as nanoseconds since the epoch, its fraction kept to the nanosecond (engines
 * write log times that precise, and a read from a chunk's own time must include that chunk).
 */
export function isoNanos(time: string): bigint {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)$/i.exec(time);
  const whole = Date.parse(m ? `${m[1]}${m[3]}` : time);
  if (Number.isNaN(whole)) return 0n;
  const fraction = m?.[2] ? BigInt(m[2].slice(0, 9).padEnd(9, '0')) : 0n;
  return BigInt(whole) * 1_000_000n + fraction;
}

/** Where a log read starts, in nanoseconds since the epoch, or undefined for all of it. */
export function logSinceNanos(opts: LogOptions, now = Date.now()): bigint | undefined {
  if (opts.since !== undefined) return isoNanos(opts.since);
  if (opts.sinceMs !== undefined) return BigInt(now - opts.sinceMs) * 1_000_000n;
  return undefined;
}

function objectOrThrow(v: unknown): object {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw invalidArgument('options', 'must be an object');
  return v;
}
