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
import type { Box } from './box.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';
import { endpointPorts } from './pool.js';
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

test("the host ports a Manager opens to boxes: SBX_API_URL's (scheme default) and SBX_GRPC_ADDR's, nothing else", () => {
  assert.deepEqual(endpointPorts(undefined, undefined), []);
  assert.deepEqual(endpointPorts('http://172.17.0.1:7070', '172.17.0.1:7071'), [7070, 7071]);
  assert.deepEqual(endpointPorts('https://sbx.example', undefined), [443]);
  assert.deepEqual(endpointPorts('http://sbx.example/base', '[fd00::1]:7070'), [80, 7070]);
  assert.deepEqual(endpointPorts('http://10.0.0.1:7070', '10.0.0.1:7070'), [7070]);
  assert.deepEqual(endpointPorts(undefined, 'no-port'), []);
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
      apiUrl: `http://${hostIp}:${(api.address() as AddressInfo).port}`,
      logger: pino({ level: 'silent' }),
      pools: [{ name: 'local', addr: testEnv.engineAddr, warm: [{ image: IMAGE, size: 1 }] }],
    });
    m.boxEnv['SBX_HEARTBEAT_INTERVAL_MS'] = '200';
    try {
      await m.start();
      for (let i = 0; i < 300 && (await m.warm())[0]?.ready !== 1; i++) await new Promise((r) => setTimeout(r, 100));
      const alice = await m.create({
        image: IMAGE,
        owner: 'alice',
        ports: [{ containerPort: 8081 }],
        cmd: ['sh', '-c', 'mkdir -p /tmp/w && echo alice > /tmp/w/index.html && httpd -p 8080 -h /tmp/w && httpd -p 8081 -h /tmp/w && exec sleep 86400'],
      });
      const bob = await m.create({ image: IMAGE, owner: 'bob' });
      assert.equal((await m.warm())[0]!.hits, 1, "bob's box is a claimed warm spare");

      // Alice's service is up: the host reaches it (her published port, as box.proxy hands it out).
      let page = '';
      for (let i = 0; i < 100 && !page.includes('alice'); i++) {
        page = await fetch(await alice.proxy(8081)).then(
          (r) => r.text(),
          () => '',
        );
        if (!page.includes('alice')) await new Promise((r) => setTimeout(r, 50));
      }
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
