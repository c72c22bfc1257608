import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import {
  MAX_EGRESS_ENTRIES,
  compileEgress,
  describeEgress,
  formatEgressTarget,
  fromE2bNetwork,
  normalizeNetworkPolicy,
  parseEgressEntry,
  toE2bNetwork,
} from './egress-policy.js';
import type { NetworkPolicy } from './egress-policy.js';
import { egressEndpoints } from './host-endpoints.js';

function rejects(fn: () => unknown, field: string, ...words: string[]): void {
  assert.throws(fn, (e) => {
    assert.ok(isSbxError(e, 'invalid_argument'), `expected invalid_argument, got ${String(e)}`);
    assert.equal(e.details?.['field'], field);
    for (const w of words) assert.ok(e.message.includes(w), `'${e.message}' should name '${w}'`);
    return true;
  });
}

describe('egress entries: the grammar', () => {
  const cases: Array<[string, object, string]> = [
    // entry, target, canonical text
    ['example.com', { host: 'example.com' }, 'example.com'],
    ['Example.COM.', { host: 'example.com' }, 'example.com'],
    ['*.example.com', { host: '*.example.com' }, '*.example.com'],
    ['*.Bücher.de', { host: '*.xn--bcher-kva.de' }, '*.xn--bcher-kva.de'],
    ['bücher.de:443', { host: 'xn--bcher-kva.de', ports: [443, 443] }, 'xn--bcher-kva.de:443'],
    ['localhost', { host: 'localhost' }, 'localhost'],
    ['a-b.c0', { host: 'a-b.c0' }, 'a-b.c0'],
    ['example.com:80', { host: 'example.com', ports: [80, 80] }, 'example.com:80'],
    ['example.com:80-80', { host: 'example.com', ports: [80, 80] }, 'example.com:80'],
    ['example.com:8000-8080/udp', { host: 'example.com', ports: [8000, 8080], protocol: 'udp' }, 'example.com:8000-8080/udp'],
    ['example.com:1/tcp', { host: 'example.com', ports: [1, 1], protocol: 'tcp' }, 'example.com:1/tcp'],
    ['example.com:65535', { host: 'example.com', ports: [65535, 65535] }, 'example.com:65535'],
    ['198.18.0.1', { host: '198.18.0.1/32' }, '198.18.0.1'],
    ['198.18.0.1/32', { host: '198.18.0.1/32' }, '198.18.0.1'],
    ['198.18.0.0/15', { host: '198.18.0.0/15' }, '198.18.0.0/15'],
    ['0.0.0.0/0', { host: '0.0.0.0/0' }, '0.0.0.0/0'],
    ['198.18.0.1:443', { host: '198.18.0.1/32', ports: [443, 443] }, '198.18.0.1:443'],
    ['10.0.0.0/8:53/udp', { host: '10.0.0.0/8', ports: [53, 53], protocol: 'udp' }, '10.0.0.0/8:53/udp'],
    ['2001:DB8:0:0::1', { host: '2001:db8::1/128' }, '2001:db8::1'],
    ['[2001:db8::1]', { host: '2001:db8::1/128' }, '2001:db8::1'],
    ['2001:db8::/32', { host: '2001:db8::/32' }, '2001:db8::/32'],
    ['::/0', { host: '::/0' }, '::/0'],
    // Eight groups: an address, not an address and a port (that would be [2001:db8::1]:443).
    ['2001:db8::1:443', { host: '2001:db8::1:443/128' }, '2001:db8::1:443'],
    ['::ffff:1.2.3.4', { host: '::ffff:102:304/128' }, '::ffff:102:304'],
    ['[2001:db8::1]:443', { host: '2001:db8::1/128', ports: [443, 443] }, '[2001:db8::1]:443'],
    ['[2001:db8::/32]:443/udp', { host: '2001:db8::/32', ports: [443, 443], protocol: 'udp' }, '[2001:db8::/32]:443/udp'],
    ['[fd00:ec2::254]:80-81', { host: 'fd00:ec2::254/128', ports: [80, 81] }, '[fd00:ec2::254]:80-81'],
  ];
  for (const [entry, target, text] of cases) {
    test(`'${entry}' is ${text}`, () => {
      assert.deepEqual(parseEgressEntry(entry, 'f'), target);
      assert.equal(formatEgressTarget(parseEgressEntry(entry, 'f')), text);
      assert.deepEqual(parseEgressEntry(text, 'f'), target, 'the canonical text parses to the same target');
    });
  }
});

