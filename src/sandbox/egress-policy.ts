/**
 * A box's egress policy as users write it (`{ egress: 'all' | 'none' | { allow, deny } }`), its
 * validation and its translation to and from what the runtime enforces (`EgressSpec`,
 * src/runtime/types.ts) and e2b's `network` options. Pure: no engine, no DNS. docs/network.md.
 */
import { isIP } from 'node:net';
import { domainToASCII } from 'node:url';
import { z } from 'zod';
import { invalidArgument } from '../errors.js';
import type { EgressSpec, EgressTarget, HostEndpoint } from '../runtime/types.js';
import { parseOrThrow } from '../util/validation.js';

/**
 * `'all'`: everything but the always denied (docs/network.md). `'none'`: nothing but sbx's own
 * endpoints, and every name NXDOMAIN. `{ allow }` (with or without `deny`): only what `allow`
 * names, minus `deny`. `{ deny }` alone: everything but `deny`. Deny wins over allow.
 *
 * Entries: `<host>[:<port>[-<port>][/tcp|/udp]]`, host a domain (`example.com`, `*.example.com`),
 * an IPv4 or IPv6 address or CIDR (IPv6 with a port in brackets: `[2001:db8::1]:443`).
 *
 * @example
 * const policy: EgressPolicy = { allow: ['*.github.com', 'pypi.org:443', '198.18.0.0/15'], deny: ['198.18.0.9'] };
 */
export type EgressPolicy = 'all' | 'none' | { allow?: string[]; deny?: string[] };

/**
 * What a box may reach on the network (CreateOptions.networkPolicy, box.setNetwork).
 *
 * @example
 * await box.setNetwork({ egress: { allow: ['api.openai.com:443'] } });
 */
export interface NetworkPolicy {
  egress: EgressPolicy;
}

/** The most entries a policy may hold, allow and deny together. */
export const MAX_EGRESS_ENTRIES = 1000;
/** The longest entry, in characters. */
export const MAX_EGRESS_ENTRY_LENGTH = 300;
/** The longest domain name (RFC 1035), and its longest label. */
const MAX_DOMAIN_LENGTH = 253;
const MAX_LABEL_LENGTH = 63;

/** The policy every box has unless its create or its pool says otherwise. */
export const DEFAULT_NETWORK_POLICY: NetworkPolicy = { egress: 'all' };

const entryList = z.array(z.string({ error: 'entries must be strings' }), { error: 'must be a list of entries' });

/** The policy's shape; the entries themselves are parsed by parseEgressEntry. */
export const NetworkPolicySchema = z
  .object({
    egress: z.union([z.literal('all'), z.literal('none'), z.object({ allow: entryList.optional(), deny: entryList.optional() }).strict()], {
      error: "must be 'all', 'none' or { allow?: [...], deny?: [...] }",
    }),
  })
  .strict();

/**
 * Checks a policy and returns it in canonical form: each entry as `formatEgressTarget` writes it
 * (domains lowercase ASCII, addresses and CIDRs in their shortest form, `:80-80` as `:80`), repeats
 * dropped (first kept); an allowlist without deny entries has no `deny`, a denylist always has
 * `deny` (`{}` is a denylist of nothing). A bad policy is invalid_argument naming the field
 * (`networkPolicy.egress.allow[3]`) and the entry.
 *
 * @example
 * normalizeNetworkPolicy({ egress: { allow: ['Example.COM:443/tcp', 'example.com:443/tcp'] } });
 * // { egress: { allow: ['example.com:443/tcp'] } }
 */
export function normalizeNetworkPolicy(input: unknown, field = 'networkPolicy'): NetworkPolicy {
  // '': the policy is the whole body (PUT /v1/boxes/:id/network), its fields named from `egress`.
  const at = (sub: string) => (field ? `${field}.${sub}` : sub);
  if (input === null || typeof input !== 'object' || Array.isArray(input))
    throw invalidArgument(field || 'body', "must be an object { egress: 'all' | 'none' | { allow?, deny? } }");
  const policy = parseOrThrow(NetworkPolicySchema, input, field || 'body', field || undefined);
  const egress = policy.egress;
  if (egress === 'all' || egress === 'none') return { egress };
  const count = (egress.allow?.length ?? 0) + (egress.deny?.length ?? 0);
  if (count > MAX_EGRESS_ENTRIES) {
    throw invalidArgument(at('egress'), `${count} entries; at most ${MAX_EGRESS_ENTRIES} (allow and deny together)`);
  }
  const canonical = (list: string[], key: 'allow' | 'deny') => dedupe(list.map((e, i) => formatEgressTarget(parseEgressEntry(e, at(`egress.${key}[${i}]`)))));
  const deny = canonical(egress.deny ?? [], 'deny');
  if (egress.allow === undefined) return { egress: { deny } };
  const allow = canonical(egress.allow, 'allow');
  return { egress: deny.length > 0 ? { allow, deny } : { allow } };
}

