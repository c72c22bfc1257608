/**
 * Egress rules of Docker boxes on the real engine, with real packets to the fake internet
 * (src/testing/fakenet.ts): the runtime registers every box it starts with the `sbx-egress`
 * helper, which filters what the box sends (addresses, CIDRs, ports; names through its DNS proxy,
 * which boxes reach through Docker's embedded resolver, redirected). The helper is shared by every
 * box on the engine and stays up after the tests.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import Docker from 'dockerode';
import { isSbxError } from '../../errors.js';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { sh, startTestBox } from '../../testing/boxes.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { waitFor } from '../../testing/wait.js';
import { fakenet } from '../../testing/fakenet.js';
import type { FakeNet } from '../../testing/fakenet.js';
import type { ContainerSpec, EgressSpec, EgressTarget } from '../types.js';
import { EGRESS_CONTAINER, EGRESS_LABEL, engineDirName, parseEgressDns } from './egress.js';
import { DockerRuntime } from './runtime.js';

const run = promisify(execFile);
const runId = testRunId('egress');
const docker = new Docker({ socketPath: '/var/run/docker.sock' });
let net: FakeNet;
let rt: DockerRuntime;

const block = (address: string, ports?: [number, number], protocol?: 'tcp' | 'udp'): EgressTarget => ({
  host: address.includes('/') ? address : `${address}/32`,
  ...(ports ? { ports } : {}),
  ...(protocol ? { protocol } : {}),
});
const policy = (mode: EgressSpec['mode'], allow: EgressTarget[] = [], deny: EgressTarget[] = []): EgressSpec => ({ mode, allow, deny, endpoints: [] });

/** A box (sbx-base) with the fake internet's client at /nettool. */
function box(egress?: EgressSpec, spec: Partial<ContainerSpec> = {}): Promise<string> {
  return startTestBox(rt, runId, {
    cmd: ['sleep', '86400'],
    binds: [{ hostPath: net.toolPath, containerPath: '/nettool', readOnly: true }],
    ...(egress ? { egress } : {}),
    ...spec,
  });
}

/** A TCP connect from the box: 'ok', or why not (nettool's error: refused, timeout, ...). */
async function tcp(id: string, addr: string, timeout = '3s'): Promise<string> {
  const r = await sh(rt, id, `/nettool -timeout ${timeout} tcp ${addr} 2>&1`);
  return r.exitCode === 0 ? 'ok' : r.stdout.trim() || `exit ${r.exitCode}`;
}

/** One DNS query from the box to `server` (Docker's embedded resolver unless told): the answer lines or the rcode. */
async function dns(id: string, name: string, server = '127.0.0.11:53'): Promise<string> {
  return (await sh(rt, id, `/nettool dns ${server} ${name} 2>&1`)).stdout.trim();
}

/** The helper's entry of a box, asked through the helper's own CLI (undefined: it has none). */
async function helperEntry(id: string): Promise<{ id: string; addresses: string[]; macs?: string[]; spec: EgressSpec } | undefined> {
  try {
    const { stdout } = await run('docker', ['exec', EGRESS_CONTAINER, 'sbx-egress', 'call', 'GET', `/v1/boxes/${id}`]);
    return JSON.parse(stdout) as { id: string; addresses: string[]; macs?: string[]; spec: EgressSpec };
  } catch (err) {
    if (/404/.test(String((err as { stderr?: string }).stderr))) return undefined;
    throw err;
  }
}

before(async () => {
  net = await fakenet();
  rt = new DockerRuntime(testEnv.engineAddr, { egressDns: [net.dns] });
  // The helper's image is built by scripts/images.sh; without it these tests cannot say anything.
  await docker
    .getImage('sbx-egress:latest')
    .inspect()
    .catch(() => assert.fail('image sbx-egress:latest is not on the engine: build it with scripts/images.sh'));
});

after(async () => {
  await assertNoContainersLeft(rt, runId);
  await rt.close();
});