describe('egress entries: every error names the field and the entry', () => {
  const errors: Array<[string, string]> = [
    // entry, words the message must hold
    ['', 'empty'],
    ['x'.repeat(301), 'longer than 300'],
    ['*', "egress 'all'"],
    ['foo.*.com', "'*' may only be the whole first label"],
    ['*example.com', "'*' may only"],
    ['**.example.com', "'*' may only"],
    ['exa_mple.com', 'letters, digits'],
    ['a b.com', 'letters, digits'],
    ['example.com/x', 'before the /'],
    ['ex%41.com', 'zone'],
    ['-a.com', "label '-a'"],
    ['a-.com', "label 'a-'"],
    ['a..com', 'no empty labels'],
    [`${'a'.repeat(64)}.com`, 'at most 63'],
    [`${'abcdefghi.'.repeat(25)}abcd.com`, 'at most 253'],
    ['1.2.3', 'end in a number'],
    ['256.1.1.1', 'end in a number'],
    ['01.2.3.4', 'end in a number'],
    ['example.123', 'end in a number'],
    ['198.18.0.1/33', 'prefix length must be 0-32'],
    ['2001:db8::/129', 'prefix length must be 0-128'],
    ['198.18.0.1/15', 'host bits are set; the network is 198.18.0.0/15'],
    ['2001:db8::1/32', 'the network is 2001:db8::/32'],
    ['198.18.0.0/x', 'prefix length'],
    ['example.com:', 'a port must follow'],
    ['example.com:0', 'ports are 1-65535'],
    ['example.com:65536', 'ports are 1-65535'],
    ['example.com:99999999', 'a port is 1-65535'],
    ['example.com:90-80', 'runs backwards; write 80-90'],
    ['example.com:80/icmp', "'tcp' or 'udp'"],
    ['example.com:http', 'a port is'],
    ['example.com/tcp', 'only after a port'],
    ['198.18.0.1/tcp', 'only after a port'],
    ['2001:db8::1/udp', 'only after a port'],
    ['[2001:db8::1', "without its ']'"],
    ['[2001:db8::1]443', "only ':<port>'"],
    ['[2001:db8::1]:', 'a port must follow'],
    ['[198.18.0.1]:80', 'only IPv6'],
    ['[example.com]:80', 'brackets hold an IPv6'],
    ['fe80::1%eth0', 'zone'],
    ['a:b:c', 'letters, digits'],
  ];
  for (const [entry, words] of errors) {
    test(`'${entry.length > 40 ? `${entry.slice(0, 40)}…` : entry}' is refused: ${words}`, () => {
      rejects(() => parseEgressEntry(entry, 'networkPolicy.egress.allow[3]'), 'networkPolicy.egress.allow[3]', words);
    });
  }

  test('the message quotes the entry', () => {
    rejects(() => parseEgressEntry('exa_mple.com:80', 'f'), 'f', "'exa_mple.com:80'");
  });
});

describe('normalizeNetworkPolicy', () => {
  test("'all' and 'none' stay as they are", () => {
    assert.deepEqual(normalizeNetworkPolicy({ egress: 'all' }), { egress: 'all' });
    assert.deepEqual(normalizeNetworkPolicy({ egress: 'none' }), { egress: 'none' });
  });

  test('an allowlist: canonical entries, repeats dropped (first kept), no empty deny', () => {
    assert.deepEqual(normalizeNetworkPolicy({ egress: { allow: ['B.com', '198.18.0.1/32', 'b.com', '198.18.0.1'], deny: [] } }), {
      egress: { allow: ['b.com', '198.18.0.1'] },
    });
    assert.deepEqual(normalizeNetworkPolicy({ egress: { allow: [], deny: ['x.com'] } }), { egress: { allow: [], deny: ['x.com'] } });
  });

  test('a denylist keeps its deny; {} is a denylist of nothing', () => {
    assert.deepEqual(normalizeNetworkPolicy({ egress: { deny: ['10.0.0.0/8', '10.0.0.0/8:22'] } }), { egress: { deny: ['10.0.0.0/8', '10.0.0.0/8:22'] } });
    assert.deepEqual(normalizeNetworkPolicy({ egress: {} }), { egress: { deny: [] } });
  });

  test('a bad entry names its list and index, under the field given', () => {
    rejects(() => normalizeNetworkPolicy({ egress: { allow: ['a.com', 'b.com', 'c.com', 'bad_name'] } }), 'networkPolicy.egress.allow[3]', 'bad_name');
    rejects(
      () => normalizeNetworkPolicy({ egress: { allow: [], deny: ['ok.com', '1.2.3.4/8'] } }, 'policy'),
      'policy.egress.deny[1]',
      '1.2.3.4/8',
      '1.0.0.0/8',
    );
  });

  test(`at most ${MAX_EGRESS_ENTRIES} entries, allow and deny together; the limit is checked before any entry`, () => {
    const many = Array.from({ length: 100_000 }, (_, i) => `h${i}.example.com`);
    rejects(() => normalizeNetworkPolicy({ egress: { allow: many } }), 'networkPolicy.egress', '100000 entries', `at most ${MAX_EGRESS_ENTRIES}`);
    const half = Array.from({ length: 501 }, (_, i) => `h${i}.test`);
    rejects(() => normalizeNetworkPolicy({ egress: { allow: half, deny: half } }), 'networkPolicy.egress', '1002 entries');
    const bad = Array.from({ length: 1001 }, () => 'bad_name');
    rejects(() => normalizeNetworkPolicy({ egress: { deny: bad } }), 'networkPolicy.egress', '1001 entries');
    assert.equal((normalizeNetworkPolicy({ egress: { allow: half.slice(0, 500), deny: half.slice(0, 500) } }).egress as { allow: string[] }).allow.length, 500);
  });

  test('shapes that are no policy are invalid_argument naming the field', () => {
    rejects(() => normalizeNetworkPolicy(undefined), 'networkPolicy');
    rejects(() => normalizeNetworkPolicy('all'), 'networkPolicy', 'must be an object');
    rejects(() => normalizeNetworkPolicy([]), 'networkPolicy');
    rejects(() => normalizeNetworkPolicy({}), 'networkPolicy.egress');
    rejects(() => normalizeNetworkPolicy({ egress: 'some' }), 'networkPolicy.egress', "'all', 'none'");
    rejects(() => normalizeNetworkPolicy({ egress: 'all', ingress: 'all' }), 'networkPolicy', 'ingress');
    rejects(() => normalizeNetworkPolicy({ egress: { allow: ['a.com'], block: [] } }), 'networkPolicy.egress', 'block');
    rejects(() => normalizeNetworkPolicy({ egress: { allow: 'a.com' } }), 'networkPolicy.egress');
    rejects(() => normalizeNetworkPolicy({ egress: { allow: ['a.com', 7] } }), 'networkPolicy.egress');
  });
});