/**
 * One entry (`<host>[:<port>[-<port>][/tcp|/udp]]`) as the runtime takes it; invalid_argument
 * naming `field` and the entry when it is not one.
 *
 * @example
 * parseEgressEntry('[2001:db8::/32]:443/udp', 'allow[0]');
 * // { host: '2001:db8::/32', ports: [443, 443], protocol: 'udp' }
 */
export function parseEgressEntry(entry: string, field: string): EgressTarget {
  const bad = (why: string) => invalidArgument(field, `'${printable(entry)}': ${why}`);
  if (typeof entry !== 'string') throw invalidArgument(field, 'must be a string');
  if (entry.length === 0) throw invalidArgument(field, 'must not be empty');
  if (entry.length > MAX_EGRESS_ENTRY_LENGTH)
    throw invalidArgument(field, `'${printable(entry.slice(0, 40))}…': longer than ${MAX_EGRESS_ENTRY_LENGTH} characters`);
  let host: string;
  let rest = '';
  let bracketed = false;
  if (entry.startsWith('[')) {
    const close = entry.indexOf(']');
    if (close === -1) throw bad("an opening '[' without its ']'");
    host = entry.slice(1, close);
    rest = entry.slice(close + 1);
    bracketed = true;
    if (rest !== '' && !rest.startsWith(':')) throw bad("after ']' only ':<port>' may follow");
    rest = rest.slice(1);
    if (entry.endsWith(':')) throw bad('a port must follow the colon');
  } else if (entry.indexOf(':') !== entry.lastIndexOf(':')) {
    // Two colons or more: an IPv6 address or CIDR, which takes no port unless bracketed.
    host = entry;
  } else {
    const colon = entry.indexOf(':');
    host = colon === -1 ? entry : entry.slice(0, colon);
    rest = colon === -1 ? '' : entry.slice(colon + 1);
    if (colon !== -1 && rest === '') throw bad('a port must follow the colon');
  }
  const target: EgressTarget = { host: parseHost(host, bracketed, bad) };
  if (rest !== '') {
    const m = /^(\d{1,5})(?:-(\d{1,5}))?(?:\/(tcp|udp))?$/.exec(rest);
    if (!m) {
      if (/^\d+(-\d+)?\/[a-z]*$/i.test(rest)) throw bad("the protocol after a port must be 'tcp' or 'udp'");
      throw bad('a port is 1-65535, a range lo-hi, optionally followed by /tcp or /udp');
    }
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (lo < 1 || lo > 65535 || hi < 1 || hi > 65535) throw bad('ports are 1-65535');
    if (lo > hi) throw bad(`the port range ${lo}-${hi} runs backwards; write ${hi}-${lo}`);
    target.ports = [lo, hi];
    if (m[3]) target.protocol = m[3] as 'tcp' | 'udp';
  }
  return target;
}

/** A host part (no port) as EgressTarget.host: a canonical CIDR or a lowercase ASCII domain. */
function parseHost(text: string, bracketed: boolean, bad: (why: string) => Error): string {
  if (text.includes('%')) throw bad('an address with a zone (%) cannot be a rule; name the address alone');
  if (text.includes('/')) {
    const slash = text.lastIndexOf('/');
    const address = text.slice(0, slash);
    const prefixText = text.slice(slash + 1);
    if (/^(tcp|udp)$/i.test(prefixText)) throw bad('a protocol (/tcp, /udp) comes only after a port: <host>:<port>/<protocol>');
    const family = isIP(address);
    if (family === 0) throw bad('before the / must be an IPv4 or IPv6 address (a CIDR such as 198.18.0.0/15)');
    if (family === 4 && bracketed) throw bad('only IPv6 addresses go in brackets');
    const bits = family === 4 ? 32 : 128;
    if (!/^\d{1,3}$/.test(prefixText) || Number(prefixText) > bits) throw bad(`the prefix length must be 0-${bits}`);
    const prefix = Number(prefixText);
    const value = addressValue(address, family);
    const network = prefix === 0 ? 0n : (value >> BigInt(bits - prefix)) << BigInt(bits - prefix);
    if (network !== value) throw bad(`host bits are set; the network is ${formatAddress(network, family)}/${prefix}`);
    return `${formatAddress(network, family)}/${prefix}`;
  }
  const family = isIP(text);
  if (family !== 0) {
    if (family === 4 && bracketed) throw bad('only IPv6 addresses go in brackets');
    return family === 4 ? `${formatAddress(addressValue(text, 4), 4)}/32` : `${formatAddress(addressValue(text, 6), 6)}/128`;
  }
  if (bracketed) throw bad('brackets hold an IPv6 address or CIDR');
  return parseDomain(text, bad);
}

