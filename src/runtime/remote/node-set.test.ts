/**
 * NodeSet: one Runtime over several machines. The logic (ids, placement, offline nodes, merged
 * streams) with in-memory runtimes as the nodes; then a Manager over a NodeSet (warm spares,
 * an offline node's boxes across a cleanup pass); then two members on the real engine.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { after, describe, test } from 'node:test';
import { SbxError, isSbxError } from '../../errors.js';
import { Manager } from '../../sandbox/manager.js';
import { CountingRuntime } from '../../testing/counting-runtime.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { MemoryRuntime } from '../../testing/memory-runtime.js';
import { waitFor, within } from '../../testing/wait.js';
import { DockerRuntime } from '../docker/runtime.js';
import type {
  ContainerEvent,
  ContainerListOptions,
  ContainerSpec,
  EgressSpec,
  Runtime,
  WorkspaceHelper,
  WorkspaceHelperOptions,
  WorkspaceVolumeOptions,
} from '../types.js';
import { IMAGE_NODE_LABEL, MEMORY_LABEL, NodeSet } from './node-set.js';
import type { NodeMember } from './node-set.js';

const IMAGE = testEnv.baseImage;
const MiB = 1024 * 1024;
const MANAGED = { 'sbx.managed-by': 'sbx' };
const box: ContainerSpec = { image: IMAGE, labels: MANAGED };
let seq = 0;

/** A node: an in-memory runtime with workspace volumes, as a RemoteRuntime has them. */
class NodeRuntime extends MemoryRuntime {
  readonly vols = new Map<string, Record<string, string>>();
  /** The spec of each create, as the node got it. */
  readonly specs = new Map<string, ContainerSpec>();

  override async create(spec: ContainerSpec): Promise<string> {
    const id = await super.create(spec);
    this.specs.set(id, spec);
    return id;
  }

  async createWorkspaceVolume(hostPath: string, opts: WorkspaceVolumeOptions = {}): Promise<string> {
    await this.ping();
    if (this.vols.has(hostPath) && opts.exclusive) throw new SbxError('conflict', `volume ${hostPath} exists`);
    this.vols.set(hostPath, { ...opts.labels });
    return hostPath;
  }

  async removeWorkspaceVolume(hostPath: string): Promise<void> {
    await this.ping();
    if (!this.vols.delete(hostPath)) throw new SbxError('not_found', `volume ${hostPath}: no such volume`);
  }

  async startWorkspaceHelper(hostPath: string, opts: WorkspaceHelperOptions): Promise<WorkspaceHelper> {
    if (!this.vols.has(hostPath)) throw new SbxError('not_found', `volume ${hostPath}: no such volume`);
    const id = await this.create({ image: IMAGE, labels: opts.labels });
    await this.start(id);
    return { id, tool: '/sbx/tool', root: '/workspace' };
  }

  async listVolumes(): Promise<{ hostPath: string; labels: Record<string, string> }[]> {
    await this.ping();
    return [...this.vols].map(([hostPath, labels]) => ({ hostPath, labels }));
  }

  readonly declared: string[] = [];

  async allowHostEndpoints(endpoints: { address: string; port: number }[]): Promise<void> {
    await this.ping();
    this.declared.push(endpoints.map((e) => `${e.address}:${e.port}`).join(','));
  }
}

/** A node whose runtime enforces egress, in memory: the policy a create or setEgress gave each box. */
class EgressNode extends NodeRuntime {
  readonly egress = new Map<string, EgressSpec>();

  constructor(address: string) {
    super({ address, capabilities: { egress: true } });
  }

  override async create(spec: ContainerSpec): Promise<string> {
    const id = await super.create(spec);
    if (spec.egress) this.egress.set(id, spec.egress);
    return id;
  }

  async setEgress(id: string, egress: EgressSpec): Promise<void> {
    await this.inspect(id);
    this.egress.set(id, egress);
  }

  async getEgress(id: string): Promise<EgressSpec | undefined> {
    await this.inspect(id);
    return this.egress.get(id);
  }
}

