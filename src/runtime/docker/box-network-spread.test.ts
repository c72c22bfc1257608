/**
 * Boxes spread over several box networks (box-network.ts): with room for two boxes per network
 * (boxesPerNetwork, 1000 by default), a third box joins the next network, made the same way;
 * boxes of different networks still cannot reach each other, the host firewall and the egress
 * rules still hold there, and a network's places are used again once its boxes are removed.
 * Other tests' boxes share the first network: counts here are relative to what each box got.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import Docker from 'dockerode';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { sh, startTestBox } from '../../testing/boxes.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { fakenet } from '../../testing/fakenet.js';
import type { FakeNet } from '../../testing/fakenet.js';
import type { EgressSpec } from '../types.js';
import { boxNetworkIndex, boxNetworkName } from './box-network.js';
import { DockerRuntime } from './runtime.js';

const runId = testRunId('box-network-spread');
const docker = new Docker({ socketPath: '/var/run/docker.sock' });
let fake: FakeNet;
let rt: DockerRuntime;

/** Only the fake internet's `ok` host, port 80. */
const allowOk = (): EgressSpec => ({
  mode: 'allowlist',
  allow: [{ host: `${fake.ok.address}/32`, ports: [80, 80], protocol: 'tcp' }],
  deny: [],
  endpoints: [],
});

/** A box serving HTTP on 8080 (busybox httpd), with the fake internet's client at /nettool. */
function box(): Promise<string> {
  return startTestBox(rt, runId, {
    cmd: ['sh', '-c', 'mkdir -p /tmp/w && echo hi > /tmp/w/index.html && httpd -p 8080 -h /tmp/w && exec sleep 86400'],
    binds: [{ hostPath: fake.toolPath, containerPath: '/nettool', readOnly: true }],
    egress: allowOk(),
  });
}

/** The box network a box is on (exactly one), its address there and its gateway. */
async function placeOf(id: string): Promise<{ n: number; ip: string; gateway: string }> {
  const networks = Object.entries((await docker.getContainer(id).inspect()).NetworkSettings.Networks);
  assert.equal(networks.length, 1, `one network: ${networks.map(([k]) => k).join(', ')}`);
  const [name, where] = networks[0]!;
  const n = boxNetworkIndex(name);
  assert.ok(n !== undefined, `${name} is a box network`);
  return { n, ip: where.IPAddress, gateway: where.Gateway };
}

/** A TCP connect from inside a box: 'ok', or why not. */
async function tcp(id: string, addr: string): Promise<string> {
  const r = await sh(rt, id, `/nettool -timeout 2s tcp ${addr} 2>&1`);
  return r.exitCode === 0 ? 'ok' : r.stdout.trim() || `exit ${r.exitCode}`;
}

/** Connects from the host (host → box is open on every bridge), retrying while httpd starts. */
async function hostReaches(ip: string, port: number): Promise<boolean> {
  for (let i = 0; i < 50; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect({ host: ip, port }, () => (s.destroy(), resolve(true)));
      s.once('error', () => resolve(false));
    });
    if (ok) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

before(async () => {
  fake = await fakenet();
  rt = new DockerRuntime(testEnv.engineAddr, { egressDns: [fake.dns], boxesPerNetwork: 2 });
});

after(async () => {
  await assertNoContainersLeft(rt, runId);
  await rt.close();
});

test('two boxes per network: the third joins the next box network, isolated, firewalled and filtered as the first; removed boxes free their places', async () => {
  const ids: string[] = [];
  const server = net.createServer((s) => s.end());
  await new Promise<void>((res) => server.listen(0, '0.0.0.0', res));
  try {
    for (let i = 0; i < 3; i++) ids.push(await box());
    const places = await Promise.all(ids.map(placeOf));
    const perNetwork = new Map<number, number>();
    for (const p of places) perNetwork.set(p.n, (perNetwork.get(p.n) ?? 0) + 1);
    assert.ok(perNetwork.size >= 2, `three boxes, two per network: more than one network (${[...perNetwork.keys()].map(boxNetworkName).join(', ')})`);
    assert.ok(
      [...perNetwork.values()].every((k) => k <= 2),
      'no network got more than two of them',
    );
    const net1 = (await docker.getNetwork(boxNetworkName(Math.max(...perNetwork.keys()))).inspect()) as Docker.NetworkInspectInfo;
    assert.equal(net1.Options?.['com.docker.network.bridge.enable_icc'], 'false', 'the next network is made isolated as the first');
    assert.equal(net1.Labels?.['sbx.network'], 'boxes');

    // The last box is on a later network than the first.
    const [first, , last] = places as [(typeof places)[0], unknown, (typeof places)[0]];
    assert.ok(last.n > first.n);
    const lastId = ids[2]!;
    assert.ok(await hostReaches(first.ip, 8080), 'the first box serves (the host reaches it)');
    assert.notEqual(await tcp(lastId, `${first.ip}:8080`), 'ok', 'a box of the next network cannot reach one of the first');
    assert.ok(await hostReaches(last.ip, 8080), 'the host reaches a box of the next network');
    assert.notEqual(await tcp(ids[0]!, `${last.ip}:8080`), 'ok', 'nor the other way round');
    const port = (server.address() as AddressInfo).port;
    assert.notEqual(await tcp(lastId, `${last.gateway}:${port}`), 'ok', "the host's services are closed to the next network's bridge");
    assert.equal(await tcp(lastId, `${fake.ok.address}:80`), 'ok', 'its egress allowlist lets through what it names');
    assert.match(await tcp(lastId, `${fake.other.address}:8000`), /refused/, 'and nothing else');

    for (const id of ids.splice(0)) await rt.remove(id, { force: true });
    ids.push(await box());
    const again = await placeOf(ids[0]!);
    assert.ok(again.n <= first.n, `a new box takes a freed place (${boxNetworkName(again.n)}, the first box was on ${boxNetworkName(first.n)})`);
  } finally {
    await new Promise((res) => server.close(res));
    for (const id of ids) await rt.remove(id, { force: true });
  }
});