/** A domain or `*.`-wildcard as lowercase ASCII (IDNA as punycode), checked label by label. */
function parseDomain(text: string, bad: (why: string) => Error): string {
  let name = text.endsWith('.') ? text.slice(0, -1) : text;
  let wildcard = false;
  if (name.startsWith('*.')) {
    wildcard = true;
    name = name.slice(2);
  }
  if (name === '*') throw bad("'*' alone would be every name: use egress 'all', or a wildcard such as '*.example.com'");
  if (name.includes('*')) throw bad("'*' may only be the whole first label ('*.example.com')");
  if (name === '') throw bad('not a domain, IP address or CIDR');
  // The URL host parser would drop or decode these (`a.com/x` → `a.com`, `%41` → `A`): not a name.
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x2c\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]/.test(name)) throw bad('a domain has only letters, digits, hyphens and dots');
  const labels = name.split('.');
  // A name ending in a number is an IPv4 address to every resolver (`1.2.3` is 1.2.0.3).
  if (/^(\d+|0x[0-9a-f]*)$/i.test(labels[labels.length - 1]!)) throw bad('not a valid IP address, and a domain cannot end in a number');
  const ascii = domainToASCII(name);
  if (ascii === '') throw bad('not a valid domain (IDNA)');
  const full = wildcard ? `*.${ascii}` : ascii;
  if (full.length > MAX_DOMAIN_LENGTH) throw bad(`a domain has at most ${MAX_DOMAIN_LENGTH} characters`);
  for (const label of ascii.split('.')) {
    if (label === '') throw bad('a domain has no empty labels');
    if (label.length > MAX_LABEL_LENGTH) throw bad(`a label has at most ${MAX_LABEL_LENGTH} characters`);
    if (!/^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$/.test(label))
      throw bad(`the label '${label}' must be letters, digits and hyphens, not starting or ending with a hyphen`);
  }
  return full;
}

/** An address (already checked by isIP) as an unsigned integer: 32 bits for IPv4, 128 for IPv6. */
function addressValue(address: string, family: 4 | 6 | number): bigint {
  if (family === 4) return address.split('.').reduce((v, octet) => (v << 8n) | BigInt(Number(octet)), 0n);
  // The URL parser writes IPv6 in one canonical form, an embedded IPv4 tail as hex groups.
  const canonical = new URL(`http://[${address}]/`).hostname.slice(1, -1);
  const [head, tail] = canonical.includes('::') ? canonical.split('::') : [canonical, undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return groups.reduce((v, g) => (v << 16n) | BigInt(parseInt(g, 16)), 0n);
}

/** An address value back to text: dotted IPv4, or IPv6 in its canonical (RFC 5952) form. */
function formatAddress(value: bigint, family: 4 | 6 | number): string {
  if (family === 4) return [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 255n)).join('.');
  const groups = Array.from({ length: 8 }, (_, i) => ((value >> BigInt(112 - 16 * i)) & 0xffffn).toString(16));
  return new URL(`http://[${groups.join(':')}]/`).hostname.slice(1, -1);
}

/**
 * A target as an entry's canonical text: an address block of one address without its prefix
 * length, an IPv6 host in brackets when a port follows, a one-port range as one port.
 *
 * @example
 * formatEgressTarget({ host: '2001:db8::1/128', ports: [443, 443] }); // '[2001:db8::1]:443'
 */
export function formatEgressTarget(t: EgressTarget): string {
  const v6 = t.host.includes(':');
  const single = (v6 && t.host.endsWith('/128')) || (!v6 && t.host.endsWith('/32') && isIP(t.host.slice(0, -3)) === 4);
  const host = single ? t.host.slice(0, t.host.lastIndexOf('/')) : t.host;
  if (!t.ports) return host;
  const [lo, hi] = t.ports;
  const port = lo === hi ? String(lo) : `${lo}-${hi}`;
  return `${v6 ? `[${host}]` : host}:${port}${t.protocol ? `/${t.protocol}` : ''}`;
}

