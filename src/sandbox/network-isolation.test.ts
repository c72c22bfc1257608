/**
 * Boxes of different owners on one Manager and one engine, as the attack run found them: bob's box
 * must not reach a service of alice's box at her address, nor the host's services; it must still
 * reach sbx's own endpoint it is told of (SBX_API_URL: the agent's heartbeat), a claimed warm spare
 * as much as a cold box, and the host still reaches alice's published port.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { testEnv, testRunId } from '../testing/env.js';
import { waitFor } from '../testing/wait.js';
import type { Box } from './box.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';
import { hostEndpoints, localAddresses } from './host-endpoints.js';
import { WARM_LABEL } from './warm.js';

const IMAGE = testEnv.baseImage;
const runId = testRunId('net-iso');
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-net-iso-'));
const engine = new DockerRuntime(testEnv.engineAddr);
const name = `netiso-${process.pid}`;
/** This machine's address boxes are told to call back on (any host address will do: the port is what is allowed). */
const hostIp = Object.values(networkInterfaces())
  .flat()
  .find((i) => i && i.family === 'IPv4' && !i.internal)!.address;

/** busybox nc from inside the box: 0 once connected, 1 refused or after 2 s. */
async function connects(box: Box, host: string, port: number): Promise<boolean> {
  return (await box.exec(['sh', '-c', `nc -w 2 ${host} ${port} </dev/null`])).exitCode === 0;
}

after(async () => {
  const left = await engine.list({ labels: managerSelector(name) });
  await Promise.all(left.map((c) => engine.remove(c.id, { force: true }).catch(() => undefined)));
  await engine.close();
  rmSync(dataDir, { recursive: true, force: true });
  // Spares outlive their Manager by design (the next one adopts them); boxes must not.
  assert.deepEqual(
    left.filter((c) => c.labels[WARM_LABEL] === undefined).map((c) => c.name),
    [],
    'boxes left behind',
  );
});

test("the endpoints a Manager opens to boxes: SBX_API_URL's and SBX_GRPC_ADDR's address and port, where that address is this machine's", async () => {
  const local = () => new Set(['172.17.0.1', '10.0.0.1']);
  const lookup = async (host: string) => ({ 'sbx.internal': ['10.0.0.1'], 'lb.example': ['203.0.113.7'] })[host] ?? [];
  const of = (api: string | undefined, grpc: string | undefined) => hostEndpoints(api, grpc, { local, lookup });
  assert.deepEqual(await of(undefined, undefined), []);
  assert.deepEqual(await of('http://172.17.0.1:7070', '172.17.0.1:7071'), [
    { address: '172.17.0.1', port: 7070 },
    { address: '172.17.0.1', port: 7071 },
  ]);
  assert.deepEqual(await of('https://sbx.internal', undefined), [{ address: '10.0.0.1', port: 443 }], 'a name resolved; the scheme default port');
  assert.deepEqual(await of('http://10.0.0.1:7070', '10.0.0.1:7070'), [{ address: '10.0.0.1', port: 7070 }]);
  // Elsewhere: a load balancer's name, another machine's address, loopback, IPv6, no port.
  assert.deepEqual(await of('https://lb.example/base', '192.0.2.99:7071'), [], 'a remote endpoint opens nothing here');
  assert.deepEqual(await of('http://127.0.0.1:7070', '[fd00::1]:7070'), []);
  assert.deepEqual(await of('http://nowhere.invalid:7070', 'no-port'), []);
  // The real resolver and interfaces: this machine's address is kept, a TEST-NET-3 one is not.
  assert.deepEqual(await hostEndpoints(`http://${hostIp}:7070`, '203.0.113.7:7071'), [{ address: hostIp, port: 7070 }]);
  assert.deepEqual(await hostEndpoints('http://localhost:7070', undefined), [], "loopback: a box's 127.0.0.1 is its own");
});

