// The runtime form of an egress policy as a node takes it from its Manager, entry by entry: what
// passes, what is refused with the field named, and the bound on its size.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import { isEgressCidr, isEgressDomain, validateEgressGrammar } from './egress-spec.js';
import { MAX_EGRESS_ENTRIES, validateSpec } from './spec.js';
import type { EgressSpec } from './types.js';

export const SAMPLE_EGRESS: EgressSpec = {
  mode: 'allowlist',
  allow: [
    { host: 'ok.test' },
    { host: '*.example.com', ports: [443, 443], protocol: 'tcp' },
    { host: 'xn--bcher-kva.example' },
    { host: '198.18.0.0/24' },
    { host: '2001:db8:5b::/64', ports: [7, 7], protocol: 'udp' },
    { host: '0.0.0.0/0', ports: [8000, 8080] },
    { host: '::ffff:198.18.0.1/128' },
  ],
  deny: [{ host: '198.18.0.2/32' }, { host: 'bad.test' }],
  endpoints: [{ host: '10.0.0.1/32', ports: [8080, 8080], protocol: 'tcp' }],
};

/** Fails unless `value` is refused as invalid_argument naming `field`. */
function refused(value: unknown, field: string): void {
  assert.throws(
    () => validateEgressGrammar(value),
    (e: unknown) => {
      assert.ok(isSbxError(e, 'invalid_argument'), String(e));
      assert.equal(e.details?.['field'], field, e.message);
      return true;
    },
  );
}

const withAllow = (...allow: unknown[]) => ({ ...SAMPLE_EGRESS, allow });

describe('EgressSpec shape', () => {
  test('a well-formed spec passes unchanged (and the spec schema takes it as ContainerSpec.egress)', () => {
    assert.deepEqual(validateEgressGrammar(SAMPLE_EGRESS), SAMPLE_EGRESS);
    for (const mode of ['all', 'none', 'denylist'] as const) validateEgressGrammar({ mode, allow: [], deny: [], endpoints: [] });
    assert.deepEqual(validateSpec({ image: 'sbx-base:latest', egress: SAMPLE_EGRESS }).egress, SAMPLE_EGRESS);
  });

  test('address blocks: v4 and v6, prefix in range, no host bits set; no zone, no bare address', () => {
    for (const ok of ['10.0.0.0/8', '198.18.0.1/32', '0.0.0.0/0', '2001:db8::/32', '::/0', 'fe80::1/128', '2001:db8::100/120', '::ffff:1.2.3.0/120']) {
      assert.ok(isEgressCidr(ok), ok);
    }
    for (const bad of [
      '198.18.0.1/24',
      '10.0.0.0/33',
      '2001:db8::1/32',
      '::1/129',
      '01.2.3.4/32',
      'fe80::1%eth0/128',
      '198.18.0.1',
      '198.18.0.0/',
      '/8',
      'a/8',
    ]) {
      assert.ok(!isEgressCidr(bad), bad);
    }
  });

  test('domains: lowercase ASCII labels, `*.` only as the whole first label, 253 characters at most, never an address', () => {
    for (const ok of ['example.com', '*.example.com', 'localhost', 'a-b.c0', `${'a'.repeat(63)}.com`, 'xn--bcher-kva.example'])
      assert.ok(isEgressDomain(ok), ok);
    const long = `${'a'.repeat(60)}.`.repeat(4) + 'a'.repeat(10);
    for (const bad of [
      'Example.com',
      'a.*.com',
      '*',
      '*.',
      'example.com.',
      '.example.com',
      'a..b',
      '-a.com',
      'a-.com',
      `${'a'.repeat(64)}.com`,
      long,
      '198.18.0.1',
      'a.123',
      'bücher.example',
      'a_b.com',
      '',
    ]) {
      assert.ok(!isEgressDomain(bad), bad);
    }
  });

  test('every bad field is invalid_argument naming it', () => {
    refused(withAllow({ host: '198.18.0.1/24' }), 'egress.allow.0.host');
    refused(withAllow({ host: 'ok.test' }, { host: 'Example.com' }), 'egress.allow.1.host');
    refused(withAllow({ host: 'ok.test', ports: [443, 80] }), 'egress.allow.0.ports');
    refused(withAllow({ host: 'ok.test', ports: [0, 80] }), 'egress.allow.0.ports.0');
    refused(withAllow({ host: 'ok.test', ports: [80] }), 'egress.allow.0.ports');
    refused(withAllow({ host: 'ok.test', protocol: 'tcp' }), 'egress.allow.0.protocol');
    refused(withAllow({ host: 'ok.test', ports: [53, 53], protocol: 'icmp' }), 'egress.allow.0.protocol');
    refused(withAllow({ host: 'ok.test', via: 'proxy' }), 'egress.allow.0');
    refused({ ...SAMPLE_EGRESS, deny: [{ host: 42 }] }, 'egress.deny.0.host');
    refused({ ...SAMPLE_EGRESS, mode: 'open' }, 'egress.mode');
    refused({ ...SAMPLE_EGRESS, endpoints: [{ host: 'api.example.com', ports: [443, 443] }] }, 'egress.endpoints.0.host');
    refused({ ...SAMPLE_EGRESS, endpoints: [{ host: '10.0.0.1/32' }] }, 'egress.endpoints.0.ports');
    refused({ mode: 'all', allow: [], endpoints: [] }, 'egress.deny');
    refused({ ...SAMPLE_EGRESS, rules: [] }, 'egress');
    refused('all', 'egress');
  });

  test(`bounded: ${MAX_EGRESS_ENTRIES} entries of allow and deny together; 100,000 are refused at once`, () => {
    const entries = (n: number) => Array.from({ length: n }, (_, i) => ({ host: `h${i}.test` }));
    validateEgressGrammar({ mode: 'allowlist', allow: entries(600), deny: entries(400), endpoints: [] });
    refused({ mode: 'allowlist', allow: entries(600), deny: entries(401), endpoints: [] }, 'egress.allow');
    refused({ mode: 'allowlist', allow: entries(MAX_EGRESS_ENTRIES + 1), deny: [], endpoints: [] }, 'egress.allow');
    refused({ ...SAMPLE_EGRESS, endpoints: Array.from({ length: 65 }, () => SAMPLE_EGRESS.endpoints[0]) }, 'egress.endpoints');
    // Refused by its length before any entry is parsed: every entry here is bad too, yet the length is what is named.
    refused({ mode: 'allowlist', allow: Array.from({ length: 100_000 }, () => ({ host: 'NOT A HOST' })), deny: [], endpoints: [] }, 'egress.allow');
  });
});