function dedupe(list: string[]): string[] {
  return [...new Set(list)];
}

/** An entry for an error message: control characters shown as `?` so the message stays one readable line. */
function printable(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\x00-\x1f\x7f]/g, '?');
}

/**
 * The runtime form of a (normalized) policy: sbx's own endpoints, which every box reaches
 * whatever its policy (the box's SBX_API_URL and SBX_GRPC_ADDR, at each address they resolve to),
 * as one address and TCP port each.
 *
 * @example
 * compileEgress({ egress: { allow: ['example.com'] } }, [{ address: '10.0.0.2', port: 8080 }]);
 * // { mode: 'allowlist', allow: [{ host: 'example.com' }], deny: [],
 * //   endpoints: [{ host: '10.0.0.2/32', ports: [8080, 8080], protocol: 'tcp' }] }
 */
export function compileEgress(policy: NetworkPolicy, endpoints: HostEndpoint[]): EgressSpec {
  const seen = new Set<string>();
  const ends: EgressTarget[] = [];
  for (const { address, port } of endpoints) {
    const family = isIP(address);
    if (family === 0) continue;
    const host = family === 4 ? `${formatAddress(addressValue(address, 4), 4)}/32` : `${formatAddress(addressValue(address, 6), 6)}/128`;
    if (seen.has(`${host} ${port}`)) continue;
    seen.add(`${host} ${port}`);
    ends.push({ host, ports: [port, port], protocol: 'tcp' });
  }
  const egress = policy.egress;
  const targets = (list: string[] | undefined, key: string) => (list ?? []).map((e, i) => parseEgressEntry(e, `networkPolicy.egress.${key}[${i}]`));
  if (egress === 'all' || egress === 'none') return { mode: egress, allow: [], deny: [], endpoints: ends };
  const mode = egress.allow === undefined ? 'denylist' : 'allowlist';
  return { mode, allow: targets(egress.allow, 'allow'), deny: targets(egress.deny, 'deny'), endpoints: ends };
}

/**
 * A runtime spec back in the user's words (its endpoints are sbx's, not the user's): what box
 * info shows. `describeEgress(compileEgress(p, e))` equals `normalizeNetworkPolicy(p)`.
 */
export function describeEgress(spec: EgressSpec): NetworkPolicy {
  const text = (list: EgressTarget[]) => dedupe(list.map(formatEgressTarget));
  if (spec.mode === 'all' || spec.mode === 'none') return { egress: spec.mode };
  const deny = text(spec.deny);
  if (spec.mode === 'denylist') return { egress: { deny } };
  const allow = text(spec.allow);
  return { egress: deny.length > 0 ? { allow, deny } : { allow } };
}

/** e2b's `network` egress options (Sandbox.create, sandbox.updateNetwork, sandbox info). */
export interface E2bNetwork {
  allowInternetAccess?: boolean;
  allowOut?: string[];
  denyOut?: string[];
}

/** e2b's "all traffic" entry (the SDK's ALL_TRAFFIC): denied, it turns allowOut into an allowlist. */
export const E2B_ALL_TRAFFIC = '0.0.0.0/0';
const CATCH_ALL = new Set(['0.0.0.0/0', '::/0']);

/**
 * e2b's egress options as a policy. e2b lets `allowOut` win over `denyOut` (sbx lets deny win), so
 * this translates rather than copies: a denied catch-all (`0.0.0.0/0`, or `allowInternetAccess:
 * false`) with `allowOut` is the allowlist of `allowOut` (then any other deny is moot), without it
 * `'none'`; a `denyOut` without the catch-all is a denylist, less the entries an allowOut entry
 * covers whole (an allowed block inside a denied one cannot be said in sbx's terms:
 * invalid_argument); neither is `'all'`. Entries are checked as sbx's (`field.allowOut[i]`).
 *
 * @example
 * fromE2bNetwork({ allowOut: ['pypi.org'], denyOut: ['0.0.0.0/0'] }); // { egress: { allow: ['pypi.org'] } }
 */
