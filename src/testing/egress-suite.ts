/**
 * The egress-policy suite (issue 28, docs/network.md): written once over a pool, run on every kind
 * of pool (Docker: src/sandbox/egress.test.ts; Kubernetes and remote nodes beside it). Every case
 * is real packets from a real box to the fake internet (src/testing/fakenet.ts): `nettool` in the
 * box connects, resolves and fetches; a refusal is the tool's non-zero exit. A case that allows
 * something also proves the same box is refused something else, so neither "everything open" nor
 * "everything closed" passes it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { isSbxError } from '../errors.js';
import type { LocalBox as Box } from '../sandbox/box.js';
import type { EgressPolicy } from '../sandbox/egress-policy.js';
import type { CreateOptions } from '../sandbox/types.js';
import type { Manager } from '../sandbox/manager.js';
import { fakenet } from './fakenet.js';
import type { FakeNet } from './fakenet.js';
import { testEnv } from './env.js';
import { waitFor } from './wait.js';

export interface EgressPoolFixture {
  /** A started Manager and the pool (on the runtime under test) whose boxes the cases make. */
  open(net: FakeNet): Promise<{ manager: Manager; pool: string; close(): Promise<void> }>;
  /** busybox image with `sh`, `nslookup`, `ip`, `httpd` (sbx-test). */
  image: string;
  /** Labels every box carries (the file's leak check finds them). */
  labels: Record<string, string>;
  /** The box command, where the runtime cannot read the image's (Kubernetes). */
  cmd?: string[];
}

const TOOL = '/tmp/nettool';
/**
 * `nft flush ruleset` as nft sends it (one netlink batch deleting every table of the namespace),
 * without nft: Python's netlink socket. Prints the kernel's answer. Checked by hand: with
 * NET_ADMIN in a container of its own it prints `ok` (and flushes that container's rules).
 */
const NFT_FLUSH = `import os, socket, struct
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
def msg(typ, flags, seq, res_id=0):
    body = struct.pack('=BBH', 0, 0, socket.htons(res_id))  # nfgenmsg: any family
    return struct.pack('=IHHII', 16 + len(body), typ, flags, seq, 0) + body
# batch begin, NFT_MSG_DELTABLE of no table (every table: the flush), batch end
s.sendto(msg(0x10, 1, 1, 10) + msg((10 << 8) | 2, 1 | 4, 2) + msg(0x11, 1, 3, 10), (0, 0))
data = s.recv(65536)
err = struct.unpack('=i', data[16:20])[0] if struct.unpack('=H', data[4:6])[0] == 2 else None
print('flush ruleset:', 'ok' if err == 0 else os.strerror(-err) if err else 'no answer')
`;
const CA = '/tmp/ca.pem';
/** What a refused or unanswered connection may take before the tool gives up: the refusal itself (a reset, an ICMP) comes at once. */
const TIMEOUT = '-timeout 4s';

interface Run {
  exitCode: number;
  stdout: string;
  stderr: string;
}

