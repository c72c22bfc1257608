/**
 * Box isolation on a real engine, in real network namespaces: boxes that name no network join
 * sbx's isolated network, where one box cannot reach another (any port) nor the host's services
 * at any of its addresses, but the endpoints declared with allowHostEndpoints (that address and port only); the host still reaches every
 * port of a box (dialPort) and its published ports; the rules are constant and survive a flush.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import type { Duplex } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { sh, startTestBox } from '../../testing/boxes.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { BOX_BRIDGE_PREFIX, BOX_NETWORK } from './box-network.js';
import { IN_CHAIN, PORTS_CHAIN } from './host-firewall.js';
import { DockerRuntime } from './runtime.js';

const runId = testRunId('box-network');
const rt = new DockerRuntime(testEnv.engineAddr);

/** busybox httpd serving `text` on an unpublished port (8080) and a published one (8081). */
const SERVE = (text: string) => [
  'sh',
  '-c',
  `mkdir -p /tmp/w && echo ${text} > /tmp/w/index.html && httpd -p 8080 -h /tmp/w && httpd -p 8081 -h /tmp/w && exec sleep 86400`,
];

/** One HTTP/1.0 GET over a connection the runtime dialled; the whole answer. */
async function get(conn: Duplex): Promise<string> {
  conn.end('GET / HTTP/1.0\r\n\r\n');
  const chunks: Buffer[] = [];
  for await (const c of conn) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString();
}

/** Dials until the box's service answers (httpd starts a few ms after the box). */
async function untilServed(id: string, port: number, text: string): Promise<void> {
  let last = '';
  for (let i = 0; i < 100; i++) {
    try {
      last = await get(await rt.dialPort(id, port));
      if (last.includes(text)) return;
    } catch (err) {
      last = String(err);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`port ${port} of ${id} never served ${text}: ${last}`);
}

/** A bounded TCP connect from inside a box: busybox nc exits 0 once connected, 1 when refused or after 2 s. */
async function connects(id: string, host: string, port: number): Promise<boolean> {
  const r = await sh(rt, id, `nc -w 2 ${host} ${port} </dev/null`);
  return r.exitCode === 0;
}

/** The box's address on its network and its default gateway, read inside the box. */
async function addressesOf(id: string): Promise<{ ip: string; gateway: string }> {
  const ip = (await sh(rt, id, 'hostname -i')).stdout.trim();
  const route = (await sh(rt, id, 'cat /proc/net/route')).stdout;
  const hex = route
    .split('\n')
    .find((l) => l.split(/\s+/)[1] === '00000000')!
    .split(/\s+/)[2]!;
  return { ip, gateway: [3, 2, 1, 0].map((i) => parseInt(hex.slice(i * 2, i * 2 + 2), 16)).join('.') };
}

/** The networks a container is on, as the engine says. */
function networksOf(id: string): string {
  return execFileSync('docker', ['inspect', '-f', '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}', id], { encoding: 'utf8' }).trim();
}

/** A TCP server of the host on every address (0.0.0.0), counting the connections it accepts. */
async function hostServer(): Promise<{ port: number; accepted: () => number; close: () => Promise<void> }> {
  let n = 0;
  const server = net.createServer((s) => {
    n++;
    s.end();
  });
  await new Promise<void>((res) => server.listen(0, '0.0.0.0', res));
  return { port: (server.address() as AddressInfo).port, accepted: () => n, close: () => new Promise((res) => server.close(() => res())) };
}

test('without root the host firewall cannot be installed: not_available, reason host_firewall, saying the way out', () => {
  const src = fileURLToPath(new URL('./host-firewall.ts', import.meta.url));
  const script = `const { HostFirewall } = await import(${JSON.stringify(src)});
    try { await new HostFirewall('sbx-boxes+').ensure(); console.log('installed'); }
    catch (e) { console.log(JSON.stringify({ code: e.code, reason: e.details?.reason, message: e.message })); }`;
  // As nobody: no CAP_NET_ADMIN, as a non-root sbx would run.
  const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    uid: 65534,
    gid: 65534,
    env: { ...process.env, HOME: tmpdir() },
    encoding: 'utf8',
  });
  const e = JSON.parse(out.trim().split('\n').pop()!) as { code: string; reason: string; message: string };
  assert.equal(e.code, 'not_available');
  assert.equal(e.reason, 'host_firewall');
  assert.match(e.message, /root/);
  assert.match(e.message, /SBX_HOST_FIREWALL=off/);
});

after(async () => {
  await assertNoContainersLeft(rt, runId);
  await rt.close();
});

