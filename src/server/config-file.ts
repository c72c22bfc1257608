/**
 * The `server:` section of the YAML config file: sbx serve's own settings, beside the Manager's
 * (which loadConfig reads from the same file and which ignores this section). As everywhere in
 * config files, durations are human strings under the key without `Ms` (`shutdownGrace: 10s`)
 * and sizes may be `1m`; the result has the TypeScript names (`shutdownGraceMs`, `bodyLimitBytes`).
 *
 * @example
 * // server:
 * //   host: 172.17.0.1
 * //   port: 7070
 * //   tls: { cert: certs/sbx.pem, key: certs/sbx-key.pem }   # relative to the file
 * //   grpc: { port: 7071, host: 172.17.0.1 }
 * //   shutdownGrace: 30s
 * //   bodyLimit: 4m
 * //   execOutputBudget: 256m      # buffered exec output held at once
 * //   bodyTimeout: 30s            # a request body idle this long: 408 (0 = never)
 * //   wsMaxPayload: 16m           # larger WebSocket messages close with 1009
 * //   logLevel: info              # fatal, error, warn, info, debug, trace, silent
 * //   logFormat: auto             # auto (readable on a terminal, else JSON), pretty, json
 * const section = readServerSection('/etc/sbx/config.yaml');
 */
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { bindPortNumber } from '../runtime/bounds.js';
import { SbxError, invalidArgument } from '../errors.js';
import { imageRef } from '../runtime/spec.js';
import { parseBytes, readConfigFile } from '../sandbox/config.js';
import { parseDuration } from '../util/duration.js';
import { parseOrThrow } from '../util/validation.js';
import { LOG_FORMATS, LOG_LEVELS } from '../util/log-settings.js';
import type { LogFormat, LogLevel } from '../util/log-settings.js';

/** What the section gives serveOptions: the same names and units as ServeOptions. */
export interface ServerFileSection {
  host?: string;
  port?: number;
  allowInsecure?: boolean;
  /** Absolute paths (relative ones are taken from the config file's directory). */
  tls?: { certFile: string; keyFile: string };
  grpc?: { port: number; host?: string; advertise?: string };
  shutdownGraceMs?: number;
  bodyLimitBytes?: number;
  execOutputBudgetBytes?: number;
  bodyTimeoutMs?: number;
  wsMaxPayloadBytes?: number;
  logLevel?: LogLevel;
  logFormat?: LogFormat;
  publicUrl?: string;
  proxyDomain?: string;
  /** The e2b-compatible API (docs/e2b.md): template name → image; whether e2b ports may be public. */
  e2b?: { templates?: Record<string, string>; publicTraffic?: boolean };
}

const port = bindPortNumber;
const host = z.string().min(1);
const duration = z.union([z.string(), z.number()]).transform((v, ctx) => {
  try {
    // A YAML number is a duration without a unit, refused as in flags (only 0 needs none).
    return parseDuration(String(v));
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: (e as Error).message.replace(/^duration: /, '') });
    return z.NEVER;
  }
});
const size = (key: string) =>
  z.union([z.string(), z.number().int().min(1)]).transform((v, ctx) => {
    if (typeof v === 'number') return v;
    try {
      return parseBytes(v, key);
    } catch (e) {
      ctx.addIssue({ code: 'custom', message: (e as Error).message.replace(new RegExp(`^${key}: `), '') });
      return z.NEVER;
    }
  });

const sectionSchema = z
  .object({
    host: host.optional(),
    port: port.optional(),
    allowInsecure: z.boolean().optional(),
    tls: z
      .object({ cert: z.string().min(1), key: z.string().min(1) })
      .strict()
      .optional(),
    grpc: z
      .object({ port, host: host.optional(), advertise: z.string().min(1).optional() })
      .strict()
      .optional(),
    shutdownGrace: duration.optional(),
    bodyLimit: size('bodyLimit').optional(),
    execOutputBudget: size('execOutputBudget').optional(),
    bodyTimeout: duration.optional(),
    wsMaxPayload: size('wsMaxPayload').optional(),
    logLevel: z.enum(LOG_LEVELS).optional(),
    logFormat: z.enum(LOG_FORMATS).optional(),
    publicUrl: z.string().url().optional(),
    proxyDomain: z.string().min(1).optional(),
    e2b: z
      .object({ templates: z.record(z.string().min(1).max(256), imageRef).optional(), publicTraffic: z.boolean().optional() })
      .strict()
      .optional(),
  })
  .strict();