export function egressSuite(name: string, fx: EgressPoolFixture): void {
  describe(`egress policy: ${name}`, () => {
    let net: FakeNet;
    let manager: Manager;
    let pool: string;
    let close: () => Promise<void>;
    const boxes: Box[] = [];

    before(async () => {
      net = await fakenet();
      ({ manager, pool, close } = await fx.open(net));
    });
    after(async () => {
      await Promise.all(boxes.map((b) => b.remove().catch(() => undefined)));
      await close?.();
    });

    /** A running box with the policy and the fake internet's tool and CA in it. */
    async function boxWith(egress?: EgressPolicy, extra: Partial<CreateOptions> = {}): Promise<Box> {
      const box = await manager.create({
        image: fx.image,
        pool,
        labels: fx.labels,
        ...extra,
        ...(fx.cmd ? { cmd: fx.cmd } : {}),
        ...(egress !== undefined ? { networkPolicy: { egress } } : {}),
      });
      boxes.push(box);
      const files = box.files();
      await files.writeFile(TOOL, readFileSync(net.toolPath), { mode: 0o755 });
      await files.writeFile(CA, readFileSync(net.caPath));
      return box;
    }

    async function sh(box: Box, script: string): Promise<Run> {
      const r = await box.exec(['sh', '-c', script]);
      return { exitCode: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
    }
    const tool = (box: Box, args: string) => sh(box, `${TOOL} ${TIMEOUT} ${args}`);
    /** An HTTP(S) GET of `url` answered by the fake host (its body names the address that served it). */
    async function fetches(box: Box, url: string): Promise<boolean> {
      const r = await tool(box, `-ca ${CA} get ${url}`);
      return r.exitCode === 0 && r.stdout.startsWith('hello from ');
    }
    const connects = async (box: Box, addr: string, port: number) => (await tool(box, `tcp ${addr}:${port}`)).exitCode === 0;
    /** The box's own resolver (Docker's embedded one, the pod's kube-dns): its answer lines, or the rcode. */
    async function resolves(box: Box, host: string): Promise<string> {
      const r = await sh(box, `${TOOL} ${TIMEOUT} dns "$(awk '/^nameserver/ { print $2; exit }' /etc/resolv.conf):53" ${host}`);
      return r.exitCode === 0 ? r.stdout.trim() : r.exitCode === 3 ? r.stdout.trim() || 'error' : `failed: ${r.stderr.trim()}`;
    }

    test('allowlist by name: the name resolves and answers over HTTP and HTTPS; another name is NXDOMAIN; its address typed as an IP is refused', async () => {
      const box = await boxWith({ allow: [net.ok.name] });
      assert.equal(await resolves(box, net.ok.name), `A ${net.ok.address}`);
      assert.ok(await fetches(box, `http://${net.ok.name}/`), 'http to the allowed name');
      assert.ok(await fetches(box, `https://${net.ok.name}/`), 'https to the allowed name');
      assert.match(await resolves(box, net.other.name), /NXDOMAIN/);
      assert.equal(await fetches(box, `http://${net.other.address}/`), false, 'a denied host by its IP');
      assert.equal(await connects(box, net.other.address, 443), false);
    });

    test('a CNAME to an allowed name follows it; the chain is judged by the name asked', async () => {
      const box = await boxWith({ allow: [net.cnameName] });
      assert.match(await resolves(box, net.cnameName), new RegExp(`A ${net.ok.address.replaceAll('.', '\\.')}`));
      assert.ok(await fetches(box, `http://${net.cnameName}/`));
      assert.match(await resolves(box, net.ok.name), /NXDOMAIN/, 'the target name itself is not allowed');
    });

    test('wildcard: *.example.test allows every name below it, not other names', async () => {
      const box = await boxWith({ allow: ['*.example.test'] });
      assert.ok(await fetches(box, `http://${net.api.name}/`));
      assert.ok(await fetches(box, `http://${net.deep.name}/`));
      assert.match(await resolves(box, net.ok.name), /NXDOMAIN/);
      assert.equal(await connects(box, net.ok.address, 80), false);
    });

    test('CIDR allow and deny: deny wins over allow', async () => {
      const box = await boxWith({ allow: [net.subnet], deny: [net.other.address] });
      assert.ok(await fetches(box, `http://${net.ok.address}/`));
      assert.ok(await fetches(box, `http://${net.api.address}/`));
      assert.equal(await connects(box, net.other.address, 80), false);
    });

    test('a port-scoped rule opens that port only', async () => {
      const box = await boxWith({ allow: [`${net.ok.address}:${net.httpPorts.alt}`] });
      assert.ok(await fetches(box, `http://${net.ok.address}:${net.httpPorts.alt}/`));
      assert.equal(await connects(box, net.ok.address, net.httpPorts.http), false);
    });

    test('UDP follows the same rules: an allowed UDP port answers, the same port over TCP and other UDP do not', async () => {
      const box = await boxWith({ allow: [`${net.echo}:${net.echoPort}/udp`] });
      const echo = await tool(box, `udp ${net.echo}:${net.echoPort} ping-egress`);
      assert.equal(echo.exitCode, 0, echo.stderr);
      assert.match(echo.stdout, /ping-egress/);
      assert.equal(await connects(box, net.echo, net.echoPort), false, 'TCP to the UDP-only rule');
      const closed = await boxWith({ allow: [net.ok.address] });
      assert.notEqual((await tool(closed, `udp ${net.echo}:${net.echoPort} x`)).exitCode, 0);
    });

    test('DNS to another resolver is refused: the query never reaches it', async () => {
      const box = await boxWith({ allow: [net.ok.name] });
      const name = `tunnel-${Date.now().toString(36)}.test`;
      const r = await tool(box, `dns ${net.foreignDns} ${name}`);
      // sbx's resolver answered in its place (the foreign one answers every name with an address).
      assert.match(r.stdout, /NXDOMAIN/);
      const allowed = await tool(box, `dns ${net.foreignDns} ${net.ok.name}`);
      assert.equal(allowed.stdout.trim(), `A ${net.ok.address}`, 'an allowed name, resolved upstream by sbx, not by the foreign resolver');
      assert.ok(!net.foreignQueries().includes(name), `the foreign resolver saw ${name}`);
    });

    test('denylist: a denied name is NXDOMAIN, everything else (not always denied) is open', async () => {
      const box = await boxWith({ deny: [net.other.name] });
      assert.match(await resolves(box, net.other.name), /NXDOMAIN/);
      assert.ok(await fetches(box, `http://${net.ok.name}/`));
      assert.ok(await fetches(box, `http://${net.api.address}/`));
    });

    test("'all' (the default): the internet is open, the metadata address and other boxes are not", async () => {
      const box = await boxWith();
      const server = await boxWith();
      const started = await sh(server, 'httpd -p 8080 -h /tmp && hostname -i');
      assert.equal(started.exitCode, 0, started.stderr);
      const serverIp = started.stdout.trim().split(/\s+/)[0]!;
      assert.ok(await fetches(box, `http://${net.ok.address}/`), 'the internet');
      assert.equal(await fetches(box, `http://${net.metadata}/`), false, 'the metadata service');
      assert.equal(await connects(box, serverIp, 8080), false, 'another box');
    });

    test("'none': nothing goes out, every name is NXDOMAIN; exec and inbound still work", async () => {
      const box = await boxWith('none', { ports: [{ containerPort: 8081 }] });
      assert.equal(await connects(box, net.ok.address, 80), false);
      assert.match(await resolves(box, net.ok.name), /NXDOMAIN/);
      const started = await sh(box, 'echo inbound > /tmp/index.html && httpd -p 8081 -h /tmp && echo up');
      assert.equal(started.stdout.trim(), 'up');
      const socket = await box.dial(8081);
      const reply = await new Promise<string>((resolve, reject) => {
        let got = '';
        socket.on('data', (d: Buffer) => (got += d.toString()));
        socket.on('end', () => resolve(got));
        socket.on('error', reject);
        socket.write('GET /index.html HTTP/1.0\r\n\r\n');
      });
      assert.match(reply, /inbound/);
    });

    test('setNetwork on a running box applies at once, to new connections and to open ones', async () => {
      const box = await boxWith('all');
      assert.ok(await fetches(box, `http://${net.ok.address}/`));
      const hold = await box.stream(['sh', '-c', `${TOOL} hold ${net.echo}:${net.echoPort}`]);
      let out = '';
      hold.stdout.on('data', (d: Buffer) => (out += d.toString()));
      await waitFor(() => out.includes('connected'), { what: 'the held connection' });
      await box.setNetwork({ egress: { allow: [net.ok.name] } });
      // The open connection to what is now denied ends (the tool exits non-zero when its echo fails).
      assert.notEqual(await hold.wait(), 0);
      assert.equal(await connects(box, net.echo, net.echoPort), false);
      assert.ok(await fetches(box, `http://${net.ok.name}/`));
      assert.deepEqual((await box.info()).networkPolicy, { egress: { allow: [net.ok.name] } });
      await box.setNetwork({ egress: 'none' });
      assert.equal(await connects(box, net.ok.address, 80), false);
      await box.setNetwork({ egress: 'all' });
      assert.ok(await fetches(box, `http://${net.other.address}/`));
    });

    test('root in the box cannot undo it: no route, link, raw-socket or nft change (`nft flush ruleset`) is allowed, and the policy holds after', async () => {
      // Root in the box (uid 0: Kubernetes takes ids only), with every capability a box has.
      const box = await boxWith({ allow: [net.ok.address] }, { user: '0' });
      // arping opens a packet socket (raw frames: NET_RAW), to the allowed host, so only the capability can refuse it.
      for (const cmd of [
        'ip route del default',
        'ip link set eth0 down',
        'ip addr add 198.18.0.99/32 dev eth0',
        `arping -c 1 -w 1 -I eth0 ${net.ok.address}`,
      ]) {
        const r = await sh(box, `${cmd} 2>&1; echo "exit=$?"`);
        assert.doesNotMatch(r.stdout, /exit=0\s*$/, `${cmd} succeeded: ${r.stdout}`);
        assert.match(r.stdout, /not permitted/i, `${cmd}: refused for lack of the capability`);
      }
      assert.ok(await fetches(box, `http://${net.ok.address}/`), 'the allowed host, still');
      assert.equal(await connects(box, net.other.address, 80), false, 'the denied one, still');
      // `nft flush ruleset` from root in a box with Python (the e2b template): refused, nothing changes.
      const py = await boxWith({ allow: [net.ok.address] }, { user: '0', image: testEnv.e2bImage });
      await py.files().writeFile('/tmp/flush.py', NFT_FLUSH);
      const flush = await sh(py, 'python3 /tmp/flush.py 2>&1');
      assert.equal(flush.stdout.trim(), 'flush ruleset: Operation not permitted');
      assert.ok(await fetches(py, `http://${net.ok.address}/`), 'the allowed host, after the flush');
      assert.equal(await connects(py, net.other.address, 80), false, 'the denied one, after the flush');
    });

    test('a bad policy is invalid_argument naming the entry, and nothing is created', async () => {
      const before = (await manager.list()).length;
      const cases: [EgressPolicy, RegExp][] = [
        [{ allow: ['bad..name'] }, /allow\[0\]/],
        [{ allow: [net.ok.name, '10.0.0.1/33'] }, /allow\[1\]/],
        [{ deny: ['198.18.0.1:70000'] }, /deny\[0\]/],
        [{ allow: Array.from({ length: 100_000 }, (_, i) => `h${i}.test`) }, /allow/],
      ];
      for (const [egress, field] of cases) {
        await assert.rejects(
          manager.create({ image: fx.image, pool, labels: fx.labels, networkPolicy: { egress } }),
          (err: unknown) => isSbxError(err) && err.code === 'invalid_argument' && field.test(JSON.stringify(err.details) + err.message),
        );
      }
      assert.equal((await manager.list()).length, before);
    });
  });
}