describe('box isolation (Docker)', () => {
  let alice = '';
  let bob = '';
  before(async () => {
    [alice, bob] = await Promise.all([
      startTestBox(rt, runId, { cmd: SERVE('alice'), dialAnyPort: true, ports: [{ containerPort: 8081 }] }),
      startTestBox(rt, runId, { cmd: SERVE('bob'), dialAnyPort: true }),
    ]);
  });
  after(async () => {
    await Promise.all([alice, bob].filter(Boolean).map((id) => rt.remove(id, { force: true })));
  });

  test('a box cannot reach another box at its address, on a port it does not publish nor one it does; the host reaches every port', async () => {
    // Up, as the host sees it: a refusal below is the isolation, not a service that is not there.
    await untilServed(alice, 8080, 'alice');
    await untilServed(bob, 8080, 'bob');
    const a = await addressesOf(alice);
    const b = await addressesOf(bob);
    assert.notEqual(a.ip, b.ip);
    assert.equal(await connects(bob, a.ip, 8080), false, "bob's box reached alice's unpublished port");
    assert.equal(await connects(bob, a.ip, 8081), false, "bob's box reached alice's published port at her address");
    assert.equal(await connects(alice, b.ip, 8080), false, "alice's box reached bob's");
    assert.equal(await connects(alice, a.ip, 8080), true, 'a box still reaches its own services at its own address');

    // The host still reaches any port of a box (dialPort at its address) and its published ports.
    assert.match(await get(await rt.dialPort(alice, 8080)), /alice/, 'an unpublished port, at the box’s address');
    assert.match(await get(await rt.dialPort(alice, 8081)), /alice/, 'the published port, through 127.0.0.1');
    const published = (await rt.inspect(alice)).ports.find((p) => p.containerPort === 8081)!;
    assert.equal(published.hostIp, '127.0.0.1');
    const direct = net.createConnection({ host: '127.0.0.1', port: published.hostPort });
    await new Promise((res, rej) => direct.once('connect', res).once('error', rej));
    assert.match(await get(direct), /alice/);
  });

  test("a box cannot reach the host's services, at the gateway nor any other host address; a declared endpoint it can, at that address only", async () => {
    const server = await hostServer();
    try {
      const { gateway } = await addressesOf(bob);
      const hostAddresses = Object.values(networkInterfaces())
        .flat()
        .filter((i) => i && i.family === 'IPv4' && !i.internal)
        .map((i) => i!.address);
      assert.ok(hostAddresses.includes(gateway), `the gateway ${gateway} is an address of this machine`);
      assert.ok(hostAddresses.length > 1, 'another address of the host (docker0, eth0)');
      for (const addr of hostAddresses) assert.equal(await connects(bob, addr, server.port), false, `the box reached the host at ${addr}:${server.port}`);
      assert.equal(server.accepted(), 0);

      await rt.allowHostEndpoints([{ address: gateway, port: server.port }]);
      assert.equal(await connects(bob, gateway, server.port), true, 'a declared endpoint is open to boxes');
      assert.equal(server.accepted(), 1);
      // The same port at another address of the host is another service (one on 0.0.0.0 here): closed.
      for (const addr of hostAddresses.filter((a) => a !== gateway)) {
        assert.equal(await connects(bob, addr, server.port), false, `the declared port opened ${addr}:${server.port} too`);
      }
      assert.equal(server.accepted(), 1);

      await rt.allowHostEndpoints([]);
      assert.equal(await connects(bob, gateway, server.port), false, 'closed again once no longer declared');
    } finally {
      await rt.allowHostEndpoints([]);
      await server.close();
    }
  });

  test('an endpoint must be an IPv4 address and a port: a bare port would open it on every address', async () => {
    for (const e of [
      { address: '', port: 80 },
      { address: '::1', port: 80 },
      { address: 'sbx.example', port: 80 },
      { address: '10.0.0.1', port: 0 },
    ]) {
      await assert.rejects(rt.allowHostEndpoints([e]), (err) => isSbxError(err, 'invalid_argument'), JSON.stringify(e));
    }
  });

  test('the rules are constant (none per box) and come back after a flush', async () => {
    const rules = () => execFileSync('iptables', ['-w', '-S'], { encoding: 'utf8' }).split('\n');
    const ours = () => rules().filter((l) => l.includes(IN_CHAIN) || l.includes(PORTS_CHAIN) || l.includes(BOX_BRIDGE_PREFIX));
    const before = ours().length;
    const extra = await startTestBox(rt, runId, {});
    assert.equal(ours().length, before, 'a box adds no rule');
    await rt.remove(extra, { force: true });
    // Someone flushes our chain (a firewall reload): the next create restores it before its box runs.
    execFileSync('iptables', ['-w', '-F', IN_CHAIN]);
    const again = await startTestBox(rt, runId, {});
    try {
      assert.ok(rules().includes(`-A ${IN_CHAIN} -j REJECT --reject-with icmp-admin-prohibited`));
      const server = await hostServer();
      try {
        const { gateway } = await addressesOf(again);
        assert.equal(await connects(again, gateway, server.port), false);
      } finally {
        await server.close();
      }
    } finally {
      await rt.remove(again, { force: true });
    }
  });

  test('port rules of sbx processes that are gone are swept at the next declaration; a live one’s are kept', async () => {
    const startOf = (pid: number) => {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    };
    const child = spawn('sleep', ['60']);
    const dead = `${child.pid}:${startOf(child.pid!)}:1`;
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const live = `1:${startOf(1)}:1`;
    const rule = (owner: string, port: number) => [
      '-p',
      'tcp',
      '-m',
      'tcp',
      '--dport',
      String(port),
      '-m',
      'comment',
      '--comment',
      `sbx-owner ${owner}`,
      '-j',
      'ACCEPT',
    ];
    const listed = () => execFileSync('iptables', ['-w', '-S', PORTS_CHAIN], { encoding: 'utf8' });
    // As a crashed sbx process and a running one would have left them.
    execFileSync('iptables', ['-w', '-A', PORTS_CHAIN, ...rule(dead, 1)]);
    execFileSync('iptables', ['-w', '-A', PORTS_CHAIN, ...rule(live, 2)]);
    try {
      await rt.allowHostEndpoints([{ address: '10.255.255.1', port: 3 }]);
      assert.doesNotMatch(listed(), new RegExp(`sbx-owner ${dead}`), 'the dead process’s rule is swept');
      assert.match(listed(), new RegExp(`sbx-owner ${live}"`), 'a live process’s rule is kept');
      assert.match(listed(), /-d 10\.255\.255\.1\/32 -p tcp -m tcp --dport 3 /, 'this one’s is added, for its address only');
    } finally {
      await rt.allowHostEndpoints([]);
      execFileSync('iptables', ['-w', '-D', PORTS_CHAIN, ...rule(live, 2)]);
      try {
        execFileSync('iptables', ['-w', '-D', PORTS_CHAIN, ...rule(dead, 1)], { stdio: 'ignore' });
      } catch {
        // Swept, as it should be.
      }
    }
    assert.doesNotMatch(listed(), /--dport 3 /, 'and deleted once no longer declared');
  });

  test('a full bridge (1023 ports) sends the next box to the next box network, isolated as well', async () => {
    // Fill sbx-boxes0 to the kernel's limit with spare veth ports, as 1023 running boxes would.
    const bridge = `${BOX_BRIDGE_PREFIX}0`;
    const ports = () => readdirSync(`/sys/class/net/${bridge}/brif`).length;
    const fill: string[] = [];
    const batch = (lines: string[]) => execFileSync('ip', ['-force', '-batch', '-'], { input: lines.join('\n') + '\n', stdio: ['pipe', 'ignore', 'ignore'] });
    let moved = '';
    try {
      // Until full: a box of an earlier file still being removed may free a port meanwhile.
      for (let free = 1023 - ports(), before = -1; free > 0 && ports() !== before; free = 1023 - ports()) {
        before = ports();
        const more = Array.from({ length: free }, (_, i) => `sbxfill${fill.length + i}`);
        fill.push(...more);
        batch(more.flatMap((v) => [`link add ${v} type veth peer name ${v}p`, `link set ${v} master ${bridge}`]));
      }
      assert.equal(ports(), 1023, 'the bridge is full');
      moved = await startTestBox(rt, runId, { cmd: SERVE('carol'), dialAnyPort: true });
      assert.equal(networksOf(moved), `${BOX_NETWORK}-1`, 'the box moved to the next network');
      await untilServed(moved, 8080, 'carol');
      const server = await hostServer();
      try {
        const { gateway } = await addressesOf(moved);
        assert.equal(await connects(moved, gateway, server.port), false, 'the host is closed to the next bridge too');
      } finally {
        await server.close();
      }
      const a = await addressesOf(alice);
      assert.equal(await connects(moved, a.ip, 8080), false, 'a box of the next bridge cannot reach one of the first');
      await rt.stop(moved, { timeoutMs: 1000 });
      await rt.start(moved);
      await untilServed(moved, 8080, 'carol');
    } finally {
      batch(fill.map((v) => `link del ${v}`));
      if (moved) await rt.remove(moved, { force: true });
    }
  });

  test('boxes join the isolated network; a box that names a network gets that one', async () => {
    const own = await startTestBox(rt, runId, { network: 'bridge' });
    try {
      assert.equal(networksOf(bob), BOX_NETWORK);
      assert.equal(networksOf(own), 'bridge');
    } finally {
      await rt.remove(own, { force: true });
    }
  });
});