export function fromE2bNetwork(network: E2bNetwork, field = 'network'): NetworkPolicy {
  // '': the fields are the body's own (the network update).
  const at = (sub: string) => (field ? `${field}.${sub}` : sub);
  const allowOut = network.allowOut ?? [];
  const denyOut = network.denyOut ?? [];
  if (allowOut.length + denyOut.length > MAX_EGRESS_ENTRIES) {
    throw invalidArgument(field || 'body', `${allowOut.length + denyOut.length} entries; at most ${MAX_EGRESS_ENTRIES} (allowOut and denyOut together)`);
  }
  const allow = allowOut.map((e, i) => parseEgressEntry(e, at(`allowOut[${i}]`)));
  const deny = denyOut.map((e, i) => parseEgressEntry(e, at(`denyOut[${i}]`)));
  const catchAll = network.allowInternetAccess === false || deny.some((t) => CATCH_ALL.has(t.host) && !t.ports);
  if (catchAll) return allow.length > 0 ? { egress: { allow: dedupe(allow.map(formatEgressTarget)) } } : { egress: 'none' };
  if (deny.length === 0) return { egress: 'all' };
  const kept = deny.filter((d) => !allow.some((a) => covers(a, d)));
  allow.forEach((a, i) => {
    const inside = kept.find((d) => overlaps(a, d));
    if (inside) {
      throw invalidArgument(
        at(`allowOut[${i}]`),
        `'${allowOut[i]}' lies in the denied '${formatEgressTarget(inside)}': sbx's deny wins over allow, so deny the parts of it you mean instead, or deny 0.0.0.0/0 to make allowOut an allowlist`,
      );
    }
  });
  return { egress: { deny: dedupe(kept.map(formatEgressTarget)) } };
}

/**
 * A policy as e2b's sandbox info shows it: `'all'` is internet access with no lists, `'none'`
 * none, an allowlist `allowOut` with the catch-all denied, a denylist `denyOut`.
 *
 * @example
 * toE2bNetwork({ egress: { allow: ['pypi.org'] } }); // { allowOut: ['pypi.org'], denyOut: ['0.0.0.0/0'], allowInternetAccess: true }
 */
export function toE2bNetwork(policy: NetworkPolicy): Required<Pick<E2bNetwork, 'allowInternetAccess'>> & E2bNetwork {
  const egress = policy.egress;
  if (egress === 'all') return { allowInternetAccess: true };
  if (egress === 'none') return { denyOut: [E2B_ALL_TRAFFIC], allowInternetAccess: false };
  if (egress.allow === undefined) return { denyOut: [...(egress.deny ?? [])], allowInternetAccess: true };
  return { allowOut: [...egress.allow], denyOut: [E2B_ALL_TRAFFIC, ...(egress.deny ?? [])], allowInternetAccess: true };
}

/** Whether `outer` (an address block without ports) holds all of `inner`, ports and all. */
function covers(outer: EgressTarget, inner: EgressTarget): boolean {
  const o = rangeOf(outer.host);
  const i = rangeOf(inner.host);
  return !outer.ports && !!o && !!i && o.family === i.family && o.lo <= i.lo && i.hi <= o.hi;
}
/** Two address blocks share an address (of two CIDRs, one then holds the other). */
function overlaps(a: EgressTarget, b: EgressTarget): boolean {
  const x = rangeOf(a.host);
  const y = rangeOf(b.host);
  return !!x && !!y && x.family === y.family && x.lo <= y.hi && y.lo <= x.hi;
}

function isCidr(host: string): boolean {
  return host.includes('/');
}

function splitCidr(cidr: string): [string, number] {
  const slash = cidr.lastIndexOf('/');
  return [cidr.slice(0, slash), Number(cidr.slice(slash + 1))];
}

/**
 * A canonical CIDR as its first and last address, or undefined for a domain. Plain numbers, so
 * comparing every allowOut entry with every denyOut entry (1000 at most) costs microseconds, not a
 * BlockList per pair.
 */
function rangeOf(host: string): AddressRange | undefined {
  if (!isCidr(host)) return undefined;
  let range = ranges.get(host);
  if (range) return range;
  const [address, prefix] = splitCidr(host);
  const family = isIP(address);
  const hostBits = BigInt((family === 4 ? 32 : 128) - prefix);
  const lo = addressValue(address, family);
  range = { family, lo, hi: lo | ((1n << hostBits) - 1n) };
  // Bounded: a request brings at most MAX_EGRESS_ENTRIES blocks; earlier requests' go first.
  if (ranges.size >= 4 * MAX_EGRESS_ENTRIES) ranges.clear();
  ranges.set(host, range);
  return range;
}
interface AddressRange {
  family: number;
  lo: bigint;
  hi: bigint;
}
const ranges = new Map<string, AddressRange>();