function cluster(names: string[], opts: { volumes?: boolean; egress?: string[]; each?: (name: string) => Partial<NodeMember> } = {}) {
  const make = (name: string) =>
    opts.egress?.includes(name) ? new EgressNode(`node-${name}-${++seq}`) : new NodeRuntime({ address: `node-${name}-${++seq}` });
  const runtimes = new Map(names.map((name) => [name, make(name)]));
  const members: NodeMember[] = names.map((name) => ({ name, runtime: runtimes.get(name)!, state: 'online', draining: false, ...opts.each?.(name) }));
  const set = new NodeSet(`nodes-${seq}`, { members: () => members, workspaceVolumes: opts.volumes ?? false, recheckMs: 20 });
  const node = (name: string) => members.find((m) => m.name === name)!;
  const rt = (name: string) => runtimes.get(name)!;
  return {
    members,
    set,
    node,
    rt,
    down(name: string) {
      node(name).state = 'offline';
      rt(name).setReachable(false);
      set.membersChanged();
    },
    up(name: string) {
      rt(name).setReachable(true);
      node(name).state = 'online';
      set.membersChanged();
    },
  };
}

async function started(set: Runtime, spec: ContainerSpec = box): Promise<string> {
  const id = await set.create(spec);
  await set.start(id);
  return id;
}

/** A box started on the named node (the others drain meanwhile). */
async function startedOn(c: ReturnType<typeof cluster>, name: string, spec: ContainerSpec = box): Promise<string> {
  const draining = c.members.map((m) => m.draining);
  for (const m of c.members) m.draining = m.name !== name;
  try {
    return await started(c.set, spec);
  } finally {
    c.members.forEach((m, i) => (m.draining = draining[i]!));
  }
}

/** The node and the node's own id of a NodeSet id. */
function split(id: string): [string, string] {
  const i = id.indexOf(':');
  return [id.slice(0, i), id.slice(i + 1)];
}