/** Keys a file must not use, with the spelling it should. */
const FILE_SPELLING: Record<string, string> = {
  shutdownGraceMs: 'shutdownGrace: 10s',
  bodyLimitBytes: 'bodyLimit: 1m',
  execOutputBudgetBytes: 'execOutputBudget: 256m',
  bodyTimeoutMs: 'bodyTimeout: 30s',
  wsMaxPayloadBytes: 'wsMaxPayload: 16m',
};

/** The file's `server:` section, validated; `{}` when it has none. Errors name the key and line. */
export function readServerSection(file: string): ServerFileSection {
  const { value: root, locate } = readConfigFile(file);
  const raw = root !== null && typeof root === 'object' && !Array.isArray(root) ? (root as Record<string, unknown>)['server'] : undefined;
  if (raw === undefined || raw === null) return {};
  const at = (path: (string | number)[]) => locate(['server', ...path]);
  if (typeof raw !== 'object' || Array.isArray(raw)) throw invalidArgument('server', `must be a mapping${at([])}`);
  for (const [key, hint] of Object.entries(FILE_SPELLING)) {
    if (key in raw) throw invalidArgument(`server.${key}`, `config files write '${hint}'${at([key])}`);
  }
  let v: z.output<typeof sectionSchema>;
  try {
    v = parseOrThrow(sectionSchema, raw, 'server', 'server');
  } catch (e) {
    const field = e instanceof SbxError && typeof e.details?.['field'] === 'string' ? e.details['field'] : 'server';
    throw new SbxError('invalid_argument', `config: ${(e as Error).message}${at(field.split('.').slice(1))}`, { cause: e, details: { field } });
  }
  const base = dirname(resolve(file));
  return {
    ...(v.host !== undefined ? { host: v.host } : {}),
    ...(v.port !== undefined ? { port: v.port } : {}),
    ...(v.allowInsecure !== undefined ? { allowInsecure: v.allowInsecure } : {}),
    ...(v.tls ? { tls: { certFile: resolve(base, v.tls.cert), keyFile: resolve(base, v.tls.key) } } : {}),
    ...(v.grpc
      ? {
          grpc: {
            port: v.grpc.port,
            ...(v.grpc.host !== undefined ? { host: v.grpc.host } : {}),
            ...(v.grpc.advertise !== undefined ? { advertise: v.grpc.advertise } : {}),
          },
        }
      : {}),
    ...(v.shutdownGrace !== undefined ? { shutdownGraceMs: v.shutdownGrace } : {}),
    ...(v.bodyLimit !== undefined ? { bodyLimitBytes: v.bodyLimit } : {}),
    ...(v.execOutputBudget !== undefined ? { execOutputBudgetBytes: v.execOutputBudget } : {}),
    ...(v.bodyTimeout !== undefined ? { bodyTimeoutMs: v.bodyTimeout } : {}),
    ...(v.wsMaxPayload !== undefined ? { wsMaxPayloadBytes: v.wsMaxPayload } : {}),
    ...(v.logLevel !== undefined ? { logLevel: v.logLevel } : {}),
    ...(v.logFormat !== undefined ? { logFormat: v.logFormat } : {}),
    ...(v.publicUrl !== undefined ? { publicUrl: v.publicUrl } : {}),
    ...(v.proxyDomain !== undefined ? { proxyDomain: v.proxyDomain } : {}),
    ...(v.e2b !== undefined
      ? {
          e2b: {
            ...(v.e2b.templates !== undefined ? { templates: v.e2b.templates } : {}),
            ...(v.e2b.publicTraffic !== undefined ? { publicTraffic: v.e2b.publicTraffic } : {}),
          },
        }
      : {}),
  };
}