test('egressDns: ip, ip:port, [ipv6]:port as the helper takes them; from SBX_EGRESS_DNS by default; anything else invalid_argument', () => {
  assert.deepEqual(parseEgressDns(['198.18.0.53', '10.0.0.1:5353', '2001:db8::1', '[2001:db8::2]:53']), [
    '198.18.0.53:53',
    '10.0.0.1:5353',
    '[2001:db8::1]:53',
    '[2001:db8::2]:53',
  ]);
  assert.deepEqual(parseEgressDns(undefined, { SBX_EGRESS_DNS: ' 198.18.0.53:53 ,' }), ['198.18.0.53:53']);
  assert.deepEqual(parseEgressDns(undefined, {}), []);
  assert.throws(
    () => parseEgressDns(['dns.example:53']),
    (e) => isSbxError(e, 'invalid_argument') && /egressDns/.test(e.message),
  );
  assert.throws(
    () => parseEgressDns(undefined, { SBX_EGRESS_DNS: '1.2.3.4:99999' }),
    (e) => isSbxError(e, 'invalid_argument') && /SBX_EGRESS_DNS/.test(e.message),
  );
  assert.equal(engineDirName('7DLB:PHC5:X/Y'), '7DLB-PHC5-X-Y');
});

describe('egress rules of Docker boxes (real packets to the fake internet)', () => {
  test('an allowlist of addresses, CIDRs and ports: exactly those are reachable, deny wins, UDP by port', async () => {
    const spec = policy(
      'allowlist',
      [block(net.ok.address, [80, 80], 'tcp'), block('198.18.0.2/31'), block(net.echo, [net.echoPort, net.echoPort], 'udp')],
      [block(net.api.address)],
    );
    const id = await box(spec);
    try {
      assert.equal(await tcp(id, `${net.ok.address}:80`), 'ok');
      assert.match(await tcp(id, `${net.ok.address}:8000`), /refused/, 'another port of an allowed address');
      assert.equal(await tcp(id, `${net.other.address}:8000`), 'ok', 'an address of an allowed CIDR, any port');
      assert.match(await tcp(id, `${net.api.address}:80`), /refused/, 'denied inside an allowed CIDR: deny wins');
      assert.match(await tcp(id, `${net.deep.address}:80`), /refused/, 'an address no rule names');
      const udp = await sh(rt, id, `/nettool udp ${net.echo}:${net.echoPort} ping 2>&1`);
      assert.equal(udp.exitCode, 0, udp.stdout);
      assert.match(await tcp(id, `${net.echo}:${net.echoPort}`), /refused/, 'the UDP rule opens no TCP');
      assert.match(await dns(id, net.ok.name), /NXDOMAIN/, 'an allowlist without names resolves none');
      assert.match(await tcp(id, `${net.metadata}:80`), /refused/, 'metadata');
      assert.deepEqual(await rt.getEgress(id), spec);
      assert.equal((await rt.inspect(id)).labels[EGRESS_LABEL], JSON.stringify(spec), "the create's rules are the container's label");
    } finally {
      await rt.remove(id, { force: true });
    }
    assert.equal(await helperEntry(id), undefined, 'remove forgets the box in the helper');
  });

  test('names: an allowed name resolves through the helper and is reachable; others NXDOMAIN, their addresses refused, other resolvers never asked', async () => {
    const id = await box(policy('allowlist', [{ host: net.ok.name }, { host: '*.example.test' }]));
    try {
      assert.equal(await dns(id, net.ok.name), `A ${net.ok.address}`);
      assert.match((await sh(rt, id, `wget -q -T 5 -O - http://${net.ok.name}/`)).stdout, new RegExp(`hello from ${net.ok.address}`));
      assert.equal(await tcp(id, `${net.ok.address}:8000`), 'ok', "the allowed name's address, any port");
      assert.equal(await dns(id, net.deep.name), `A ${net.deep.address}`, 'a wildcard');
      assert.equal(await tcp(id, `${net.deep.address}:80`), 'ok');
      assert.match(await dns(id, net.other.name), /NXDOMAIN/);
      assert.match(await tcp(id, `${net.other.address}:80`), /refused/, 'the IP literal of a name not allowed');
      // Straight to another resolver: port 53 goes to the helper whatever the address.
      const probe = `probe-${randomUUID().slice(0, 8)}.test`;
      assert.match(await dns(id, probe, net.foreignDns), /NXDOMAIN/);
      assert.equal(await dns(id, net.ok.name, net.foreignDns), `A ${net.ok.address}`, "the helper's answer, not the foreign resolver's");
      assert.ok(!net.foreignQueries().includes(probe), 'the foreign resolver was never asked');
    } finally {
      await rt.remove(id, { force: true });
    }
  });

  test("'all' (no rules given): the internet is open, metadata is not", async () => {
    const id = await box();
    try {
      assert.equal(await tcp(id, `${net.other.address}:80`), 'ok');
      assert.match(await tcp(id, `${net.metadata}:80`), /refused/);
      assert.equal((await rt.inspect(id)).labels[EGRESS_LABEL], undefined);
      const entry = await helperEntry(id);
      assert.deepEqual(entry?.spec, policy('all'), 'registered all the same (the helper drops unregistered boxes)');
      // Its addresses are bound to its interface's MAC (IPv6 lets any process send from a foreign source).
      const mac = (await run('docker', ['inspect', '-f', '{{range .NetworkSettings.Networks}}{{.MacAddress}}{{end}}', id])).stdout.trim();
      assert.match(mac, /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/);
      assert.deepEqual(entry?.macs, [mac]);
      assert.deepEqual(await rt.getEgress(id), policy('all'), 'the rules in force');
    } finally {
      await rt.remove(id, { force: true });
    }
  });

  test('setEgress on a running box is in force when it resolves, and survives a stop and start', async () => {
    const id = await box();
    try {
      assert.equal(await tcp(id, `${net.ok.address}:80`), 'ok');
      const spec = policy('allowlist', [block(net.other.address)]);
      await rt.setEgress(id, spec);
      assert.match(await tcp(id, `${net.ok.address}:80`), /refused/);
      assert.equal(await tcp(id, `${net.other.address}:80`), 'ok');
      assert.deepEqual(await rt.getEgress(id), spec);

      await rt.stop(id, { timeoutMs: 0 });
      await assert.rejects(rt.setEgress(id, spec), (e) => isSbxError(e, 'conflict'), 'a stopped box');
      await rt.start(id);
      assert.deepEqual(await rt.getEgress(id), spec, 'the last setEgress, not the label');
      const entry = await helperEntry(id);
      const address = (await docker.getContainer(id).inspect()).NetworkSettings.Networks;
      assert.deepEqual(entry?.addresses, [Object.values(address)[0]!.IPAddress], "the new start's address");
      assert.match(await tcp(id, `${net.ok.address}:80`), /refused/);
      assert.equal(await tcp(id, `${net.other.address}:80`), 'ok');
    } finally {
      await rt.remove(id, { force: true });
    }
    await assert.rejects(rt.setEgress(id, policy('all')), (e) => isSbxError(e, 'not_found'));
  });

  test('setEgress cuts an open connection to what it now denies (TCP reset), at once', async () => {
    const id = await box();
    try {
      const held = await rt.execStream(id, ['/nettool', '-timeout', '5s', 'hold', `${net.echo}:${net.echoPort}`]);
      let out = '';
      held.stdout.on('data', (c: Buffer) => (out += c.toString()));
      let err = '';
      held.stderr.on('data', (c: Buffer) => (err += c.toString()));
      await waitFor(() => out.includes('connected'), { what: 'the held connection' });
      await rt.setEgress(id, policy('denylist', [], [block(net.echo)]));
      assert.notEqual(await held.wait(), 0);
      assert.match(err, /reset|refused/, 'cut by the rules, not timed out');
    } finally {
      await rt.remove(id, { force: true });
    }
  });

  test("a box that stops gives up its address in the helper (the engine's next box may get it), keeping its rules", async () => {
    const spec = policy('allowlist', [block(net.other.address)]);
    const stopped = await box(spec);
    // One stopped behind the runtime's back (as a command that ends): its release comes with the engine's event.
    const ends = await box(spec);
    const events = new AbortController();
    const watch = (async () => {
      for await (const _ of rt.events({ labels: { [TEST_LABEL]: runId }, signal: events.signal })) void _;
    })().catch(() => undefined);
    try {
      assert.equal((await helperEntry(stopped))?.addresses.length, 1);
      await rt.stop(stopped, { timeoutMs: 0 });
      const entry = await helperEntry(stopped);
      assert.deepEqual([entry?.addresses, entry?.spec], [[], spec], 'released by stop, its rules kept');

      assert.equal((await helperEntry(ends))?.addresses.length, 1);
      await docker.getContainer(ends).kill();
      await waitFor(async () => (await helperEntry(ends))?.addresses.length === 0, { what: 'the address of a box that ended to be released' });

      await rt.start(stopped);
      assert.equal((await helperEntry(stopped))?.addresses.length, 1, 'registered again at its start');
    } finally {
      events.abort();
      await watch;
      await rt.remove(stopped, { force: true });
      await rt.remove(ends, { force: true });
    }
  });

  test('a box the runtime did not start (not registered) sends nothing: fail closed', async () => {
    const registered = await box();
    const c = await docker.createContainer({
      Image: testEnv.baseImage,
      Cmd: ['sleep', '86400'],
      Labels: { [TEST_LABEL]: runId },
      HostConfig: { NetworkMode: 'sbx-boxes', Binds: [`${net.toolPath}:/nettool:ro`] },
    });
    try {
      await c.start();
      assert.match(await tcp(c.id, `${net.other.address}:80`, '1s'), /timeout/);
      assert.equal(await tcp(registered, `${net.other.address}:80`), 'ok', 'while a box the runtime started on that network reaches it');
    } finally {
      await c.remove({ force: true });
      await rt.remove(registered, { force: true });
    }
  });

  test('rules that cannot be enforced fail before any container is made; bad shapes are invalid_argument naming the field', async () => {
    const allow = policy('allowlist', [block(net.ok.address)]);
    await assert.rejects(box(allow, { network: 'bridge' }), (e) => isSbxError(e, 'invalid_argument') && (e.details as { field?: string }).field === 'egress');
    await assert.rejects(box({ ...allow, mode: 'some' as EgressSpec['mode'] }), (e) => isSbxError(e, 'invalid_argument') && /egress\.mode/.test(e.message));
    // 'all' goes anywhere; no network: nothing leaves whatever the rules.
    const none = await box(policy('none'), { network: 'none' });
    const other = await box(policy('all'), { network: 'bridge' });
    await rt.setEgress(none, allow);
    assert.deepEqual(await rt.getEgress(none), allow, 'recorded (nothing to filter)');
    await assert.rejects(rt.setEgress(other, allow), (e) => isSbxError(e, 'invalid_argument') && (e.details as { field?: string }).field === 'egress');
    await rt.setEgress(other, policy('all'));
    await rt.remove(none, { force: true });
    await rt.remove(other, { force: true });
    assert.deepEqual(await rt.list({ labels: { [TEST_LABEL]: runId } }), []);
  });

  test('a start whose rules the helper refuses fails, and leaves the box stopped', async () => {
    // The shape is right (the runtime checks no more: the Manager parsed the entries); the helper refuses the host.
    const id = await rt.create({
      image: testEnv.baseImage,
      cmd: ['sleep', '86400'],
      labels: { [TEST_LABEL]: runId },
      egress: policy('allowlist', [{ host: 'not an address' }]),
    });
    try {
      await assert.rejects(rt.start(id), (e) => isSbxError(e, 'invalid_argument') && (e.details as { field?: string }).field === 'egress');
      assert.equal((await rt.inspect(id)).running, false);
    } finally {
      await rt.remove(id, { force: true });
    }
  });

  test('the helper forgets boxes whose containers are gone at the next allowHostEndpoints', async () => {
    const id = await box(policy('none'));
    assert.ok(await helperEntry(id));
    // Removed behind the runtime's back: its entry stays until the sweep.
    await docker.getContainer(id).remove({ force: true });
    assert.ok(await helperEntry(id));
    await rt.allowHostEndpoints([]);
    assert.equal(await helperEntry(id), undefined);
  });
  test('a process that may not open the helper socket (not root) reaches the helper through docker exec', async () => {
    const id = await box(policy('allowlist', [block(net.other.address)]));
    try {
      const spec = policy('allowlist', [block(net.ok.address)]);
      const src = fileURLToPath(new URL('./runtime.ts', import.meta.url));
      const script = `const { DockerRuntime } = await import(${JSON.stringify(src)});
        const rt = new DockerRuntime(${JSON.stringify(testEnv.engineAddr)}, { hostFirewall: false, egressDns: ${JSON.stringify([net.dns])} });
        await rt.setEgress(${JSON.stringify(id)}, ${JSON.stringify(spec)});
        console.log(JSON.stringify(await rt.getEgress(${JSON.stringify(id)})));
        await rt.close();`;
      // As nobody in the engine socket's group: the engine answers, the helper's socket (root's, 0600) does not.
      const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        uid: 65534,
        gid: statSync('/var/run/docker.sock').gid,
        env: { ...process.env, HOME: tmpdir() },
        encoding: 'utf8',
      });
      assert.deepEqual(JSON.parse(out.trim().split('\n').pop()!), spec);
      assert.equal(await tcp(id, `${net.ok.address}:80`), 'ok');
      assert.match(await tcp(id, `${net.other.address}:80`), /refused/);
    } finally {
      await rt.remove(id, { force: true });
    }
  });
});
