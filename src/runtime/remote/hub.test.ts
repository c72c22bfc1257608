// The trust between a Manager and its nodes, over real mutual TLS on 127.0.0.1 with `sbx node`'s
// server on the local engine: who gets in, who is refused (and that it is logged), revocation,
// and a node that goes and comes back. The multi-machine behaviour is src/sandbox/remote-pool.test.ts.
import assert from 'node:assert/strict';
import { cp, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { compressionBrotli, compressionGzip } from '@connectrpc/connect-node';
import { isSbxError } from '../../errors.js';
import type { SbxError } from '../../errors.js';
import { startNode } from '../../node/server.js';
import { readNodeState, writeNodeState } from '../../node/state.js';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { fakenet } from '../../testing/fakenet.js';
import { DockerRuntime } from '../docker/runtime.js';
import type { EgressSpec } from '../types.js';
import { LogLines, startJoinedNode, startTestHub } from '../../testing/remote-node.js';
import { waitFor, within } from '../../testing/wait.js';
import { createIdentity } from './identity.js';
import { dialPinned } from './session.js';
import { splitHostPort } from './hub.js';

const cleanups: (() => Promise<void>)[] = [];
after(async () => {
  // Bounded: a cleanup that hangs fails the file, it does not hold the run.
  for (const c of cleanups.reverse()) await within(c(), 'a cleanup').catch(() => undefined);
});

describe('node hub: trust over mutual TLS', () => {
  test('a direct node joins, comes online with its facts, and serves the engine', async () => {
    const logs = new LogLines();
    const { hub, close } = await startTestHub({ log: logs.logger });
    cleanups.push(close);
    const node = await startJoinedNode(hub, { name: 'direct-1' });
    cleanups.push(() => node.close());
    const [info] = hub.nodes();
    assert.equal(info!.state, 'online');
    assert.equal(info!.mode, 'direct');
    assert.match(info!.fingerprint, /^sha256:[0-9a-f]{64}$/);
    assert.equal(info!.facts?.name, 'direct-1');
    assert.ok((info!.facts?.cpus ?? 0) > 0 && (info!.facts?.memoryBytes ?? 0) > 0);
    assert.ok(info!.facts?.ociRuntimes.includes('runc'));
    await node.runtime().ping();
  });

  test('the node wire is not compressed: exec output crosses as it is (gzip cost ~20 ms of CPU per MiB on each side)', async () => {
    const { hub, close } = await startTestHub();
    cleanups.push(close);
    const node = await startJoinedNode(hub, { name: 'plain-1' });
    cleanups.push(() => node.close());
    // Both ends run in this process: any gzip or brotli of Connect's, either way, is counted here.
    const used: string[] = [];
    const restore: (() => void)[] = [];
    for (const c of [compressionGzip, compressionBrotli]) {
      const { compress, decompress } = c;
      c.compress = (bytes) => (used.push(`${c.name} compress`), compress.call(c, bytes));
      c.decompress = (bytes, max) => (used.push(`${c.name} decompress`), decompress.call(c, bytes, max));
      restore.push(() => Object.assign(c, { compress, decompress }));
    }
    const rt = node.runtime();
    const id = await rt.create({ image: testEnv.baseImage, cmd: ['sleep', '300'], labels: { 'sbx.test': 'plain-wire' } });
    try {
      await rt.start(id);
      // Messages far over Connect's 1 KiB threshold for compressing one.
      const out = await rt.exec(id, ['head', '-c', String(256 * 1024), '/dev/zero']);
      assert.equal(out.exitCode, 0);
      assert.equal(out.stdout.length, 256 * 1024);
      assert.deepEqual(used, []);
    } finally {
      for (const r of restore) r();
      await rt.remove(id, { force: true });
    }
  });

  test('a node with a forged credential is refused and logged; a Manager of another identity cannot get into a node', async () => {
    const logs = new LogLines();
    const { hub, close } = await startTestHub({ log: logs.logger });
    cleanups.push(close);
    // Joined for real, then its credential forged before it first runs.
    const node = await startJoinedNode(hub, { name: 'forged', start: false });
    cleanups.push(() => node.close());
    const state = await readNodeState(node.dataDir);
    await writeNodeState(node.dataDir, { ...state, credential: 'sbxnode_' + 'A'.repeat(43) });
    node.running = await startNode({ dataDir: node.dataDir, log: new LogLines().logger, engineAddr: testEnv.engineAddr, pingIntervalMs: 500 });
    await waitFor(() => logs.has('credential does not match'), { what: 'the refusal to be logged' });
    assert.notEqual(hub.link('forged')!.state, 'online');

    // An impostor Manager: its own key, the node's pinned certificate. The node's TLS refuses it.
    const [host, port] = splitHostPort(node.address!);
    const impostor = await createIdentity('impostor');
    const nodeCert = hub.trust.get('forged')!;
    const refused = await dialPinned(host, port, impostor, nodeCert, 10_000, 'node').then(
      async (socket) => {
        // TLS 1.3: the client finishes first; the server's refusal arrives as the socket closes.
        await new Promise((resolve) => socket.once('close', resolve));
        return true;
      },
      () => true,
    );
    assert.equal(refused, true);
  });

  test('a node presenting a certificate other than the pinned one is refused', async () => {
    const logs = new LogLines();
    const { hub, close } = await startTestHub({ log: logs.logger });
    cleanups.push(close);
    const node = await startJoinedNode(hub, { name: 'swapped', start: false });
    cleanups.push(() => node.close());
    // Same name, same credential, another key: someone who stole node.json but not the key.
    const other = await createIdentity('thief');
    await writeFile(join(node.dataDir, 'identity', 'tls.key'), other.key);
    await writeFile(join(node.dataDir, 'identity', 'tls.crt'), other.cert);
    node.running = await startNode({ dataDir: node.dataDir, log: new LogLines().logger, engineAddr: testEnv.engineAddr, pingIntervalMs: 500 });
    await waitFor(() => /certificate other than the one pinned/.test(hub.link('swapped')!.error ?? ''), { what: 'the pin mismatch' });
    assert.equal(hub.link('swapped')!.state, 'offline');
  });

  test('reverse mode: the node dials in; a second node with the same identity is refused and logged while the first is connected', async () => {
    const logs = new LogLines();
    const { hub, close } = await startTestHub({ log: logs.logger, listen: '127.0.0.1:0' });
    cleanups.push(close);
    const node = await startJoinedNode(hub, { name: 'rev-1', mode: 'reverse' });
    cleanups.push(() => node.close());
    assert.equal(hub.nodes()[0]!.mode, 'reverse');
    await node.runtime().ping();
    const first = node.runtime();

    // A copy of the node's whole data directory: key, certificate and credential.
    const twinDir = node.dataDir + '-twin';
    await cp(node.dataDir, twinDir, { recursive: true });
    cleanups.push(() => rm(twinDir, { recursive: true, force: true }));
    const twin = await startNode({ dataDir: twinDir, log: new LogLines().logger, engineAddr: testEnv.engineAddr, pingIntervalMs: 500 });
    cleanups.push(() => twin.close());
    await waitFor(() => logs.has('refused a second connection'), { what: 'the twin to be refused and logged' });
    assert.equal(node.runtime(), first, 'the first connection is still the one in use');
    await node.runtime().ping();
  });

  test('revocation ends the connection at once and refuses the node from then on', async () => {
    const logs = new LogLines();
    const { hub, close } = await startTestHub({ log: logs.logger, listen: '127.0.0.1:0' });
    cleanups.push(close);
    const direct = await startJoinedNode(hub, { name: 'rv-direct' });
    const reverse = await startJoinedNode(hub, { name: 'rv-reverse', mode: 'reverse' });
    cleanups.push(
      () => direct.close(),
      () => reverse.close(),
    );
    const rt = reverse.runtime();
    await hub.revoke('rv-reverse');
    await hub.revoke('rv-direct');
    assert.equal(hub.link('rv-reverse')!.state, 'revoked');
    await assert.rejects(rt.ping(), (e) => isSbxError(e, 'runtime_unavailable'));
    // The reverse node keeps redialling; each attempt is refused by TLS (its certificate is no longer a CA of the listener).
    await waitFor(() => logs.has('refused a node connection'), { what: 'the revoked node to be refused' });
    assert.equal(hub.link('rv-reverse')!.state, 'revoked');
    assert.equal(hub.link('rv-direct')!.state, 'revoked');
    assert.equal(
      hub.nodes().every((n) => n.revokedAt !== undefined),
      true,
    );
  });

  test('nothing secret is on disk in clear on the Manager side', async () => {
    const { hub, dataDir, close } = await startTestHub();
    cleanups.push(close);
    const node = await startJoinedNode(hub, { name: 'disk' });
    cleanups.push(() => node.close());
    const credential = (await readNodeState(node.dataDir)).credential;
    const kept = await readFile(join(dataDir, 'nodes', 'nodes.json'), 'utf8');
    assert.equal(kept.includes(credential), false);
  });
});

describe('node hub: egress policies over joined nodes', () => {
  const runId = testRunId('hub-egress');
  const labels = { [TEST_LABEL]: runId, 'sbx.managed-by': 'sbx' };
  const policy: EgressSpec = {
    mode: 'allowlist',
    allow: [{ host: 'ok.test' }, { host: '198.18.0.0/24', ports: [80, 80], protocol: 'tcp' }],
    deny: [],
    endpoints: [],
  };
  const none: EgressSpec = { mode: 'none', allow: [], deny: [], endpoints: [] };
  const docker = new DockerRuntime(testEnv.engineAddr);
  after(async () => {
    try {
      await assertNoContainersLeft(docker, runId);
    } finally {
      await docker.close();
    }
  });

  test("a node's facts say whether its engine enforces egress; the link's runtime and the pool over it follow; a policy the node cannot enforce creates nothing", async () => {
    const { hub, close } = await startTestHub();
    cleanups.push(close);
    const node = await startJoinedNode(hub, { name: 'egress-1' });
    cleanups.push(() => node.close());
    const enforced = docker.capabilities.egress === true;
    assert.equal(hub.nodes()[0]!.facts?.egress, enforced);
    assert.equal(node.runtime().capabilities.egress, enforced);
    const pool = hub.runtimeFor('sbx://egress-1');
    assert.equal(pool.capabilities.egress, enforced);
    if (!enforced) {
      await assert.rejects(
        pool.create({ image: testEnv.baseImage, labels, egress: policy }),
        (e: SbxError) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'no_egress',
      );
      await assert.rejects(pool.setEgress!('egress-1:abc', none), (e: SbxError) => isSbxError(e, 'not_available') && e.details?.['node'] === 'egress-1');
      assert.deepEqual(await docker.list({ labels: { [TEST_LABEL]: runId } }), [], 'nothing was created');
      return;
    }
    const id = await pool.create({ image: testEnv.baseImage, cmd: ['sleep', '300'], labels, egress: policy });
    try {
      await pool.start(id);
      assert.deepEqual(await pool.getEgress!(id), policy);
      await pool.setEgress!(id, none);
      assert.deepEqual(await pool.getEgress!(id), none);
    } finally {
      await pool.remove(id, { force: true });
    }
  });

  test(
    'packets from a box on a node follow its policy, at create and after setEgress: addresses, ports, names (the fake internet)',
    { skip: !docker.capabilities.egress && 'DockerRuntime enforces no egress yet' },
    async () => {
      const net = await fakenet();
      // `sbx node` takes its enforcer's upstream resolvers from SBX_EGRESS_DNS, as a user runs it.
      const dnsBefore = process.env['SBX_EGRESS_DNS'];
      process.env['SBX_EGRESS_DNS'] = net.dns;
      const { hub, close } = await startTestHub();
      cleanups.push(close);
      let node;
      try {
        node = await startJoinedNode(hub, { name: 'egress-packets' });
      } finally {
        if (dnsBefore === undefined) delete process.env['SBX_EGRESS_DNS'];
        else process.env['SBX_EGRESS_DNS'] = dnsBefore;
      }
      cleanups.push(() => node.close());
      const pool = hub.runtimeFor('sbx://egress-packets');
      const get = async (id: string, url: string) => (await pool.exec(id, ['wget', '-q', '-T', '5', '-O', '-', url])).exitCode === 0;
      const resolves = async (id: string, name: string) => (await pool.exec(id, ['nslookup', name])).exitCode === 0;
      const okOnly: EgressSpec = {
        mode: 'allowlist',
        allow: [{ host: `${net.ok.address}/32`, ports: [80, 80], protocol: 'tcp' }, { host: net.api.name }],
        deny: [],
        endpoints: [],
      };
      const id = await pool.create({ image: testEnv.baseImage, cmd: ['sleep', '300'], labels, egress: okOnly });
      try {
        await pool.start(id);
        assert.equal(await get(id, `http://${net.ok.address}/`), true, 'the allowed address and port');
        assert.equal(await get(id, `http://${net.ok.address}:8000/`), false, 'another port of it');
        assert.equal(await get(id, `http://${net.other.address}/`), false, 'an address not allowed');
        assert.equal(await get(id, `http://${net.api.name}/`), true, 'an allowed name, through its address');
        assert.equal(await resolves(id, net.other.name), false, 'a name not allowed does not resolve');
        assert.equal(await get(id, `http://${net.metadata}/`), false, 'the metadata service');
        await pool.setEgress!(id, { mode: 'allowlist', allow: [{ host: `${net.other.address}/32` }], deny: [], endpoints: [] });
        assert.equal(await get(id, `http://${net.other.address}/`), true, 'allowed now');
        assert.equal(await get(id, `http://${net.ok.address}/`), false, 'denied now');
      } finally {
        await pool.remove(id, { force: true });
      }
    },
  );

  test("another Manager's box on the same engine: its node refuses setEgress and getEgress as not_found", async () => {
    const mine = await startTestHub();
    const theirs = await startTestHub();
    cleanups.push(mine.close, theirs.close);
    const myNode = await startJoinedNode(mine.hub, { name: 'egress-mine' });
    const theirNode = await startJoinedNode(theirs.hub, { name: 'egress-theirs' });
    cleanups.push(
      () => myNode.close(),
      () => theirNode.close(),
    );
    const id = await theirNode.runtime().create({ image: testEnv.baseImage, labels });
    try {
      for (const call of [() => myNode.runtime().setEgress(id, none), () => myNode.runtime().getEgress(id)]) {
        await assert.rejects(call(), (e: SbxError) => isSbxError(e, 'not_found') && !e.message.includes('sbx.node'));
      }
    } finally {
      await theirNode.runtime().remove(id, { force: true });
    }
  });
});
