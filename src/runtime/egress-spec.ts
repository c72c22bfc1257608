/**
 * An EgressSpec (types.ts) checked entry by entry, where one crosses a trust boundary: a node
 * parses its Manager's bytes (src/node). Every runtime checks the spec's shape and size
 * (EgressSpecSchema in spec.ts: the Manager parsed each entry, src/sandbox/egress-policy.ts);
 * this adds what an enforcer may safely take of someone else's bytes — address blocks that parse
 * and have no host bits set, domains of the DNS grammar, a protocol only with ports, endpoints as
 * address blocks with ports — with the same bounds.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { z } from 'zod';
import { parseOrThrow } from '../util/validation.js';
import { portNumber } from './bounds.js';
import { MAX_EGRESS_ENTRIES } from './spec.js';
import type { EgressSpec } from './types.js';

/** The policy of a box whose spec gives none (`all` with no rules): everything but the always denied. */
export const EGRESS_ALL: EgressSpec = { mode: 'all', allow: [], deny: [], endpoints: [] };

/** sbx's own endpoints in one spec, at most (a handful in practice: heartbeats, the API, gRPC; spec.ts's bound). */
export const MAX_EGRESS_ENDPOINTS = 64;
/** The longest domain DNS carries (RFC 1035: 253 characters written out). */
const MAX_DOMAIN = 253;
/** A CIDR written out is shorter than this (an IPv6 address with an embedded IPv4 and /128). */
const MAX_CIDR = 64;

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** Whether `host` is a domain as the runtime takes it: lowercase ASCII labels, `*.` only as the whole first label, no trailing dot, not an address. */
export function isEgressDomain(host: string): boolean {
  if (host.length === 0 || host.length > MAX_DOMAIN) return false;
  const labels = host.split('.');
  if (labels[0] === '*') labels.shift();
  if (labels.length === 0 || !labels.every((l) => LABEL.test(l))) return false;
  // A name ending in a number is an IPv4 address to a resolver (and to the WHATWG URL parser), never a domain.
  return !/^[0-9]+$/.test(labels.at(-1)!);
}

/** An IPv6 address's 16 bytes (the address already passed isIPv6, no zone). */
function ipv6Bytes(addr: string): number[] {
  let text = addr;
  const tail: number[] = [];
  const v4 = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    text = `${v4[1]}0:0`;
    tail.push(...v4[2]!.split('.').map(Number));
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const groups = (s: string) => (s === '' ? [] : s.split(':').map((g) => parseInt(g, 16)));
  const left = groups(head);
  const right = rest === undefined ? [] : groups(rest);
  const words = [...left, ...Array<number>(8 - left.length - right.length).fill(0), ...right];
  const bytes = words.flatMap((w) => [w >> 8, w & 0xff]);
  if (tail.length) bytes.splice(12, 4, ...tail);
  return bytes;
}

/** Whether `host` is an address block: `a.b.c.d/n` or `<ipv6>/n`, prefix in range, no bit set past it. */
export function isEgressCidr(host: string): boolean {
  if (host.length > MAX_CIDR) return false;
  const m = /^([^/%]+)\/(\d{1,3})$/.exec(host);
  if (!m) return false;
  const [, addr, len] = m as unknown as [string, string, string];
  const prefix = Number(len);
  let bytes: number[];
  if (isIPv4(addr)) {
    if (prefix > 32) return false;
    bytes = addr.split('.').map(Number);
  } else if (isIPv6(addr)) {
    if (prefix > 128) return false;
    bytes = ipv6Bytes(addr);
  } else return false;
  return bytes.every((b, i) => {
    const kept = Math.max(0, Math.min(8, prefix - i * 8));
    return (b & (0xff >> kept)) === 0;
  });
}

const ports = z
  .tuple([portNumber, portNumber])
  .refine(([lo, hi]) => lo <= hi, 'must be [low, high] with low ≤ high')
  .optional();
const protocol = z.enum(['tcp', 'udp']).optional();
const needsPorts = { message: 'is only taken with ports', path: ['protocol'] };

const target = z
  .object({
    host: z
      .string()
      .max(MAX_DOMAIN)
      .refine(
        (h) => isEgressCidr(h) || isEgressDomain(h),
        'must be an address block with no host bits set (198.18.0.0/15, 2001:db8::/32) or a lowercase domain (example.com, *.example.com)',
      ),
    ports,
    protocol,
  })
  .strict()
  .refine((t) => t.protocol === undefined || t.ports !== undefined, needsPorts);

const endpoint = z
  .object({
    host: z.string().max(MAX_CIDR).refine(isEgressCidr, 'must be an address block (10.0.0.1/32)'),
    ports: z.tuple([portNumber, portNumber]).refine(([lo, hi]) => lo <= hi, 'must be [low, high] with low ≤ high'),
    protocol,
  })
  .strict();

/** An EgressSpec with every entry checked (bounded: MAX_EGRESS_ENTRIES, MAX_EGRESS_ENDPOINTS). */
export const EgressGrammarSchema = z
  .object({
    mode: z.enum(['all', 'none', 'allowlist', 'denylist']),
    allow: z.array(target).max(MAX_EGRESS_ENTRIES, `must have at most ${MAX_EGRESS_ENTRIES} entries`),
    deny: z.array(target).max(MAX_EGRESS_ENTRIES, `must have at most ${MAX_EGRESS_ENTRIES} entries`),
    endpoints: z.array(endpoint).max(MAX_EGRESS_ENDPOINTS, `must have at most ${MAX_EGRESS_ENDPOINTS} entries`),
  })
  .strict()
  .refine((s) => s.allow.length + s.deny.length <= MAX_EGRESS_ENTRIES, {
    message: `allow and deny must have at most ${MAX_EGRESS_ENTRIES} entries together`,
    path: ['allow'],
  });

/**
 * Checks an EgressSpec from outside, every entry (invalid_argument naming the field, e.g.
 * `egress.allow.3.host`).
 *
 * @example
 * const spec = validateEgressGrammar(JSON.parse(body), 'egress');
 */
export function validateEgressGrammar(value: unknown, field = 'egress'): EgressSpec {
  return parseOrThrow(EgressGrammarSchema, value, field, field) as EgressSpec;
}