describe('compileEgress and describeEgress', () => {
  const endpoints = [
    { address: '10.0.0.2', port: 8080 },
    { address: '203.0.113.7', port: 443 },
    { address: '10.0.0.2', port: 8080 },
    { address: '2001:DB8::7', port: 50051 },
  ];
  const compiledEndpoints = [
    { host: '10.0.0.2/32', ports: [8080, 8080], protocol: 'tcp' },
    { host: '203.0.113.7/32', ports: [443, 443], protocol: 'tcp' },
    { host: '2001:db8::7/128', ports: [50051, 50051], protocol: 'tcp' },
  ];

  test('each mode, with the endpoints (off-host ones too) as one address and TCP port each, without repeats', () => {
    assert.deepEqual(compileEgress({ egress: 'all' }, endpoints), { mode: 'all', allow: [], deny: [], endpoints: compiledEndpoints });
    assert.deepEqual(compileEgress({ egress: 'none' }, []), { mode: 'none', allow: [], deny: [], endpoints: [] });
    assert.deepEqual(compileEgress({ egress: { allow: ['a.com:443', '198.18.0.0/15'], deny: ['198.18.0.9'] } }, endpoints), {
      mode: 'allowlist',
      allow: [{ host: 'a.com', ports: [443, 443] }, { host: '198.18.0.0/15' }],
      deny: [{ host: '198.18.0.9/32' }],
      endpoints: compiledEndpoints,
    });
    assert.deepEqual(compileEgress({ egress: { allow: [] } }, []), { mode: 'allowlist', allow: [], deny: [], endpoints: [] });
    assert.deepEqual(compileEgress({ egress: { deny: ['*.b.com'] } }, []), { mode: 'denylist', allow: [], deny: [{ host: '*.b.com' }], endpoints: [] });
  });

  const policies: unknown[] = [
    { egress: 'all' },
    { egress: 'none' },
    { egress: { allow: [] } },
    { egress: {} },
    { egress: { allow: ['Example.com', '*.b.example.com:443/tcp', '198.18.0.1/32', '[2001:db8::1]:53/udp', '2001:db8::/32', '10.0.0.0/8:1-1024'] } },
    { egress: { allow: ['a.com'], deny: ['a.com:22', '198.18.0.0/24'] } },
    { egress: { deny: ['169.254.169.254', 'bücher.de', '[2001:db8::2]:80-80'] } },
  ];
  for (const p of policies) {
    test(`round trip: ${JSON.stringify(p)}`, () => {
      const normal = normalizeNetworkPolicy(p);
      assert.deepEqual(describeEgress(compileEgress(normal, endpoints)), normal);
      assert.deepEqual(normalizeNetworkPolicy(describeEgress(compileEgress(normal, []))), normal, 'the description is itself canonical');
    });
  }
});

