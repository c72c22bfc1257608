/**
 * The e2b control plane's request bodies: NewSandbox (POST /v2/sandboxes, POST /sandboxes), the
 * network update (PUT /sandboxes/:id/network), the timeout of connect, resume and setTimeout. What
 * sbx can honour becomes CreateOptions (`autoPause`: the timeout pauses the box; `allowOut`,
 * `denyOut` and `allow_internet_access`: the egress policy); what it cannot (volumes, egress
 * transform rules, an egress proxy, DNS servers) is refused with a 400 naming the field, so code
 * that relies on it fails loudly instead of running without it. Fields
 * that change nothing here (`secure`, `autoResume`, `autoPauseMemory`, `mcp`: the SDK itself starts
 * the gateway of its `mcp-gateway` template) and fields this version
 * does not know are ignored, as the SDKs send different sets.
 */
import { z } from 'zod';
import { invalidArgument } from '../../../errors.js';
import { ENV_NAME, MAX_LABEL_VALUE, MAX_LABELS, plainText } from '../../../runtime/bounds.js';
import { parseOrThrow } from '../../../util/validation.js';
import type { Manager } from '../../../sandbox/manager.js';
import { fromE2bNetwork } from '../../../sandbox/egress-policy.js';
import type { NetworkPolicy } from '../../../sandbox/egress-policy.js';

/** e2b's default sandbox lifetime when a create names none (the SDKs' 300 000 ms). */
export const DEFAULT_TIMEOUT_SECONDS = 300;
/** e2b's own ceiling (24 h on its Pro tier): longer asks are refused as e2b refuses them. */
export const MAX_TIMEOUT_SECONDS = 86_400;

/** Labels that carry the e2b view of a box: its template, and each metadata key under a prefix. */
export const TEMPLATE_LABEL = 'e2b.template';
/** Every e2b label starts so (a fork copies them all). */
export const E2B_LABEL_PREFIX = 'e2b.';
/**
 * `false` on a sandbox made with `allow_internet_access: false` by an sbx before egress policies,
 * which gave it network `none` (its forks keep that). Sandboxes made since have egress `'none'`
 * instead, and no label: their forks take the policy itself.
 */
