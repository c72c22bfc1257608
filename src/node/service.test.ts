// The node service through its client, on the real engine: what it refuses (containers it did
// not create, the host's network, host paths, capabilities, ports off loopback), workspaces in
// its volumes (through binds and through the Manager's WorkspaceVolumes), its heartbeat relay,
// and SbxErrors crossing the wire unchanged.
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import type { SbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { BoxHeartbeat, ContainerSpec, EgressSpec, Runtime } from '../runtime/types.js';
import { WorkspaceVolumes } from '../sandbox/workspace-volumes.js';
import { assertNoContainersLeft } from '../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../testing/env.js';
import { startTestNode } from '../testing/remote-node.js';
import type { TestNode } from '../testing/remote-node.js';
import { waitFor } from '../testing/wait.js';
import type { Workspace } from '../workspace/types.js';

const runId = testRunId('node-service');
const labels = { [TEST_LABEL]: runId };
const spec = (extra: Partial<ContainerSpec> = {}): ContainerSpec => ({ image: testEnv.baseImage, ...extra, labels: { ...labels, ...(extra.labels ?? {}) } });

describe('node service', () => {
  let node: TestNode;
  let local: DockerRuntime;

  before(async () => {
    node = await startTestNode({ name: `svc-${process.pid}` });
    local = new DockerRuntime(testEnv.engineAddr);
  });

  after(async () => {
    try {
      await assertNoContainersLeft(local, runId);
    } finally {
      await node.close();
      await local.close();
    }
  });

  async function started(extra: Partial<ContainerSpec> = {}): Promise<string> {
    const id = await node.runtime.create(spec(extra));
    await node.runtime.start(id);
    return id;
  }

  test("the node's facts: its name, engine, size, OCI runtimes and free disk", async () => {
    const f = await node.runtime.facts();
    const v = await local.version();
    assert.equal(f.name, `svc-${process.pid}`);
    assert.equal(f.engine, 'docker');
    assert.equal(f.engineVersion, v.version);
    assert.equal(f.os, v.os);
    assert.equal(f.arch, v.arch);
    assert.ok(f.cpus >= 1 && f.memoryBytes > 0);
    assert.ok(f.ociRuntimes.includes('runc'), f.ociRuntimes.join(','));
    assert.ok(f.freeDiskBytes > 0);
  });

  test('a container the node did not create is not_found for every call, and never listed', async () => {
    const other = await local.create(spec());
    try {
      await local.start(other);
      const rt = node.runtime;
      for (const call of [
        () => rt.inspect(other),
        () => rt.inspect(other.slice(0, 12)),
        () => rt.start(other),
        () => rt.stop(other),
        () => rt.remove(other, { force: true }),
        () => rt.exec(other, ['true']),
        () => rt.execStream(other, ['true']),
        () => rt.processes(other),
        () => rt.stats(other),
        () => rt.logs(other),
        () => rt.setBoxEnv(other, { A: '1' }),
        () => rt.boxTool(other),
        () => rt.dialPort(other, 8080),
        () => rt.setEgress(other, { mode: 'none', allow: [], deny: [], endpoints: [] }),
        () => rt.getEgress(other),
      ]) {
        await assert.rejects(call(), (e: SbxError) => isSbxError(e, 'not_found') && !e.message.includes('sbx.node'));
      }
      assert.equal((await rt.list({ labels })).length, 0);
      assert.equal((await local.inspect(other)).running, true, 'untouched');
    } finally {
      await local.remove(other, { force: true });
    }
  });

  test("events carry the node's own containers only", async () => {
    const ac = new AbortController();
    const seen: string[] = [];
    const it = node.runtime.events({ labels, signal: ac.signal })[Symbol.asyncIterator]();
    // The subscription is made by the first next(); the node's own container's event ends the wait.
    const reading = (async () => {
      for (let n = await it.next(); !n.done; n = await it.next()) seen.push(n.value.id);
    })();
    const first = await node.runtime.create(spec());
    await waitFor(() => seen.includes(first), { what: 'the subscription to be live' });
    await node.runtime.remove(first);
    const other = await local.create(spec());
    const mine = await node.runtime.create(spec());
    try {
      await waitFor(() => seen.includes(mine), { what: "the node's container's event" });
      assert.ok(!seen.includes(other), 'an unmanaged container was reported');
    } finally {
      ac.abort();
      await reading;
      await local.remove(other, { force: true });
      await node.runtime.remove(mine, { force: true });
    }
  });

  test('a client that goes away kills its processes in the box', async () => {
    const id = await started();
    const client = node.connect();
    try {
      await client.execStream(id, ['sleep', '341']);
      const sleeping = async () => (await node.runtime.processes(id)).some((p) => p.command.includes('sleep 341'));
      await waitFor(sleeping, { what: 'the sleep to run' });
      await client.close();
      await waitFor(async () => !(await sleeping()), { what: 'the sleep to be killed' });
    } finally {
      await node.runtime.remove(id, { force: true });
    }
  });

  test("the host's network, another container's, a named network, the engine socket and added capabilities are refused", async () => {
    const refused = async (extra: Partial<ContainerSpec>, field: string) =>
      assert.rejects(
        node.runtime.create(spec(extra)),
        (e: SbxError) => isSbxError(e, 'forbidden') && e.details?.['field'] === field && e.details?.['reason'] === 'node_policy',
        field,
      );
    await refused({ network: 'host' }, 'network');
    await refused({ network: 'container:abc' }, 'network');
    await refused({ network: 'bridge' }, 'network');
    await refused({ binds: [{ hostPath: '/var/run/docker.sock', containerPath: '/var/run/docker.sock' }] }, 'binds.0.hostPath');
    await refused({ binds: [{ hostPath: '/', containerPath: '/host' }] }, 'binds.0.hostPath');
    await refused({ security: { capAdd: ['SYS_ADMIN'] } }, 'security.capAdd');
    await refused({ security: { capAdd: ['CAP_NET_ADMIN'] } }, 'security.capAdd');
    assert.equal((await local.list({ labels })).length, 0, 'nothing was created');
    // Docker's default set may be added back; 'none' is fine.
    const ok = await node.runtime.create(spec({ network: 'none', security: { capDrop: ['ALL'], capAdd: ['CHOWN'] } }));
    await node.runtime.remove(ok);
  });

  test('an image build is refused: its RUN steps would run outside the box network', async () => {
    const tag = `sbx-node-build-refused:${process.pid}`;
    await assert.rejects(
      (async () => {
        for await (const _ of node.runtime.images.build(Readable.from([Buffer.alloc(1024)]), tag)) void _;
      })(),
      (e: SbxError) => isSbxError(e, 'forbidden') && e.details?.['reason'] === 'node_policy',
    );
    assert.equal(await local.images.exists(tag), false);
  });

  test('published ports are forced onto the node loopback', async () => {
    const id = await started({ ports: [{ containerPort: 8080, hostIp: '0.0.0.0' }] });
    try {
      const ports = (await local.inspect(id)).ports.filter((p) => p.containerPort === 8080);
      assert.ok(ports.length > 0);
      assert.deepEqual([...new Set(ports.map((p) => p.hostIp))], ['127.0.0.1']);
    } finally {
      await node.runtime.remove(id, { force: true });
    }
  });

  test('a workspace volume: written in one box, read in the next through binds; exclusive, listed, removed', async () => {
    const hostPath = `/var/lib/sbx-manager/workspaces/node/${runId}/root`;
    await node.runtime.createWorkspaceVolume(hostPath, { exclusive: true, labels: { 'sbx.workspace-id': runId } });
    try {
      await assert.rejects(node.runtime.createWorkspaceVolume(hostPath, { exclusive: true }), (e) => isSbxError(e, 'conflict'));
      assert.deepEqual(
        (await node.runtime.listVolumes()).filter((v) => v.hostPath === hostPath).map((v) => v.labels),
        [{ 'sbx.workspace-id': runId }],
      );
      const binds = [{ hostPath, containerPath: '/workspace' }];
      const a = await started({ binds, user: '1000' });
      const w = await node.runtime.exec(a, ['sh', '-c', 'echo from-a > /workspace/note && id -u']);
      assert.equal(w.exitCode, 0, w.stderr);
      await node.runtime.remove(a, { force: true });
      const b = await started({ binds, user: '1000' });
      assert.equal((await node.runtime.exec(b, ['cat', '/workspace/note'])).stdout, 'from-a\n');
      await node.runtime.remove(b, { force: true });
    } finally {
      await node.runtime.removeWorkspaceVolume(hostPath);
    }
    await assert.rejects(node.runtime.removeWorkspaceVolume(hostPath), (e) => isSbxError(e, 'not_found'));
    await assert.rejects(node.runtime.create(spec({ binds: [{ hostPath, containerPath: '/w' }] })), (e) => isSbxError(e, 'forbidden'));
  });

  test("the Manager's WorkspaceVolumes works over RemoteRuntime: helper file I/O, seen by a box", async () => {
    const mountPath = `/var/lib/sbx-manager/workspaces/node/${runId}-h/root`;
    const now = new Date().toISOString();
    const ws: Workspace = { id: `ws-${runId}`, name: 'n', owner: 'alice', node: 'remote', labels: {}, createdAt: now, updatedAt: now };
    const volumes = new WorkspaceVolumes({ runtime: () => node.runtime, manager: `m-${runId}`, node: 'remote', log: pino({ level: 'silent' }) });
    await volumes.create(ws, mountPath);
    try {
      const fs = volumes.open(ws, mountPath, { uid: 1000, gid: 1000 });
      await fs.mkdirAll('dir');
      await fs.writeFile('dir/hello.txt', 'hello from the helper\n');
      assert.equal(await fs.readFile('dir/hello.txt', 'utf8'), 'hello from the helper\n');
      assert.deepEqual(
        (await fs.readDir('dir')).map((e) => e.name),
        ['hello.txt'],
      );
      const box = await started({ binds: [{ hostPath: mountPath, containerPath: '/workspace' }], user: '1000' });
      assert.equal((await node.runtime.exec(box, ['cat', '/workspace/dir/hello.txt'])).stdout, 'hello from the helper\n');
      await node.runtime.exec(box, ['sh', '-c', 'echo from-box > /workspace/dir/box.txt']);
      await node.runtime.remove(box, { force: true });
      assert.equal(await fs.readFile('dir/box.txt', 'utf8'), 'from-box\n');
      assert.equal((await fs.stat('dir/box.txt')).size, 9);
    } finally {
      await volumes.remove(ws, mountPath);
      await volumes.close();
    }
    // The helper went with the workspace.
    await waitFor(async () => (await node.runtime.list({ labels: { 'sbx.workspace-id': ws.id } })).length === 0, { what: 'the helper to be removed' });
  });

  test("an agent's heartbeat reaches the client's heartbeats() stream through the node's relay", async () => {
    const ac = new AbortController();
    const seen: BoxHeartbeat[] = [];
    const reading = (async () => {
      for await (const hb of node.runtime.heartbeats(ac.signal)) seen.push(hb);
    })();
    const boxId = `sb-${runId}`.slice(0, 60);
    const id = await started({
      env: { SBX_API_URL: 'http://manager.invalid:8080', SBX_TOKEN: 'box-token-1', SBX_SANDBOX_ID: boxId, SBX_HEARTBEAT_INTERVAL_MS: '50' },
    });
    try {
      const url = await node.service.relayUrl();
      assert.ok(url);
      assert.equal((await node.runtime.exec(id, ['sh', '-c', 'echo $SBX_API_URL'])).stdout.trim(), url, "the box is told the node's relay");
      // The agent beats only while someone's work runs in the box.
      const work = await node.runtime.execStream(id, ['sleep', '300']);
      await waitFor(() => seen.some((h) => h.boxId === boxId), { what: 'a relayed heartbeat' });
      const hb = seen.find((h) => h.boxId === boxId)!;
      assert.equal(hb.token, 'box-token-1');
      assert.equal(hb.active, true);
      assert.ok(hb.processCount >= 1);
      await work.cancel();
      // A claimed spare learns its identity later: setBoxEnv rewrites SBX_API_URL the same way.
      await node.runtime.setBoxEnv(id, { SBX_API_URL: 'http://manager.invalid:8080', SBX_TOKEN: 'box-token-2' });
      const work2 = await node.runtime.execStream(id, ['sleep', '301']);
      await waitFor(() => seen.some((h) => h.token === 'box-token-2'), { what: 'a heartbeat with the new token' });
      await work2.cancel();
    } finally {
      ac.abort();
      await reading;
      await node.runtime.remove(id, { force: true });
    }
  });

  test('the relay takes exactly a heartbeat and answers anything else with a 4xx', async () => {
    const url = new URL((await node.service.relayUrl())!);
    const post = (path: string, body: string, headers: Record<string, string> = { authorization: 'Bearer t' }, method = 'POST') =>
      new Promise<number>((resolve, reject) => {
        const req = request({ host: url.hostname, port: url.port, path, method, headers: { ...headers, 'content-length': Buffer.byteLength(body) } }, (res) => {
          res.resume();
          resolve(res.statusCode!);
        });
        req.on('error', reject);
        req.end(body);
      });
    assert.equal(await post('/v1/boxes/sb-1/heartbeat', '{"active":true,"processCount":2}'), 204);
    assert.equal(await post('/v1/boxes/sb-1/heartbeat', '{"active":true,"processCount":2}', {}), 401);
    assert.equal(await post('/v1/boxes/sb-1/heartbeat', 'not json'), 400);
    assert.equal(await post('/v1/boxes/sb-1/heartbeat', '{"active":"yes"}'), 400);
    assert.equal(await post('/v1/boxes/sb-1/heartbeat', '{"processCount":-1}'), 400);
    assert.equal(await post('/v1/boxes/sb-1/heartbeat', JSON.stringify({ active: true, pad: 'x'.repeat(5000) })), 413);
    assert.equal(await post('/v1/boxes/../etc/heartbeat', '{}'), 404);
    assert.equal(await post('/v1/boxes/sb-1/exec', '{}'), 404);
    assert.equal(await post('/v1/boxes/sb-1/heartbeat', '', {}, 'GET'), 405);
    // Still serving.
    assert.equal(await post('/v1/boxes/sb-1/heartbeat', '{"active":true,"processCount":1}'), 204);
  });

  test('box ports are reached through the node (dialPort), and signals cross the exec stream', async () => {
    const id = await started({
      ports: [{ containerPort: 8081 }],
      dialAnyPort: true,
      cmd: ['sh', '-c', 'mkdir -p /tmp/w && echo served-by-box > /tmp/w/index.html && httpd -p 8080 -h /tmp/w && httpd -p 8081 -h /tmp/w && exec sleep 86400'],
    });
    try {
      const get = async (port: number) => {
        const conn = await node.runtime.dialPort(id, port);
        conn.end('GET / HTTP/1.0\r\n\r\n');
        const chunks: Buffer[] = [];
        for await (const c of conn) chunks.push(c as Buffer);
        return Buffer.concat(chunks).toString();
      };
      const served = (port: number) => waitFor(async () => (await get(port).catch(() => '')).includes('served-by-box'), { what: `port ${port} to serve` });
      await served(8081);
      await served(8080);
      await assert.rejects(node.runtime.dialPort(id, 9999), (e: SbxError) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'port_not_listening');

      // A single signal reaches the process itself, which handles it.
      const s = await node.runtime.execStream(id, ['sh', '-c', 'trap "echo got-usr1; exit 7" USR1; echo ready; while :; do sleep 0.05; done']);
      let out = '';
      s.stdout.on('data', (c: Buffer) => (out += c.toString()));
      await waitFor(() => out.includes('ready'), { what: 'the trap to be set' });
      assert.equal(typeof s.signal, 'function');
      await s.signal!('SIGUSR1');
      assert.equal(await s.wait(), 7);
      assert.match(out, /got-usr1/);
    } finally {
      await node.runtime.remove(id, { force: true });
    }
  });

  test("the node's SbxErrors arrive with the same code, message and details as the local runtime's", async () => {
    const id = await started();
    try {
      const errorOf = (p: Promise<unknown>) =>
        p.then(
          () => assert.fail('expected an error'),
          (e: SbxError) => ({ code: e.code, message: e.message, details: e.details }),
        );
      const remote = await errorOf(node.runtime.exec(id, ['true'], { workDir: '/no/such/dir' }));
      const mine = await errorOf(local.exec(id, ['true'], { workDir: '/no/such/dir' }));
      assert.equal(remote.code, 'invalid_argument');
      assert.deepEqual(remote, mine);
      const bad = await errorOf(node.runtime.create({ ...spec(), memory: 10 }));
      assert.deepEqual(bad, await errorOf(local.create({ ...spec(), memory: 10 })));
    } finally {
      await node.runtime.remove(id, { force: true });
    }
  });
});

const POLICY: EgressSpec = {
  mode: 'allowlist',
  allow: [
    { host: 'ok.test' },
    { host: '*.example.com', ports: [443, 443], protocol: 'tcp' },
    { host: '198.18.0.0/24' },
    { host: '2001:db8:5b::/64', ports: [7, 7], protocol: 'udp' },
  ],
  deny: [{ host: '198.18.0.2/32' }],
  endpoints: [{ host: '10.0.0.1/32', ports: [8080, 8080], protocol: 'tcp' }],
};
const NONE: EgressSpec = { mode: 'none', allow: [], deny: [], endpoints: [] };

/** The node's DockerRuntime with `overrides` in front (the rest bound to it). */
function over(docker: DockerRuntime, overrides: Partial<Record<keyof Runtime, unknown>>): Runtime {
  return new Proxy(docker, {
    get(target, key) {
      if (Object.hasOwn(overrides, key)) return overrides[key as keyof Runtime];
      const value = Reflect.get(target, key, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  }) as Runtime;
}

/** A runtime that enforces no egress (as DockerRuntime before egress policies, or an engine without them). */
const withoutEgress = (docker: DockerRuntime) =>
  over(docker, { capabilities: { ...docker.capabilities, egress: false }, setEgress: undefined, getEgress: undefined });

/** A runtime that says it enforces egress and records what the node hands it: what crossed the wire, exactly. */
function recordingEgress(docker: DockerRuntime, seen: Map<string, EgressSpec>): Runtime {
  return over(docker, {
    capabilities: { ...docker.capabilities, egress: true },
    create: async (spec: ContainerSpec) => {
      const { egress, ...rest } = spec;
      const id = await docker.create(rest);
      if (egress) seen.set(id, egress);
      return id;
    },
    setEgress: async (id: string, egress: EgressSpec) => void seen.set(id, egress),
    getEgress: async (id: string) => seen.get(id),
  });
}

describe('node service: egress policies', () => {
  const nodes: TestNode[] = [];
  const local = new DockerRuntime(testEnv.engineAddr);
  const node = async (name: string, runtime?: (docker: DockerRuntime) => Runtime) => {
    const n = await startTestNode({ name: `${name}-${process.pid}`, ...(runtime ? { runtime } : {}) });
    nodes.push(n);
    return n;
  };

  after(async () => {
    try {
      await assertNoContainersLeft(local, runId);
    } finally {
      for (const n of nodes) await n.close();
      await local.close();
    }
  });

  test("facts say whether the node's runtime enforces egress, and the client's capabilities follow them", async () => {
    const plain = await node('eg-plain');
    const enforced = local.capabilities.egress === true;
    assert.equal((await plain.runtime.facts()).egress, enforced);
    assert.equal(plain.runtime.capabilities.egress, enforced);
    const without = await node('eg-without', withoutEgress);
    assert.equal((await without.runtime.facts()).egress, false);
    assert.equal(without.runtime.capabilities.egress, false);
    const recording = await node('eg-recording', (d) => recordingEgress(d, new Map()));
    const fresh = recording.connect();
    assert.equal(fresh.capabilities.egress, undefined, 'unknown before the facts came');
    assert.equal((await fresh.facts()).egress, true);
    assert.equal(fresh.capabilities.egress, true);
  });

  test("the policy crosses the wire as it is: create's, setEgress's, getEgress's", async () => {
    const seen = new Map<string, EgressSpec>();
    const n = await node('eg-travel', (d) => recordingEgress(d, seen));
    const id = await n.runtime.create(spec({ egress: POLICY }));
    try {
      assert.deepEqual(seen.get(id), POLICY);
      assert.deepEqual(await n.runtime.getEgress(id), POLICY);
      await n.runtime.setEgress(id, NONE);
      assert.deepEqual(seen.get(id), NONE);
      assert.deepEqual(await n.runtime.getEgress(id), NONE);
      const open = await n.runtime.create(spec());
      assert.equal(await n.runtime.getEgress(open), undefined, 'none recorded');
      await n.runtime.remove(open);
    } finally {
      await n.runtime.remove(id, { force: true });
    }
  });

  test("another node's (another Manager's) box is not_found for setEgress and getEgress, and its policy untouched", async () => {
    const seen = new Map<string, EgressSpec>();
    const mine = await node('eg-mine', (d) => recordingEgress(d, seen));
    const theirs = await node('eg-theirs', (d) => recordingEgress(d, seen));
    const id = await theirs.runtime.create(spec({ egress: POLICY }));
    try {
      for (const call of [() => mine.runtime.setEgress(id, NONE), () => mine.runtime.getEgress(id), () => mine.runtime.setEgress(id.slice(0, 12), NONE)]) {
        await assert.rejects(call(), (e: SbxError) => isSbxError(e, 'not_found') && !e.message.includes('sbx.node'));
      }
      assert.deepEqual(seen.get(id), POLICY, 'untouched');
    } finally {
      await theirs.runtime.remove(id, { force: true });
    }
  });

  test("a node whose runtime enforces no egress: a create with a policy is not_available and creates nothing; setEgress, getEgress not_available; 'all' asks nothing of it", async () => {
    const n = await node('eg-none', withoutEgress);
    await assert.rejects(n.runtime.create(spec({ egress: POLICY })), (e: SbxError) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'no_egress');
    assert.equal((await local.list({ labels })).length, 0, 'nothing was created');
    const all: EgressSpec = { ...NONE, mode: 'all' };
    const id = await n.runtime.create(spec({ egress: all }));
    try {
      for (const call of [() => n.runtime.setEgress(id, NONE), () => n.runtime.getEgress(id)]) {
        await assert.rejects(call(), (e: SbxError) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'no_egress');
      }
      await n.runtime.setEgress(id, all);
    } finally {
      await n.runtime.remove(id);
    }
  });

  test('the node checks the shape of every policy its Manager sends (invalid_argument naming the field, before ownership or the engine; bounded)', async () => {
    const seen = new Map<string, EgressSpec>();
    const n = await node('eg-shape', (d) => recordingEgress(d, seen));
    const bad = async (call: Promise<unknown>, field: string) =>
      assert.rejects(call, (e: SbxError) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === field, field);
    const raw = (value: unknown) => value as EgressSpec;
    // An id that names nothing: the shape is refused first.
    await bad(n.runtime.setEgress('no-such-box', raw({ ...POLICY, allow: [{ host: '198.18.0.1/24' }] })), 'egress.allow.0.host');
    await bad(n.runtime.setEgress('no-such-box', raw({ ...POLICY, deny: [{ host: 'Evil.example' }] })), 'egress.deny.0.host');
    await bad(n.runtime.setEgress('no-such-box', raw({ ...POLICY, allow: [{ host: 'ok.test', protocol: 'udp' }] })), 'egress.allow.0.protocol');
    await bad(n.runtime.setEgress('no-such-box', raw({ ...POLICY, endpoints: [{ host: 'api.example', ports: [1, 1] }] })), 'egress.endpoints.0.host');
    await bad(n.runtime.setEgress('no-such-box', raw({ ...POLICY, extra: true })), 'egress');
    await bad(n.runtime.setEgress('no-such-box', raw(null)), 'egress');
    const many = Array.from({ length: 100_000 }, (_, i) => ({ host: `h${i}.test` }));
    await bad(n.runtime.setEgress('no-such-box', raw({ ...POLICY, allow: many })), 'egress.allow');
    await bad(n.runtime.create(spec({ egress: raw({ ...POLICY, allow: [{ host: 'ok.test', ports: [443, 80] }] }) })), 'egress.allow.0.ports');
    // Beyond the shape every runtime checks: each entry, as a node takes its Manager's bytes.
    await bad(n.runtime.create(spec({ egress: raw({ ...POLICY, deny: [{ host: '198.18.0.1/24' }] }) })), 'egress.deny.0.host');
    assert.equal((await local.list({ labels })).length, 0, 'nothing was created');
    assert.equal(seen.size, 0, 'the runtime saw none of it');
  });

  test(
    'on the real engine, once DockerRuntime enforces egress: create, setEgress and getEgress through the node',
    { skip: !local.capabilities.egress && 'DockerRuntime enforces no egress yet' },
    async () => {
      const n = await node('eg-real');
      const id = await n.runtime.create(spec({ egress: POLICY, cmd: ['sleep', '300'] }));
      try {
        await n.runtime.start(id);
        assert.deepEqual(await n.runtime.getEgress(id), POLICY);
        await n.runtime.setEgress(id, NONE);
        assert.deepEqual(await n.runtime.getEgress(id), NONE);
      } finally {
        await n.runtime.remove(id, { force: true });
      }
    },
  );
});