function rejectsWith(code: string, check?: (e: SbxError) => void) {
  return (err: unknown) => {
    assert.ok(isSbxError(err), `an SbxError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    check?.(err);
    return true;
  };
}

describe('NodeSet: ids', () => {
  test('a container is <node>:<its id>; every call about it goes to its node; an id naming no node is not_found', async () => {
    const c = cluster(['a', 'b']);
    c.rt('a').onExec = () => ({ stdout: 'on a' });
    c.rt('b').onExec = () => ({ stdout: 'on b' });
    const x = await started(c.set);
    const y = await started(c.set);
    assert.match(x, /^a:[0-9a-f]{64}$/);
    assert.match(y, /^b:[0-9a-f]{64}$/);
    assert.equal(c.set.nodeOf(y), 'b');
    const info = await c.set.inspect(y);
    assert.equal(info.id, y);
    assert.equal(info.running, true);
    assert.equal((await c.rt('b').inspect(split(y)[1])).running, true, 'started on its node');
    assert.equal((await c.set.exec(x, ['x'])).stdout, 'on a');
    assert.equal((await c.set.exec(y, ['x'])).stdout, 'on b');
    assert.deepEqual(new Set((await c.set.list()).map((s) => s.id)), new Set([x, y]));
    for (const bad of ['c:' + split(x)[1], split(x)[1], 'a:', ':abc']) {
      await assert.rejects(c.set.inspect(bad), rejectsWith('not_found'), bad);
    }
    await c.set.stop(y);
    await c.set.remove(y);
    assert.deepEqual(await c.rt('b').list(), []);
    await assert.rejects(c.set.inspect(y), rejectsWith('not_found'));
  });

  test("a node's errors name the NodeSet's id and the node, never the node's bare id", async () => {
    const c = cluster(['a']);
    const x = await c.set.create(box);
    const local = split(x)[1];
    await assert.rejects(
      c.set.exec(x, ['true']),
      rejectsWith('conflict', (e) => {
        assert.ok(e.message.includes(x), e.message);
        assert.ok(!e.message.replaceAll(x, '').includes(local), `no bare id in: ${e.message}`);
        assert.equal(e.details?.['node'], 'a');
      }),
    );
  });
});

describe('NodeSet: placement', () => {
  test('least loaded first (its containers of sbx), ties by name', async () => {
    const c = cluster(['b', 'a']);
    c.rt('a').injectContainer({ labels: MANAGED });
    c.rt('a').injectContainer({ labels: MANAGED });
    c.rt('b').injectContainer({ labels: MANAGED });
    c.rt('b').injectContainer({ labels: {} }); // not sbx's: not counted
    assert.equal(c.set.nodeOf(await c.set.create(box)), 'b');
    assert.equal(c.set.nodeOf(await c.set.create(box)), 'a', 'a tie goes to the first name');
    assert.equal(c.set.nodeOf(await c.set.create(box)), 'b');
  });

  test('an image on one node (IMAGE_NODE_LABEL: an archive, a snapshot): created there though another is less loaded; full there is limit_exceeded; naming no node is not_found', async () => {
    const c = cluster(['a', 'b'], { each: () => ({ maxBoxes: 2 }) });
    const x = await startedOn(c, 'a');
    c.rt('a').injectContainer({ labels: MANAGED });
    await c.set.remove(x, { force: true });
    const onA = { ...box, labels: { ...box.labels, [IMAGE_NODE_LABEL]: 'a' } };
    const y = await c.set.create(onA);
    assert.equal(c.set.nodeOf(y), 'a', 'a has 1 box, b none: placed where the image is all the same');
    await assert.rejects(
      c.set.create(onA),
      rejectsWith('limit_exceeded', (e) =>
        assert.match(e.message, /^node 'a', which holds the box's workspace or image, can take the box now \(a: full \(2 of 2 boxes\)\)/),
      ),
    );
    await assert.rejects(c.set.create({ ...box, labels: { ...box.labels, [IMAGE_NODE_LABEL]: 'z' } }), rejectsWith('not_found'));
  });

  test('maxBoxes: concurrent creates count the ones in flight; a full node is skipped; all full is limit_exceeded saying so', async () => {
    const c = cluster(['a', 'b'], { each: () => ({ maxBoxes: 2 }) });
    const ids = await Promise.all([1, 2, 3, 4].map(() => c.set.create(box)));
    assert.deepEqual(ids.map((id) => c.set.nodeOf(id)).sort(), ['a', 'a', 'b', 'b']);
    await assert.rejects(
      c.set.create(box),
      rejectsWith('limit_exceeded', (e) => {
        assert.match(e.message, /a: full \(2 of 2 boxes\); b: full \(2 of 2 boxes\)/);
        assert.deepEqual(e.details?.['nodes'], { a: 'full (2 of 2 boxes)', b: 'full (2 of 2 boxes)' });
      }),
    );
    await c.set.remove(
      ids.find((id) => c.set.nodeOf(id) === 'b')!,
      { force: true },
    );
    assert.equal(c.set.nodeOf(await c.set.create(box)), 'b', 'room again on b');
  });

  test('memory: a node without the memory free is skipped; a stopped box holds none', async () => {
    const c = cluster(['a', 'b'], { each: (n) => ({ resources: { cpus: 2, memoryBytes: (n === 'a' ? 1024 : 8192) * MiB } }) });
    c.rt('b').injectContainer({ labels: MANAGED });
    const big = await started(c.set, { ...box, memory: 768 * MiB });
    assert.equal(c.set.nodeOf(big), 'a', 'least loaded');
    assert.equal((await c.set.inspect(big)).labels[MEMORY_LABEL], String(768 * MiB), 'the limit is on the container, for the next list');
    const next = await c.set.create({ ...box, memory: 512 * MiB });
    assert.equal(c.set.nodeOf(next), 'b', 'a has 256 MiB left: b, though a tie would go to a');
    await c.set.stop(big);
    assert.equal(c.set.nodeOf(await c.set.create({ ...box, memory: 512 * MiB })), 'a', 'the stopped box holds no memory');
    await assert.rejects(
      c.set.create({ ...box, memory: 9000 * MiB }),
      rejectsWith('limit_exceeded', (e) => assert.match(e.message, /a: not enough memory .*; b: not enough memory/)),
    );
  });

  test('draining: no new box there; all draining is limit_exceeded saying so; none online is runtime_unavailable', async () => {
    const c = cluster(['a', 'b']);
    c.node('a').draining = true;
    assert.equal(c.set.nodeOf(await c.set.create(box)), 'b');
    assert.equal(c.set.nodeOf(await c.set.create(box)), 'b', 'b has more boxes, a drains');
    c.node('b').draining = true;
    await assert.rejects(
      c.set.create(box),
      rejectsWith('limit_exceeded', (e) => assert.match(e.message, /a: draining; b: draining/)),
    );
    c.node('a').state = 'offline';
    c.node('b').state = 'connecting';
    await assert.rejects(
      c.set.create(box),
      rejectsWith('runtime_unavailable', (e) => assert.deepEqual(e.details?.['nodes'], { a: 'offline', b: 'connecting' })),
    );
  });

  test("workspace volumes: placed like a box; a box mounting one goes to its node (draining too); a new NodeSet learns it from the nodes' lists", async () => {
    const c = cluster(['a', 'b'], { volumes: true });
    c.rt('a').injectContainer({ labels: MANAGED });
    const path = '/data/workspaces/ws-1';
    await c.set.createWorkspaceVolume!(path, { labels: { 'sbx.workspace-id': 'ws-1' } });
    assert.ok(c.rt('b').vols.has(path), 'the least loaded node holds it');
    c.rt('b').injectContainer({ labels: MANAGED });
    c.rt('b').injectContainer({ labels: MANAGED });
    c.node('b').draining = true;
    const mounting = { ...box, binds: [{ hostPath: path, containerPath: '/workspace' }] };
    assert.equal(c.set.nodeOf(await c.set.create(mounting)), 'b', 'on the volume, though b is loaded and draining');
    assert.equal(c.set.nodeOf(await c.set.create(box)), 'a', 'other boxes avoid the draining node');
    const helper = await c.set.startWorkspaceHelper!(path, { labels: MANAGED, uid: 1000, gid: 1000 });
    assert.match(helper.id, /^b:[0-9a-f]{64}$/);
    await c.set.remove(helper.id, { force: true });

    const fresh = new NodeSet('fresh', { members: () => c.members, workspaceVolumes: true });
    assert.equal(fresh.nodeOf(await fresh.create(mounting)), 'b', 'learned from listVolumes');
    assert.deepEqual(await fresh.listVolumes!(), [{ hostPath: path, labels: { 'sbx.workspace-id': 'ws-1' } }]);

    c.down('b');
    await assert.rejects(
      c.set.create(mounting),
      rejectsWith('runtime_unavailable', (e) => {
        assert.equal(e.details?.['node'], 'b');
        assert.match(e.message, /node 'b' is offline/);
      }),
    );
    await assert.rejects(c.set.startWorkspaceHelper!(path, { labels: {}, uid: 0, gid: 0 }), rejectsWith('runtime_unavailable'));
    const another = new NodeSet('another', { members: () => c.members, workspaceVolumes: true });
    await assert.rejects(
      another.create(mounting),
      rejectsWith('runtime_unavailable', (e) => assert.equal(e.details?.['node'], 'b')),
      'b offline and never asked: the volume may be there, so not placed elsewhere',
    );
    c.up('b');
    await c.set.removeWorkspaceVolume!(path);
    assert.equal(c.rt('b').vols.size, 0);
    await assert.rejects(another.create(mounting), rejectsWith('not_found'));
  });
});

describe('NodeSet: an offline node', () => {
  test('its boxes are listed as last known; every call for them fails fast with runtime_unavailable naming it, calling nothing', async () => {
    const names = ['a', 'b'];
    const counting = new Map(names.map((n) => [n, new CountingRuntime(new NodeRuntime({ address: `off-${n}-${++seq}` }))]));
    const members: NodeMember[] = names.map((name) => ({ name, runtime: counting.get(name)!, state: 'online', draining: false }));
    const set = new NodeSet('off', { members: () => members });
    const onA = await started(set);
    const stoppedOnB = await started(set);
    await set.stop(stoppedOnB);
    const before = await set.list({ labels: MANAGED });
    members[0]!.draining = true;
    const unlistedOnB = await set.create(box); // never listed before b goes away: known from its create
    members[0]!.draining = false;
    assert.equal(set.nodeOf(unlistedOnB), 'b');
    const b = members[1]!;
    b.state = 'offline';
    (counting.get('b')!.inner as NodeRuntime).setReachable(false);
    counting.get('b')!.reset();

    const listed = await set.list({ labels: MANAGED });
    assert.deepEqual(new Set(listed.map((s) => s.id)), new Set([onA, stoppedOnB, unlistedOnB]));
    const stopped = listed.find((s) => s.id === stoppedOnB)!;
    assert.deepEqual(
      stopped,
      before.find((s) => s.id === stoppedOnB),
      'as it was last listed',
    );
    assert.equal(stopped.running, false);
    assert.deepEqual(
      (await set.list({ labels: MANAGED, all: false })).map((s) => s.id),
      [onA],
      'the list options apply to what is known',
    );
    const calls: [string, () => Promise<unknown>][] = [
      ['inspect', () => set.inspect(stoppedOnB)],
      ['exec', () => set.exec(stoppedOnB, ['true'])],
      ['start', () => set.start(stoppedOnB)],
      ['remove', () => set.remove(stoppedOnB, { force: true })],
      ['logs', () => set.logs(stoppedOnB)],
      ['dialPort', () => set.dialPort(stoppedOnB, 80)],
    ];
    for (const [what, call] of calls) {
      await assert.rejects(
        call(),
        rejectsWith('runtime_unavailable', (e) => {
          assert.equal(e.details?.['node'], 'b', what);
          assert.match(e.message, /node 'b' is offline/, what);
        }),
      );
    }
    assert.equal(counting.get('b')!.total(), 0, 'nothing asked of the offline node');
    assert.equal((await set.inspect(onA)).running, true, 'the other node answers');
    assert.equal(set.nodeOf((await set.create(box))!), 'a', 'new boxes go to the online node');

    // Marked online by its connection, but not answering: still the last known list, not an error.
    b.state = 'online';
    assert.ok((await set.list({ labels: MANAGED })).some((s) => s.id === stoppedOnB));
    b.state = 'offline';
    members[0]!.state = 'offline';
    await assert.rejects(set.list(), rejectsWith('runtime_unavailable'), 'no node online: the list fails as an unreachable engine');
    await assert.rejects(set.ping(), rejectsWith('runtime_unavailable'));
  });
});

/** Collects a stream's items; `until` waits for one that matches. */
function collect<T>(it: AsyncIterable<T>) {
  const seen: T[] = [];
  let error: unknown;
  const done = (async () => {
    try {
      for await (const e of it) seen.push(e);
    } catch (err) {
      error = err;
    }
  })();
  return {
    seen,
    done,
    error: () => error,
    until: (what: string, match: (e: T) => boolean) => waitFor(() => seen.find(match), { what }),
  };
}

describe('NodeSet: merged streams', () => {
  test("events: one node's stream breaking does not end it; back online, what changed meanwhile is told", async () => {
    const c = cluster(['a', 'b']);
    const x = await startedOn(c, 'a');
    const gone = await startedOn(c, 'a');
    await c.set.list(); // the last known lists
    const ac = new AbortController();
    const events = collect<ContainerEvent>(c.set.events({ labels: MANAGED, signal: ac.signal }));
    const onB = await startedOn(c, 'b');
    await events.until('b started', (e) => e.id === onB && e.action === 'started');

    c.down('a'); // a's stream throws
    const later = await started(c.set);
    assert.equal(c.set.nodeOf(later), 'b');
    await events.until('b still reported while a is down', (e) => e.id === later && e.action === 'started');
    c.rt('a').vanish(split(gone)[1]); // behind everyone's back while a is away
    c.up('a');
    await events.until('a: the vanished box removed', (e) => e.id === gone && e.action === 'removed');
    const onA = await startedOn(c, 'a');
    await events.until('a followed again', (e) => e.id === onA && e.action === 'started');
    assert.equal(events.error(), undefined, 'a partition does not end the stream');
    assert.ok(!events.seen.some((e) => e.id === x && e.action !== 'created' && e.action !== 'started'), 'x untouched');
    ac.abort();
    await within(events.done, 'the stream to end on abort');
    assert.equal(events.error(), undefined);
  });

  test('events: a node back whose engine stopped boxes ends the stream (the Manager reconciles and revives); so does no node online', async () => {
    const c = cluster(['a', 'b']);
    const x = await startedOn(c, 'a');
    await startedOn(c, 'b');
    const ac = new AbortController();
    const events = collect<ContainerEvent>(c.set.events({ labels: MANAGED, signal: ac.signal }));
    c.down('a');
    c.rt('a').simulateEngineRestart();
    c.up('a');
    await events.until('a: the box its engine stopped', (e) => e.id === x && e.action === 'stopped');
    await within(events.done, 'the stream to end');
    assert.ok(isSbxError(events.error(), 'runtime_unavailable'), String(events.error()));
    assert.deepEqual([(events.error() as SbxError).details?.['node'], (events.error() as SbxError).details?.['reason']], ['a', 'node_returned']);

    const again = collect<ContainerEvent>(c.set.events({ labels: MANAGED, signal: ac.signal }));
    c.down('a');
    const onB = await started(c.set);
    await again.until('b while a is down', (e) => e.id === onB && e.action === 'started');
    c.down('b');
    await within(again.done, 'the stream to end');
    assert.ok(isSbxError(again.error(), 'runtime_unavailable'), String(again.error()));
    assert.match((again.error() as SbxError).message, /no node is online/);
    await assert.rejects(async () => {
      for await (const _ of c.set.events({ signal: ac.signal }));
    }, rejectsWith('runtime_unavailable'));
    ac.abort();
  });

  test('resources: the largest node; capabilities: what all share; ping: one online node; images: every online node', async () => {
    const c = cluster(['a', 'b'], { each: (n) => ({ resources: { cpus: n === 'a' ? 8 : 2, memoryBytes: (n === 'a' ? 4 : 16) * 1024 * MiB } }) });
    assert.deepEqual(await c.set.resources(), { cpus: 2, memoryBytes: 16 * 1024 * MiB });
    assert.equal(c.set.capabilities.hostMounts, false);
    assert.equal(c.set.capabilities.stopStart, true);
    c.rt('a').images.add('only-a:1');
    assert.equal(await c.set.images.exists('only-a:1'), false, 'not on every online node');
    c.down('b');
    assert.equal(await c.set.images.exists('only-a:1'), true, 'on every online node');
    await c.set.ping();
    assert.equal((await c.set.version()).engine, 'memory');
    c.up('b');
    await assert.rejects(
      (async () => {
        for await (const _ of c.set.images.pull('nowhere:1'));
      })(),
      rejectsWith('not_found', (e) => assert.equal(e.details?.['node'], 'a')),
    );
    await c.set.images.remove('only-a:1');
    assert.equal(c.rt('a').images.has('only-a:1'), false);
    await assert.rejects(c.set.images.remove('only-a:1'), rejectsWith('not_found'));
  });
});

describe('NodeSet: egress policies', () => {
  const policy: EgressSpec = {
    mode: 'allowlist',
    allow: [{ host: 'ok.test' }, { host: '198.18.0.0/24', ports: [80, 80], protocol: 'tcp' }],
    deny: [],
    endpoints: [],
  };
  const egressOf = (c: ReturnType<typeof cluster>, name: string) => (c.rt(name) as EgressNode).egress;

  test('capabilities.egress: every node enforces it; one online that does not makes it false; a node away that never said is not held against the pool', () => {
    assert.equal(cluster(['a', 'b'], { egress: ['a', 'b'] }).set.capabilities.egress, true);
    assert.equal(cluster(['a', 'b'], { egress: ['a'] }).set.capabilities.egress, false);
    assert.equal(cluster(['a', 'b']).set.capabilities.egress, false);
    assert.equal(new NodeSet('empty', { members: () => [] }).capabilities.egress, false);
    // A RemoteRuntime before its node's facts came: no answer yet (undefined), not a no.
    const c = cluster(['a', 'b'], { egress: ['a'], each: (n) => (n === 'b' ? { state: 'connecting' } : {}) });
    (c.rt('b').capabilities as { egress?: boolean }).egress = undefined;
    assert.equal(c.set.capabilities.egress, true, 'b has not said yet');
    c.node('b').state = 'online';
    assert.equal(c.set.capabilities.egress, false, 'online and not saying it enforces egress');
    c.node('b').state = 'offline';
    (c.rt('b').capabilities as { egress?: boolean }).egress = false;
    assert.equal(c.set.capabilities.egress, false, 'away, but it said no');
  });

  test('a box with a policy goes only to a node that enforces egress (and carries its policy there); none online that does: not_available', async () => {
    const c = cluster(['a', 'b'], { egress: ['b'] });
    // a is the least loaded and takes a box without a policy; the policy sends the next one to b all the same.
    const open = await started(c.set);
    assert.equal(c.set.nodeOf(open), 'a');
    await started(c.set);
    const guarded = await started(c.set, { ...box, egress: policy });
    assert.equal(c.set.nodeOf(guarded), 'b');
    assert.deepEqual(egressOf(c, 'b').get(split(guarded)[1]), policy);
    // `all` asks nothing of a node without egress (as a Docker engine without the enforcer's image): placed as any box, the field left out.
    const all: EgressSpec = { mode: 'all', allow: [], deny: [], endpoints: [] };
    const anyWhere = await started(c.set, { ...box, egress: all });
    assert.equal(c.set.nodeOf(anyWhere), 'a');
    assert.equal(c.rt('a').specs.get(split(anyWhere)[1])!.egress, undefined);
    await c.set.setEgress(anyWhere, all);
    // b, which enforces egress, away: it comes back, so that is runtime_unavailable, not for good.
    c.down('b');
    const before = (await c.rt('a').list()).length;
    await assert.rejects(c.set.create({ ...box, egress: policy }), rejectsWith('runtime_unavailable'));
    // No node that enforces egress at all: not_available, and nothing created open on a.
    c.members.splice(1, 1);
    await assert.rejects(
      c.set.create({ ...box, egress: policy }),
      rejectsWith('not_available', (e) => {
        assert.equal(e.details?.['reason'], 'no_egress');
        assert.match(e.message, /a: enforces no egress policy/);
      }),
    );
    assert.equal((await c.rt('a').list()).length, before, 'nothing created on a');
  });

  test('setEgress, getEgress: on the node that holds the box, by its own id; bad specs refused before any call; a node without egress: not_available naming it; offline: runtime_unavailable', async () => {
    const c = cluster(['a', 'b'], { egress: ['b'] });
    const onA = await startedOn(c, 'a');
    const onB = await startedOn(c, 'b');
    const next: EgressSpec = { mode: 'none', allow: [], deny: [], endpoints: [] };
    await c.set.setEgress(onB, next);
    assert.deepEqual(egressOf(c, 'b').get(split(onB)[1]), next);
    assert.deepEqual(await c.set.getEgress(onB), next);
    await assert.rejects(
      c.set.setEgress(onB, { ...next, allow: [{ host: 'ok.test', ports: [443, 80] }] }),
      rejectsWith('invalid_argument', (e) => assert.equal(e.details?.['field'], 'egress.allow.0.ports')),
    );
    assert.deepEqual(egressOf(c, 'b').get(split(onB)[1]), next, 'unchanged');
    for (const call of [() => c.set.setEgress(onA, next), () => c.set.getEgress(onA)]) {
      await assert.rejects(
        call(),
        rejectsWith('not_available', (e) => {
          assert.equal(e.details?.['node'], 'a');
          assert.match(e.message, /'a'/);
        }),
      );
    }
    await assert.rejects(c.set.getEgress('b:nope'), rejectsWith('not_found'));
    c.down('b');
    await assert.rejects(
      c.set.setEgress(onB, policy),
      rejectsWith('runtime_unavailable', (e) => assert.equal(e.details?.['node'], 'b')),
    );
  });
});

describe('NodeSet: host endpoints', () => {
  test('declared to every online node once; a node away at the time gets them at the next list', async () => {
    const c = cluster(['a', 'b']);
    c.down('b');
    await c.set.allowHostEndpoints([{ address: '10.0.0.1', port: 8080 }]);
    await c.set.allowHostEndpoints([{ address: '10.0.0.1', port: 8080 }]);
    assert.deepEqual(c.rt('a').declared, ['10.0.0.1:8080'], 'once: unchanged');
    assert.deepEqual(c.rt('b').declared, []);
    c.up('b');
    await c.set.list();
    await waitFor(() => c.rt('b').declared.length === 1, { what: "b's declaration" });
    assert.deepEqual(c.rt('b').declared, ['10.0.0.1:8080']);
    assert.deepEqual(c.rt('a').declared, ['10.0.0.1:8080']);
  });
});

describe('NodeSet under a Manager', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'sbx-nodeset-'));
  after(() => rmSync(dataDir, { recursive: true, force: true }));

  test("a warm spare is claimed on its node; an offline node's boxes survive cleanup passes and are started again when its engine restarted", async () => {
    const c = cluster(['a', 'b']);
    const options = (set: NodeSet) => ({
      name: 'nodeset-mgr',
      dataDir,
      cleanupIntervalMs: 0,
      tokenSecret: 'a-test-secret-of-16+',
      logger: pino({ level: 'silent' }),
      pools: [{ name: 'nodes', runtime: set, warm: [{ image: IMAGE, size: 1 }] }],
    });
    const manager = new Manager(options(c.set));
    await manager.start();
    await waitFor(async () => (await manager.warm())[0]!.ready === 1, { what: 'a spare' });
    const warmBox = await manager.create({ image: IMAGE });
    assert.equal((await manager.warm())[0]!.hits, 1, 'claimed, not cold');
    assert.match(warmBox.containerId, /^[ab]:[0-9a-f]{64}$/);
    const node = c.set.nodeOf(warmBox.containerId)!;
    c.down(node);
    await manager.cleanup();
    await manager.cleanup();
    assert.ok(
      (await manager.list()).some((b) => b.id === warmBox.id),
      'kept while its node is offline',
    );
    await assert.rejects(
      warmBox.exec(['true']),
      rejectsWith('runtime_unavailable', (e) => {
        assert.equal(e.details?.['node'], node);
        assert.match(e.message, new RegExp(`box ${warmBox.id}: node '${node}' is offline`), 'in the words of the box (box-errors.ts)');
      }),
    );
    // The node's engine restarted while it was away: back, its box is started again.
    c.rt(node).simulateEngineRestart();
    c.up(node);
    await waitFor(async () => (await warmBox.info()).status === 'running', { what: 'the box started again' });
    await manager.close();

    // A restarted Manager finds the claimed box with its record.
    const again = new Manager(options(new NodeSet('again', { members: () => c.members })));
    await again.start();
    const back = await again.get(warmBox.id);
    assert.equal(back.containerId, warmBox.containerId);
    assert.equal((await back.exec(['true'])).exitCode, 0);
    await again.remove(warmBox.id);
    await again.close();
  });
});

/** One engine as a node: what it creates carries the node's label, and it lists and follows only those. */
function engineNode(runtime: Runtime, label: Record<string, string>): Runtime {
  const withLabel = (opts: ContainerListOptions = {}) => ({ ...opts, labels: { ...opts.labels, ...label } });
  return new Proxy(runtime, {
    get(rt, key) {
      if (key === 'create') return (spec: ContainerSpec) => rt.create({ ...spec, labels: { ...spec.labels, ...label } });
      if (key === 'list') return (opts?: ContainerListOptions) => rt.list(withLabel(opts));
      if (key === 'events') return (opts: { labels?: Record<string, string>; signal: AbortSignal }) => rt.events({ ...opts, labels: withLabel(opts).labels });
      const v = Reflect.get(rt, key, rt) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(rt) : v;
    },
  });
}

describe('NodeSet on the real engine', () => {
  const runId = testRunId('nodeset');
  const engine = new DockerRuntime(testEnv.engineAddr);
  after(async () => {
    for (const c of await engine.list({ labels: { [TEST_LABEL]: runId } })) await engine.remove(c.id, { force: true }).catch(() => undefined);
    await engine.close();
  });

  test('two members on one engine: create on the least loaded, exec, list, remove', async () => {
    const members: NodeMember[] = ['one', 'two'].map((name) => ({
      name,
      runtime: engineNode(engine, { 'sbx.test-node': `${runId}-${name}` }),
      state: 'online',
      draining: false,
    }));
    const set = new NodeSet('engine-nodes', { members: () => members });
    const spec = { image: IMAGE, labels: { ...MANAGED, [TEST_LABEL]: runId } };
    const first = await started(set, spec);
    const second = await started(set, spec);
    assert.deepEqual([set.nodeOf(first), set.nodeOf(second)], ['one', 'two']);
    const r = await set.exec(second, ['sh', '-c', 'echo hello from $(hostname)']);
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout.trim(), `hello from ${split(second)[1].slice(0, 12)}`);
    assert.deepEqual(new Set((await set.list({ labels: { [TEST_LABEL]: runId } })).map((c) => c.id)), new Set([first, second]));
    await set.remove(first, { force: true });
    await set.remove(second, { force: true });
    assert.deepEqual(await engine.list({ labels: { [TEST_LABEL]: runId } }), []);
  });
});
