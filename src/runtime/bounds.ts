/**
 * The bounds of every public option, in one place: the schemas of the runtime, the sandbox
 * core, the config loader and the HTTP layer all take them from here.
 */
import { z } from 'zod';
import { MAX_PORT } from './ports.js';

/** A port a service listens on (1-65535; src/runtime/ports.ts). */
export const portNumber = z.number().int().min(1).max(MAX_PORT);
/** A port to bind or publish on: 0 is any free one. */
export const bindPortNumber = z.number().int().min(0).max(MAX_PORT);

/** The engine's own floor: below 6 MiB a container cannot start. */
export const MIN_MEMORY_BYTES = 6 * 1024 * 1024;
/** Below a hundredth of a core a box gets nothing done; the CFS quota floor is 1 ms per 100 ms. */
export const MIN_CPUS = 0.01;
/** Longest duration any option takes: a year. */
export const MAX_DURATION_MS = 365 * 86_400_000;
/** Default and ceiling of the output a buffered exec keeps per stream. */
export const DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024;
/**
 * V8's longest string (2^29 - 24 characters on 64-bit, 24 bytes short of 512 MiB): the kept
 * output becomes a string, and UTF-8 never decodes to more characters than it has bytes, so any
 * output up to this fits. sbx serve bounds it further by its buffered-output budget.
 */
export const MAX_OUTPUT_BYTES = 2 ** 29 - 24;
export const MAX_PIDS = 1_000_000;
/** Most lines a log read's `tail` may ask for. */
export const MAX_LOG_TAIL = 1_000_000;
export const MAX_LABELS = 64;
export const MAX_LABEL_VALUE = 1024;
/**
 * A label value a runtime takes: larger than a caller's (MAX_LABEL_VALUE), for what sbx keeps in
 * labels itself (the spec a box was made from, `sbx.spec`).
 */
export const MAX_RUNTIME_LABEL_VALUE = 64 * 1024;
export const MAX_ENV = 1024;
export const MAX_ENV_VALUE = 128 * 1024;
export const MAX_ARGS = 4096;
export const MAX_ARG_BYTES = 128 * 1024;

export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const USER_PATTERN = /^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?$/;

// eslint-disable-next-line no-control-regex
const CONTROL = /[\x00-\x1f\x7f]/;
// eslint-disable-next-line no-control-regex
const NUL = /\x00/;
/** A UTF-16 surrogate without its pair: JSON can carry one (`"\\ud800"`), UTF-8 cannot, so the engine would get U+FFFD instead. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Whether a string survives UTF-8 unchanged (no lone surrogate). */
export const wellFormed = (s: string): boolean => !LONE_SURROGATE.test(s);
export const NOT_WELL_FORMED = 'must be valid Unicode (no lone surrogate such as \\ud800)';

/** Text that becomes a label or a name: printable, no NUL, no control characters. */
export const plainText = (max: number) =>
  z
    .string()
    .max(max, `must be at most ${max} characters`)
    .refine((s) => !CONTROL.test(s), 'must not contain NUL or control characters')
    .refine(wellFormed, NOT_WELL_FORMED);

/** Text that becomes an env value or an argument: anything but NUL, which C strings cannot carry. */
export const cString = (max: number) =>
  z
    .string()
    .max(max, `must be at most ${max} characters`)
    .refine((s) => !NUL.test(s), 'must not contain NUL bytes')
    .refine(wellFormed, NOT_WELL_FORMED);

export const durationMs = z
  .number({ error: 'must be a number of milliseconds' })
  .int('must be a whole number of milliseconds')
  .min(0, 'must not be negative')
  .max(MAX_DURATION_MS, 'must be at most a year');

export const absolutePath = (what: string) =>
  z
    .string()
    .max(4096)
    .refine((p) => p.startsWith('/') && !NUL.test(p) && !p.split('/').includes('..'), `${what} must be an absolute path without '..'`)
    .refine(wellFormed, NOT_WELL_FORMED);

export const envName = z.string().regex(ENV_NAME, 'env names must match [A-Za-z_][A-Za-z0-9_]* (no =)').max(256);

/** Environment variables: valid names, NUL-free values, a bounded count. */
export const envMapOf = (key: z.ZodType<string>) =>
  z.record(key, cString(MAX_ENV_VALUE)).refine((m) => Object.keys(m).length <= MAX_ENV, `at most ${MAX_ENV} variables`);

export const envMap = envMapOf(envName);

/** A command line: at least the program, which is not empty; no NUL anywhere. */
export const commandLine = z
  .array(cString(MAX_ARG_BYTES), { error: 'must be an array of strings' })
  .min(1, 'must not be empty')
  .max(MAX_ARGS, `at most ${MAX_ARGS} arguments`)
  .refine((c) => c[0] !== '', 'the program (first element) must not be empty');

export const userSpec = z.string().regex(USER_PATTERN, "must be 'user', 'uid' or 'uid:gid'");