describe(`boxes of different owners (${runId})`, () => {
  test("bob's box reaches neither alice's service nor the host's, but sbx's heartbeat endpoint; the host reaches alice's port", async () => {
    const beats: string[] = [];
    const api = http.createServer((req, res) => {
      beats.push(req.url ?? '');
      req.resume().on('end', () => res.writeHead(204).end());
    });
    await new Promise<void>((res) => api.listen(0, '0.0.0.0', res));
    // Another service of the host, on every address, that no box is told of.
    let stolen = 0;
    const other = net.createServer((s) => {
      stolen++;
      s.end();
    });
    await new Promise<void>((res) => other.listen(0, '0.0.0.0', res));
    const m = new Manager({
      name,
      dataDir,
      cleanupIntervalMs: 0,
      heartbeatIntervalMs: 200,
      apiUrl: `http://${hostIp}:${(api.address() as AddressInfo).port}`,
      logger: pino({ level: 'silent' }),
      pools: [{ name: 'local', addr: testEnv.engineAddr, warm: [{ image: IMAGE, size: 1 }] }],
    });
    try {
      await m.start();
      await waitFor(async () => (await m.warm())[0]?.ready === 1, { what: 'the warm spare', intervalMs: 100 });
      const alice = await m.create({
        image: IMAGE,
        owner: 'alice',
        ports: [{ containerPort: 8081 }],
        cmd: ['sh', '-c', 'mkdir -p /tmp/w && echo alice > /tmp/w/index.html && httpd -p 8080 -h /tmp/w && httpd -p 8081 -h /tmp/w && exec sleep 86400'],
      });
      const bob = await m.create({ image: IMAGE, owner: 'bob' });
      assert.equal((await m.warm())[0]!.hits, 1, "bob's box is a claimed warm spare");

      // Alice's service is up: the host reaches it (her published port, as box.proxy hands it out).
      const page = await waitFor(
        async () => {
          const text = await fetch(await alice.proxy(8081)).then(
            (r) => r.text(),
            () => '',
          );
          return text.includes('alice') && text;
        },
        { what: "alice's service to answer" },
      );
      assert.match(page, /alice/);
      const aliceIp = (await alice.exec(['hostname', '-i'])).stdout.trim();
      assert.equal(await connects(alice, aliceIp, 8080), true, 'her service listens on her address');

      assert.equal(await connects(bob, aliceIp, 8080), false, "bob's box reached alice's unpublished port");
      assert.equal(await connects(bob, aliceIp, 8081), false, "bob's box reached alice's published port at her address");
      assert.equal(await connects(bob, hostIp, (other.address() as AddressInfo).port), false, "bob's box reached a service of the host");
      assert.equal(stolen, 0);

      // sbx's own endpoint is open: the agent's heartbeats arrive while an exec runs.
      await alice.exec(['sleep', '1']);
      assert.ok(beats.includes(`/v1/boxes/${alice.id}/heartbeat`), `no heartbeat of alice's box: ${JSON.stringify(beats)}`);
      // A claimed spare's agent keeps the interval it started with (30 s): its way to the endpoint is what counts here.
      assert.equal(await connects(bob, hostIp, (api.address() as AddressInfo).port), true, "bob's claimed box cannot reach SBX_API_URL");
    } finally {
      await Promise.all((await m.list()).map((b) => b.remove().catch(() => undefined)));
      await m.close();
      await new Promise<void>((res) => api.close(() => res()));
      await new Promise<void>((res) => other.close(() => res()));
    }
  });
});

describe(`sbx's endpoints only, at their address (${runId})`, () => {
  /** A TCP server of the host on `host:port` (port 0: any) that counts what it accepts. */
  async function listening(host: string, port = 0): Promise<{ port: number; accepted: () => number; close: () => Promise<void> }> {
    let n = 0;
    const server = net.createServer((s) => {
      n++;
      s.end();
    });
    await new Promise<void>((res, rej) => server.once('error', rej).listen(port, host, res));
    return { port: (server.address() as AddressInfo).port, accepted: () => n, close: () => new Promise((res) => server.close(() => res())) };
  }

  async function withBox(apiUrl: string, fn: (box: Box) => Promise<void>): Promise<void> {
    const m = new Manager({
      name,
      dataDir,
      cleanupIntervalMs: 0,
      apiUrl,
      logger: pino({ level: 'silent' }),
      pools: [{ name: 'local', addr: testEnv.engineAddr }],
    });
    try {
      await m.start();
      const box = await m.create({ image: IMAGE, owner: 'bob' });
      try {
        await fn(box);
      } finally {
        await box.remove();
      }
    } finally {
      await m.close();
    }
  }

  test("SBX_API_URL's port opens at its address only: a host service on that port at another address stays closed", async () => {
    const otherIp = [...localAddresses()].find((a) => a !== hostIp);
    assert.ok(otherIp, 'a second address of this machine (docker0)');
    const api = await listening(hostIp);
    const other = await listening(otherIp, api.port);
    try {
      await withBox(`http://${hostIp}:${api.port}`, async (box) => {
        assert.equal(await connects(box, hostIp, api.port), true, 'the box cannot reach SBX_API_URL');
        assert.equal(await connects(box, otherIp, api.port), false, `the box reached another service on ${otherIp}:${api.port}`);
        assert.equal(other.accepted(), 0);
      });
    } finally {
      await api.close();
      await other.close();
    }
  });

  test('an SBX_API_URL on another machine opens nothing on this one', async () => {
    const local = await listening('0.0.0.0');
    try {
      // TEST-NET-3: not an address of this machine (a load balancer in front of sbx, say).
      await withBox(`http://203.0.113.7:${local.port}`, async (box) => {
        assert.equal(await connects(box, hostIp, local.port), false, `SBX_API_URL's port opened a local service on ${hostIp}:${local.port}`);
        assert.equal(local.accepted(), 0);
      });
    } finally {
      await local.close();
    }
  });
});
