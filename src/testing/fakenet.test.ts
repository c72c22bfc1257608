/**
 * The fake internet (scripts/fakenet.sh, harness/fakenet): real packets from a box on the
 * boxes' network to its hosts (HTTP with busybox wget, UDP echo and DNS with the tool bound in),
 * and from the host: the zone's DNS server, the foreign resolver's log, HTTPS under the test CA.
 */
import assert from 'node:assert/strict';
import { Resolver } from 'node:dns/promises';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { after, before, describe, test } from 'node:test';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { assertNoContainersLeft } from './cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from './env.js';
import { fakenet } from './fakenet.js';
import type { FakeNet } from './fakenet.js';
import { runProcess } from './run-process.js';

const TOOL = '/usr/local/bin/nettool';
const CA = '/etc/fakenet-ca.pem';
const runId = testRunId('fakenet');
const rt = new DockerRuntime(testEnv.engineAddr);

let net: FakeNet;
let box: string;
before(async () => {
  net = await fakenet();
  box = await rt.create({
    image: testEnv.testImage,
    binds: [
      { hostPath: net.toolPath, containerPath: TOOL, readOnly: true },
      { hostPath: net.caPath, containerPath: CA, readOnly: true },
    ],
    labels: { [TEST_LABEL]: runId },
  });
  await rt.start(box);
});
after(async () => {
  if (box) await rt.remove(box, { force: true });
  await assertNoContainersLeft(rt, runId);
  await rt.close();
});

async function inBox(cmd: string[]): Promise<string> {
  const r = await rt.exec(box, cmd);
  assert.equal(r.exitCode, 0, `${cmd.join(' ')}: exit ${r.exitCode}: ${r.stdout}${r.stderr}`);
  return r.stdout;
}

/** GET https://<name>/ from the host at `address`, trusting only the fake internet's CA. */
function httpsGet(name: string, address: string, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host: address, servername: name, headers: { host: name }, path: '/', ca }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve(body));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('a box reaches the fake internet', () => {
  test('HTTP to 198.18.0.1 with busybox wget', async () => {
    const body = await inBox(['wget', '-q', '-O', '-', `http://${net.ok.address}/`]);
    assert.equal(body, `hello from ${net.ok.address} host=${net.ok.address}\n`);
  });

  test('HTTPS: busybox wget (which verifies no certificate) and the tool, trusting the test CA only', async () => {
    const hello = `hello from ${net.other.address} host=${net.other.address}\n`;
    assert.equal(await inBox(['wget', '-q', '-O', '-', `https://${net.other.address}/`]), hello);
    assert.equal(await inBox([TOOL, '-ca', CA, 'get', `https://${net.other.address}/`]), hello);
    const r = await rt.exec(box, [TOOL, 'get', `https://${net.other.address}/`]);
    assert.match(r.stderr, /unknown authority/);
  });

  test('UDP echo and the zone DNS server through the tool', async () => {
    assert.equal(await inBox([TOOL, 'udp', `${net.echo}:${net.echoPort}`, 'ping']), 'ping\n');
    assert.equal(await inBox([TOOL, 'dns', net.dns, 'cname.test']), 'CNAME ok.test.\nA 198.18.0.1\n');
    const r = await rt.exec(box, [TOOL, 'dns', net.dns, 'nope.test']);
    assert.deepEqual([r.exitCode, r.stdout], [3, 'NXDOMAIN\n']);
  });
});

describe('the host side', () => {
  test('the zone: A, CNAME, AAAA, NXDOMAIN for names outside it', async () => {
    const dns = new Resolver();
    dns.setServers([net.dns]);
    assert.deepEqual(await dns.resolve4(net.ok.name), [net.ok.address]);
    assert.deepEqual(await dns.resolve4(net.deep.name), [net.deep.address]);
    assert.deepEqual(await dns.resolve4(net.cnameName), [net.ok.address]);
    assert.deepEqual(await dns.resolve6(net.v6.name), [net.v6.address]);
    await assert.rejects(dns.resolve4('nope.test'), { code: 'ENOTFOUND' });
  });

  test('the foreign resolver answers any name and logs it', async () => {
    const name = `probe-${runId}.example`.toLowerCase();
    const foreign = new Resolver();
    foreign.setServers([net.foreignDns]);
    assert.deepEqual(await foreign.resolve4(name), [net.other.address]);
    assert.ok(net.foreignQueries().includes(name), `${name} not in ${net.foreignLog}`);
  });

  test('HTTPS under the test CA, by name and for each web host', async () => {
    const ca = readFileSync(net.caPath, 'utf8');
    for (const h of [net.ok, net.api, net.v6]) assert.equal(await httpsGet(h.name, h.address, ca), `hello from ${h.address} host=${h.name}\n`);
    // Not trusted without the CA: the certificate really is the test CA's.
    await assert.rejects(
      new Promise((resolve, reject) => request({ host: net.ok.address, path: '/' }, resolve).on('error', reject).end()),
      /self-signed|unable to (get|verify)/,
    );
  });

  test('up again changes nothing: same server, same CA', async () => {
    const pid = readFileSync(`${net.stateDir}/pid`, 'utf8');
    const ca = readFileSync(net.caPath, 'utf8');
    const { code, out } = await runProcess('scripts/fakenet.sh', ['up'], { cwd: process.cwd(), env: process.env });
    assert.equal(code, 0, out);
    assert.equal(readFileSync(`${net.stateDir}/pid`, 'utf8'), pid);
    assert.equal(readFileSync(net.caPath, 'utf8'), ca);
    assert.deepEqual(
      Object.keys(net.env).filter((k) => !out.includes(`${k}=${net.env[k]}\n`)),
      [],
    );
  });
});