export const INTERNET_LABEL = 'e2b.internet';
export const METADATA_LABEL_PREFIX = 'e2b.meta.';
/** sbx label keys are 1-64 of [A-Za-z0-9._/-] starting with a letter or digit; the prefix takes its share. */
const METADATA_KEY = new RegExp(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,${63 - METADATA_LABEL_PREFIX.length}}$`);

export const timeoutSeconds = z
  .number({ error: 'must be a number of seconds' })
  .int('must be a whole number of seconds')
  .min(1, 'must be at least 1 second')
  .max(MAX_TIMEOUT_SECONDS, `cannot be greater than ${MAX_TIMEOUT_SECONDS / 3600} hours`);

const stringMap = z.record(z.string(), z.string({ error: 'values must be strings' }));

const NewSandboxSchema = z.object({
  templateID: z.string({ error: 'is required (a template name)' }).min(1, 'must not be empty').max(256),
  timeout: timeoutSeconds.optional(),
  metadata: stringMap.nullish(),
  envVars: stringMap.nullish(),
  secure: z.boolean().nullish(),
  allow_internet_access: z.boolean().nullish(),
  autoPause: z.boolean().nullish(),
  autoPauseMemory: z.boolean().nullish(),
  autoResume: z.object({ enabled: z.boolean() }).nullish(),
  mcp: z.record(z.string(), z.unknown()).nullish(),
  network: z.record(z.string(), z.unknown()).nullish(),
  volumeMounts: z.array(z.unknown()).nullish(),
  iam: z.record(z.string(), z.unknown()).nullish(),
});

export interface NewSandbox {
  templateID: string;
  timeoutSeconds: number;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  /** `allow_internet_access`, `network.allowOut` and `network.denyOut` as sbx's egress policy (fromE2bNetwork). */
  networkPolicy: NetworkPolicy;
  /**
   * The timeout pauses the sandbox rather than killing it (`autoPause`, the SDKs'
   * `lifecycle.onTimeout: 'pause'`). `autoResume` needs nothing more: any use of a paused box
   * resumes it in sbx.
   */
  autoPause: boolean;
  /** `network.allowPublicTraffic`: false asks for a traffic access token on its ports; unset is e2b's default (public). */
  allowPublicTraffic: boolean | undefined;
}

/** Network fields sbx serves: allowPublicTraffic (traffic.ts), allowOut and denyOut (the egress policy). */
const NETWORK_KEPT = new Set(['allowPublicTraffic', 'allowOut', 'denyOut']);

/** Why sbx refuses the network fields it does not serve. */
const NETWORK_REFUSED: Record<string, string> = {
  rules: 'sbx does not rewrite egress requests (e2b transform rules); allowOut and denyOut are served',
  egressProxy: 'sbx does not tunnel egress through a proxy; allowOut and denyOut are served',
  dnsServers: "sbx boxes resolve through sbx's own DNS filter; allowOut and denyOut are served",
};

const entryList = z.array(z.string({ error: 'entries must be strings' }), { error: 'must be a list of CIDRs, addresses or domains' }).nullish();
const EgressFieldsSchema = z.object({ allowOut: entryList, denyOut: entryList });

/**
 * e2b's egress fields (`allowOut`, `denyOut`, `allow_internet_access`) as sbx's policy; any other
 * field of `network` that asks for something (not null, not empty) and is not in `kept` is a 400
 * naming it. `field`: where the fields sit in the body (`network` in a create, '' in an update: the body's own).
 */
function egressPolicyOf(network: Record<string, unknown>, allowInternetAccess: boolean | null | undefined, kept: Set<string>, field: string): NetworkPolicy {
  for (const [k, v] of Object.entries(network)) {
    if (kept.has(k) || v === undefined || v === null) continue;
    if (k === 'rules' && typeof v === 'object' && Object.keys(v).length === 0) continue;
    throw invalidArgument(field ? `${field}.${k}` : k, NETWORK_REFUSED[k] ?? `sbx does not serve network.${k}`);
  }
  const e = parseOrThrow(EgressFieldsSchema, network, field || 'body', field || undefined);
  return fromE2bNetwork(
    {
      ...(allowInternetAccess === false ? { allowInternetAccess: false } : {}),
      ...(e.allowOut ? { allowOut: e.allowOut } : {}),
      ...(e.denyOut ? { denyOut: e.denyOut } : {}),
    },
    field,
  );
}

export function parseNewSandbox(body: unknown): NewSandbox {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw invalidArgument('body', 'must be a JSON object (NewSandbox)');
  const b = parseOrThrow(NewSandboxSchema, body, 'body');
  if (b.volumeMounts && b.volumeMounts.length > 0) throw invalidArgument('volumeMounts', 'sbx does not serve e2b volumes');
  if (b.iam && Object.keys(b.iam).length > 0) throw invalidArgument('iam', 'sbx does not serve e2b IAM tokens');
  const networkPolicy = egressPolicyOf(b.network ?? {}, b.allow_internet_access, NETWORK_KEPT, 'network');
  return {
    templateID: b.templateID,
    timeoutSeconds: b.timeout ?? DEFAULT_TIMEOUT_SECONDS,
    metadata: checkMetadata(b.metadata ?? {}),
    envVars: checkEnvVars(b.envVars ?? {}),
    networkPolicy,
    autoPause: b.autoPause === true,
    allowPublicTraffic: typeof b.network?.['allowPublicTraffic'] === 'boolean' ? b.network['allowPublicTraffic'] : undefined,
  };
}

/** Metadata keys and values that sbx labels can carry, or a 400 naming the key. */
function checkMetadata(metadata: Record<string, string>): Record<string, string> {
  const keys = Object.keys(metadata);
  if (keys.length > MAX_LABELS - 1) throw invalidArgument('metadata', `at most ${MAX_LABELS - 1} keys`);
  const value = plainText(MAX_LABEL_VALUE);
  for (const k of keys) {
    if (!METADATA_KEY.test(k)) {
      throw invalidArgument(`metadata.${k}`, `keys must be 1-${64 - METADATA_LABEL_PREFIX.length} of [A-Za-z0-9._/-], starting with a letter or digit`);
    }
    parseOrThrow(value, metadata[k], 'metadata', `metadata.${k}`);
  }
  return metadata;
}

function checkEnvVars(env: Record<string, string>): Record<string, string> {
  for (const k of Object.keys(env)) {
    if (!ENV_NAME.test(k)) throw invalidArgument(`envVars.${k}`, 'names must match [A-Za-z_][A-Za-z0-9_]*');
    if (k.startsWith('SBX_')) throw invalidArgument(`envVars.${k}`, 'SBX_* variables are set by sbx');
  }
  return env;
}

/** The sandbox's metadata, read back from its labels. */
export function metadataOf(labels: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(labels)) if (k.startsWith(METADATA_LABEL_PREFIX)) out[k.slice(METADATA_LABEL_PREFIX.length)] = v;
  return out;
}

/** The labels that carry a new sandbox's template and metadata. */
export function labelsFor(s: NewSandbox): Record<string, string> {
  const labels: Record<string, string> = { [TEMPLATE_LABEL]: s.templateID };
  for (const [k, v] of Object.entries(s.metadata)) labels[METADATA_LABEL_PREFIX + k] = v;
  return labels;
}

/** The fields of e2b's SandboxNetworkUpdateConfig sbx serves (the rest, when they ask for something, are refused). */
const UPDATE_KEPT = new Set(['allowOut', 'denyOut', 'allow_internet_access']);

/**
 * The body of PUT /sandboxes/:id/network (`sandbox.updateNetwork`): the whole egress config, which
 * replaces the old one (a field left out is cleared: nothing at all is `'all'`), as sbx's policy.
 * `rules`, `egressProxy` and `dnsServers` are a 400 naming them.
 */
export function parseNetworkUpdate(body: unknown): NetworkPolicy {
  const b = body ?? {};
  if (typeof b !== 'object' || Array.isArray(b)) throw invalidArgument('body', 'must be a JSON object (SandboxNetworkUpdateConfig)');
  const access = (b as Record<string, unknown>)['allow_internet_access'];
  if (access !== undefined && access !== null && typeof access !== 'boolean') throw invalidArgument('allow_internet_access', 'must be a boolean');
  return egressPolicyOf(b as Record<string, unknown>, access as boolean | null | undefined, UPDATE_KEPT, '');
}

const TimeoutBodySchema = z.object({ timeout: timeoutSeconds.optional() });

/** `{timeout}` of setTimeout (required), connect and resume (optional: e2b's default 300 s). */
export function parseTimeout(body: unknown, required: boolean, defaultSeconds = DEFAULT_TIMEOUT_SECONDS): number {
  const b = parseOrThrow(TimeoutBodySchema, body ?? {}, 'body');
  if (b.timeout === undefined && required) throw invalidArgument('timeout', 'is required (seconds)');
  return b.timeout ?? defaultSeconds;
}

const SnapshotBodySchema = z.object({ name: z.string().nullish(), memory: z.boolean().nullish() });

/**
 * `{name?, memory?}` of POST /sandboxes/:id/snapshots (the library checks the name). sbx saves
 * the filesystem only: an explicit `memory: true` (the Python SDK's `mode="full"`) is refused
 * rather than answered with less than it asks; unset (e2b's default, what the SDKs send) is served so.
 */
export function parseSnapshotBody(body: unknown): { name?: string } {
  const b = parseOrThrow(SnapshotBodySchema, body ?? {}, 'body');
  if (b.memory === true) throw invalidArgument('memory', "sbx snapshots save the filesystem only (mode 'filesystem'): processes and memory are not kept");
  return b.name ? { name: b.name } : {};
}

/**
 * The security profile of a new e2b sandbox (a create or a fork): `sudo`, since E2B's base gives
 * its user passwordless sudo, which no-new-privileges would defeat (sudo refuses to run); none
 * (the pool's own) where the operator made the default pool strict.
 */
export async function sandboxSecurity(manager: Manager): Promise<{ security?: 'sudo' }> {
  return (await manager.pools())[0]?.security === 'strict' ? {} : { security: 'sudo' };
}