describe('e2b network options', () => {
  const cases: Array<[string, object, NetworkPolicy]> = [
    ['nothing: all', {}, { egress: 'all' }],
    ['allowInternetAccess true: all', { allowInternetAccess: true }, { egress: 'all' }],
    ['allowInternetAccess false: none (not network none)', { allowInternetAccess: false }, { egress: 'none' }],
    ['allowInternetAccess false with allowOut: the allowlist', { allowInternetAccess: false, allowOut: ['1.1.1.1'] }, { egress: { allow: ['1.1.1.1'] } }],
    ['denyOut 0.0.0.0/0 alone: none', { denyOut: ['0.0.0.0/0'] }, { egress: 'none' }],
    ['::/0 is a catch-all too', { denyOut: ['::/0'], allowOut: ['a.com'] }, { egress: { allow: ['a.com'] } }],
    [
      'the catch-all with allowOut: the allowlist; other denies are moot (allowOut wins in e2b)',
      { allowOut: ['api.example.com', '8.8.8.0/24', '8.8.8.8'], denyOut: ['0.0.0.0/0', '8.8.8.8'] },
      { egress: { allow: ['api.example.com', '8.8.8.0/24', '8.8.8.8'] } },
    ],
    ['allowOut alone restricts nothing: all', { allowOut: ['1.1.1.1'] }, { egress: 'all' }],
    ['denyOut without the catch-all: a denylist', { denyOut: ['10.0.0.0/8', '1.1.1.1'] }, { egress: { deny: ['10.0.0.0/8', '1.1.1.1'] } }],
    [
      'a deny an allowOut covers whole is dropped (allowOut wins)',
      { allowOut: ['10.0.0.0/8', 'x.com'], denyOut: ['10.1.0.0/16', '192.0.2.1'] },
      { egress: { deny: ['192.0.2.1'] } },
    ],
  ];
  for (const [name, input, policy] of cases) {
    test(name, () => assert.deepEqual(fromE2bNetwork(input), policy));
  }

  test('an allowed block inside a denied one cannot be said with deny winning: invalid_argument naming the allowOut entry', () => {
    rejects(() => fromE2bNetwork({ allowOut: ['x.com', '10.1.2.3'], denyOut: ['10.0.0.0/8'] }), 'network.allowOut[1]', '10.1.2.3', '10.0.0.0/8', '0.0.0.0/0');
  });

  test('bad entries name the e2b field', () => {
    rejects(() => fromE2bNetwork({ allowOut: ['bad_name'], denyOut: ['0.0.0.0/0'] }), 'network.allowOut[0]', 'bad_name');
    rejects(() => fromE2bNetwork({ denyOut: ['10.0.0.1/8'] }, 'body.network'), 'body.network.denyOut[0]', '10.0.0.0/8');
    const many = Array.from({ length: 1001 }, (_, i) => `10.0.${i >> 8}.${i & 255}`);
    rejects(() => fromE2bNetwork({ denyOut: many }), 'network', '1001 entries');
  });

  test('toE2bNetwork: what the sandbox info echoes, and it maps back to the same policy', () => {
    const back: Array<[NetworkPolicy, object]> = [
      [{ egress: 'all' }, { allowInternetAccess: true }],
      [{ egress: 'none' }, { denyOut: ['0.0.0.0/0'], allowInternetAccess: false }],
      [{ egress: { allow: ['a.com', '1.1.1.1'] } }, { allowOut: ['a.com', '1.1.1.1'], denyOut: ['0.0.0.0/0'], allowInternetAccess: true }],
      [{ egress: { deny: ['10.0.0.0/8'] } }, { denyOut: ['10.0.0.0/8'], allowInternetAccess: true }],
    ];
    for (const [policy, e2b] of back) {
      assert.deepEqual(toE2bNetwork(policy), e2b);
      assert.deepEqual(fromE2bNetwork(toE2bNetwork(policy)), policy);
    }
  });
});

describe("sbx's endpoints every policy lets through (egressEndpoints)", () => {
  const lookup = async (host: string) => ({ 'api.example.test': ['203.0.113.7', '2001:db8::7', '127.0.0.1'], 'nowhere.test': [] })[host] ?? [];

  test('every address the names resolve to, here or elsewhere, IPv6 too; loopback left out; sorted without repeats', async () => {
    assert.deepEqual(await egressEndpoints('https://api.example.test', 'api.example.test:50051', { lookup }), [
      { address: '2001:db8::7', port: 443 },
      { address: '2001:db8::7', port: 50051 },
      { address: '203.0.113.7', port: 443 },
      { address: '203.0.113.7', port: 50051 },
    ]);
    assert.deepEqual(await egressEndpoints('http://[2001:db8::9]:8080', '10.0.0.2:7071', { lookup }), [
      { address: '10.0.0.2', port: 7071 },
      { address: '2001:db8::9', port: 8080 },
    ]);
    assert.deepEqual(await egressEndpoints('http://127.0.0.1:7070', 'nowhere.test:1', { lookup }), []);
    assert.deepEqual(await egressEndpoints(undefined, undefined, { lookup }), []);
  });
});
