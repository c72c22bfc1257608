/**
 * The fake internet of the egress tests (issue 28): this machine has no internet, so
 * `scripts/fakenet.sh up` builds one in the network namespace `sbx-inet` (layout and servers in
 * that script and harness/fakenet/). Boxes on Docker bridges reach it through the host's routing.
 *
 * `fakenet()` runs `up` once per process (idempotent and locked across processes, so parallel test
 * files share one) and returns its layout. It throws with the script's output when `up` fails:
 * a test that needs the fake internet fails rather than skips. The servers outlive the process;
 * `scripts/fakenet.sh down` ends them.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runProcess } from './run-process.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SCRIPT = `${ROOT}scripts/fakenet.sh`;

/** One web host: HTTP on :80 and :8000, HTTPS on :443 (certificate from {@link FakeNet.caPath}). */
export interface FakeHost {
  name: string;
  address: string;
}

export interface FakeNet {
  /** The network namespace (`ip netns` name). */
  netns: string;
  /** The host's side of the link (where the namespace routes back to): 198.18.0.254, 2001:db8:5b::fe. */
  hostAddress: string;
  hostAddress6: string;
  /** 198.18.0.0/24 and 2001:db8:5b::/64. */
  subnet: string;
  subnet6: string;
  /** ok.test 198.18.0.1. Bodies read `hello from <address> host=<Host header>`; /bytes/<n> answers n bytes. */
  ok: FakeHost;
  /** other.test 198.18.0.2. */
  other: FakeHost;
  /** api.example.test 198.18.0.3. */
  api: FakeHost;
  /** deep.sub.example.test 198.18.0.4 (a second name under example.test, for wildcards). */
  deep: FakeHost;
  /** 169.254.169.254, HTTP on :80 and :8000: the cloud metadata service's address, which egress refuses by default. */
  metadata: string;
  /** v6.test 2001:db8:5b::1 (AAAA only); same web services as the v4 hosts. */
  v6: FakeHost;
  /** cname.test: a CNAME to ok.test. */
  cnameName: string;
  /** big.test: A 198.18.0.1, and a TXT answer over 512 bytes (truncated over UDP: the TCP path). */
  bigName: string;
  /** The echo host 198.18.0.7: UDP and TCP echo on {@link echoPort}. */
  echo: string;
  echoPort: number;
  httpPorts: { http: number; alt: number; https: number };
  /** The zone's DNS server, `198.18.0.53:53` (udp+tcp); TTL 30 s; names outside the zone: NXDOMAIN. */
  dns: string;
  /** A "foreign" resolver, `198.18.0.54:53`: answers every A query with 198.18.0.2 and logs it. */
  foreignDns: string;
  /** Its log: one line `<name> <TYPE> <client address>` per query, name lower case without the dot. */
  foreignLog: string;
  /** PEM of the test CA the HTTPS servers' certificate is signed by. */
  caPath: string;
  /**
   * The static client for boxes (`nettool udp|tcp|dns|get|hold`; usage in harness/fakenet/nettool):
   * bind it read-only. Busybox wget reaches the HTTPS hosts but verifies no certificate; `nettool
   * -ca <caPath> get https://…` does.
   */
  toolPath: string;
  /** Where the servers keep their state (pid, logs). */
  stateDir: string;
  /**
   * The names the foreign resolver was asked, oldest first, since `up` started it. The log
   * spans the whole machine's runs: ask unique names (`probe-<random>.test`) and look for them.
   */
  foreignQueries(): string[];
  /** The SBX_FAKENET_* lines `up` printed, as a map. */
  env: Record<string, string>;
}

let started: Promise<FakeNet> | undefined;

/** Brings the fake internet up (once per process) and returns its layout. */
export function fakenet(): Promise<FakeNet> {
  started ??= up().catch((err: unknown) => {
    // A later caller gets a fresh try rather than this failure.
    started = undefined;
    throw err;
  });
  return started;
}

async function up(): Promise<FakeNet> {
  const { code, out } = await runProcess(SCRIPT, ['up'], { cwd: ROOT, env: process.env });
  if (code !== 0) throw new Error(`scripts/fakenet.sh up failed (exit ${code}):\n${out}`);
  return parseEnv(out);
}

/** The layout from `up`'s output (its SBX_FAKENET_* lines; other lines are progress). */
export function parseEnv(out: string): FakeNet {
  const env: Record<string, string> = {};
  for (const line of out.split('\n')) {
    const m = /^SBX_FAKENET_([A-Z0-9_]+)=(.*)$/.exec(line);
    if (m) env[m[1]!] = m[2]!;
  }
  const get = (key: string): string => {
    const v = env[key];
    if (!v) throw new Error(`scripts/fakenet.sh up printed no SBX_FAKENET_${key}:\n${out}`);
    return v;
  };
  const foreignLog = get('FOREIGN_LOG');
  return {
    netns: get('NETNS'),
    hostAddress: get('HOST_ADDR'),
    hostAddress6: get('HOST_ADDR6'),
    subnet: get('SUBNET'),
    subnet6: get('SUBNET6'),
    ok: { name: 'ok.test', address: get('OK') },
    other: { name: 'other.test', address: get('OTHER') },
    api: { name: 'api.example.test', address: get('API') },
    deep: { name: 'deep.sub.example.test', address: get('DEEP') },
    v6: { name: 'v6.test', address: get('V6') },
    metadata: get('METADATA'),
    cnameName: 'cname.test',
    bigName: 'big.test',
    echo: get('ECHO'),
    echoPort: 7,
    httpPorts: { http: 80, alt: 8000, https: 443 },
    dns: get('DNS'),
    foreignDns: get('FOREIGN_DNS'),
    foreignLog,
    caPath: get('CA'),
    toolPath: get('TOOL'),
    stateDir: get('STATE'),
    foreignQueries: () =>
      readFileSync(foreignLog, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => line.split(' ')[0]!),
    env: Object.fromEntries(Object.entries(env).map(([k, v]) => [`SBX_FAKENET_${k}`, v])),
  };
}
