/**
 * Pools that span machines, on real machines: two network namespaces (src/testing/netns-engine.ts),
 * each with its own dockerd and a real `sbx node` process started inside it — n3 direct (the
 * Manager dials 10.231.3.2), n4 reverse (it dials the Manager's node listener on 10.231.4.1) —
 * and one Manager behind `sbx serve` with pools `local` and `remote` (`sbx://n3,n4`). The nodes
 * join through the HTTP join route with one-time tokens. Then: placement, exec, streams, PTY,
 * files, attach, the port proxy and VNC through the server, a workspace on a node, warm spares,
 * a partition, a node killed with SIGKILL, a Manager restart, and the attacks.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { Sbx } from '../client/index.js';
import { isSbxError } from '../errors.js';
import { joinManager } from '../node/join.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import { testEnv } from '../testing/env.js';
import { startNetnsEngine } from '../testing/netns-engine.js';
import type { NetnsEngine } from '../testing/netns-engine.js';
import { freePort } from '../testing/remote-node.js';
import { removeContainersOf, startTestServer } from '../testing/server.js';
import type { TestServer } from '../testing/server.js';
import { waitFor } from '../testing/wait.js';
import { archiveImage } from './archiver.js';
import type { LocalBox } from './box.js';
import type { SnapshotInfo } from './snapshots.js';
import type { ManagerConfig } from './config.js';
import { WARM_LABEL } from './warm.js';

const IMAGES = [testEnv.desktopImage];
const OWNER = 'alice';

/** A node of the test: its namespace engine, data directory and `sbx node` process. */
interface Node {
  name: string;
  engine: NetnsEngine;
  dataDir: string;
  proc: ChildProcess | undefined;
  log: string;
}

/** Starts `sbx node` inside the node's namespace (the CLI, as a user runs it). */
function runNode(n: Node): void {
  const proc = n.engine.spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'node', '--data-dir', n.dataDir, '--engine', n.engine.engineAddr], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, SBX_LOG_LEVEL: 'info', SBX_LOG_FORMAT: 'json' },
  });
  proc.stdout?.on('data', (d: Buffer) => (n.log += d.toString()));
  proc.stderr?.on('data', (d: Buffer) => (n.log += d.toString()));
  n.proc = proc;
}

async function killNode(n: Node, signal: NodeJS.Signals): Promise<void> {
  const proc = n.proc;
  n.proc = undefined;
  if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  proc.kill(signal);
  await exited;
}

describe('pools that span machines: two namespace nodes behind sbx serve', { timeout: 600_000 }, () => {
  let t: TestServer;
  let sbx: Sbx;
  let n3: Node;
  let n4: Node;
  let config: ManagerConfig;
  let hubPort: number;
  const managerName = `remote-pool-${process.pid}`;
  let dataDir: string;

  const state = (name: string) => t.manager.nodes().find((n) => n.name === name)?.state;
  const onNode = (box: { containerId: string }) => box.containerId.split(':')[0];

  before(async () => {
    const [e3, e4] = await Promise.all([startNetnsEngine(3, { images: IMAGES }), startNetnsEngine(4, { images: IMAGES })]);
    n3 = { name: 'n3', engine: e3!, dataDir: await mkdtemp(join(tmpdir(), 'sbx-n3-')), proc: undefined, log: '' };
    n4 = { name: 'n4', engine: e4!, dataDir: await mkdtemp(join(tmpdir(), 'sbx-n4-')), proc: undefined, log: '' };
    hubPort = await freePort(e4!.hostAddress);
    dataDir = await mkdtemp(join(tmpdir(), 'sbx-remote-pool-'));
    config = {
      cleanupIntervalMs: 500,
      nodes: { listen: `${e4!.hostAddress}:${hubPort}`, pingIntervalMs: 500, offlineAfterMs: 3000 },
      pools: [
        { name: 'local', addr: testEnv.engineAddr },
        { name: 'remote', addr: 'sbx://n3,n4', warm: [{ image: testEnv.testImage, size: 1 }] },
      ],
    };
    t = await startTestServer('remote-pool', { config, dataDir, name: managerName });
    sbx = new Sbx({ url: t.url, apiKey: t.admin });
    // Joining as a user would: a token from the admin API, `sbx node join`'s code over HTTP.
    const { token: t3 } = await sbx.nodes.createJoinToken();
    await joinManager({ managerUrl: t.url, token: t3, name: 'n3', dataDir: n3.dataDir, listen: `${e3!.address}:7443` });
    const { token: t4 } = await sbx.nodes.createJoinToken();
    await joinManager({ managerUrl: t.url, token: t4, name: 'n4', dataDir: n4.dataDir, reverse: true, managerNodeAddress: `${e4!.hostAddress}:${hubPort}` });
    runNode(n3);
    runNode(n4);
    await waitFor(() => state('n3') === 'online' && state('n4') === 'online', { what: `both nodes online (n3: ${n3.log}; n4: ${n4.log})` });
  });

  after(async () => {
    await t?.dispose();
    for (const n of [n3, n4]) {
      if (!n) continue;
      await killNode(n, 'SIGTERM');
      // Whatever a failed test left on the node's engine.
      const rt = new DockerRuntime(n.engine.engineAddr);
      for (const c of await rt.list({ labels: { 'sbx.manager': managerName } }).catch(() => [])) await rt.remove(c.id, { force: true }).catch(() => undefined);
      await rt.close();
      await n.engine.stop();
      await rm(n.dataDir, { recursive: true, force: true });
    }
    await removeContainersOf(managerName);
    await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  });

  test('the nodes are listed with their machine (API and library); a replayed join token is refused', async () => {
    const nodes = await sbx.nodes.list();
    assert.deepEqual(
      nodes.map((n) => [n.name, n.mode, n.state]),
      [
        ['n3', 'direct', 'online'],
        ['n4', 'reverse', 'online'],
      ],
    );
    for (const n of nodes) {
      assert.match(n.facts?.engineVersion ?? '', /^\d+\./);
      assert.ok((n.facts?.cpus ?? 0) > 0);
      assert.ok(n.facts?.ociRuntimes.includes('runc'));
    }
    assert.equal(nodes[0]!.address, '10.231.3.2:7443');
    // The token n3 spent, sent again with another name: refused.
    const { token } = await sbx.nodes.createJoinToken();
    await joinManager({
      managerUrl: t.url,
      token,
      name: 'n5',
      dataDir: await mkdtemp(join(tmpdir(), 'sbx-n5-')),
      reverse: true,
      managerNodeAddress: '127.0.0.1:1',
    });
    await assert.rejects(
      joinManager({
        managerUrl: t.url,
        token,
        name: 'n6',
        dataDir: await mkdtemp(join(tmpdir(), 'sbx-n6-')),
        reverse: true,
        managerNodeAddress: '127.0.0.1:1',
      }),
      (e) => isSbxError(e, 'unauthorized'),
    );
    // A name that joined is never taken over, not even with a fresh token.
    const again = await sbx.nodes.createJoinToken();
    await assert.rejects(
      joinManager({ managerUrl: t.url, token: again.token, name: 'n3', dataDir: await mkdtemp(join(tmpdir(), 'sbx-n3b-')), listen: '10.231.9.9:7443' }),
      (e) => isSbxError(e, 'conflict'),
    );
    await sbx.nodes.revoke('n5');
  });

  test('creates are placed least loaded across the nodes; exec, stream with stdin, PTY and files work there', async () => {
    // Least loaded first, ties by name: every sbx container on each node counts, a warm spare and
    // another Manager's (a run before this one may have left some on these engines), as placement counts.
    const everySbx = { 'sbx.managed-by': 'sbx' };
    const leastLoaded = async () => {
      const [c3, c4] = await Promise.all([countManaged(n3, {}, everySbx), countManaged(n4, {}, everySbx)]);
      return c3 <= c4 ? 'n3' : 'n4';
    };
    let expected = await leastLoaded();
    const a = await t.manager.create({ image: testEnv.baseImage, owner: OWNER, pool: 'remote' });
    assert.equal(onNode(a), expected);
    expected = await leastLoaded();
    const b = await t.manager.create({ image: testEnv.baseImage, owner: OWNER, pool: 'remote' });
    try {
      assert.equal(onNode(b), expected);
      assert.equal((await a.info()).execPath, 'agent');
      const r = await a.exec(['sh', '-c', 'echo out; echo err >&2; exit 3']);
      assert.deepEqual([r.exitCode, r.stdout, r.stderr], [3, 'out\n', 'err\n']);
      const st = await b.stream(['sh', '-c', 'cat; echo done']);
      st.stdin.write('through the node\n');
      st.stdin.end();
      const chunks: Buffer[] = [];
      for await (const c of st.stdout) chunks.push(c as Buffer);
      assert.equal(Buffer.concat(chunks).toString(), 'through the node\ndone\n');
      assert.equal(await st.wait(), 0);
      const tty = await a.stream(['sh', '-c', 'stty size; read x; stty size'], { tty: true, size: { cols: 91, rows: 19 } });
      let seen = '';
      tty.stdout.on('data', (d: Buffer) => (seen += d.toString()));
      await waitFor(() => seen.includes('19 91'), { what: 'the first size' });
      await tty.resize({ cols: 120, rows: 40 });
      tty.stdin.write('\n');
      assert.equal(await tty.wait(), 0);
      assert.match(seen, /40 120/);
      const fs = a.files();
      await fs.writeFile('/tmp/hello.txt', 'from the manager');
      assert.equal((await b.exec(['cat', '/tmp/hello.txt'])).exitCode, 1, 'each box has its own filesystem');
      assert.equal(await fs.readFile('/tmp/hello.txt', 'utf8'), 'from the manager');
      assert.equal((await a.exec(['cat', '/tmp/hello.txt'])).stdout, 'from the manager');
    } finally {
      await Promise.all([a.remove(), b.remove()]);
    }
  });

  test('attach, the port proxy and VNC through sbx serve reach services of boxes on nodes', async () => {
    const svc = await sbx.create({ image: testEnv.testImage, owner: OWNER, pool: 'remote', ports: [{ containerPort: 3000 }, { containerPort: 3001 }] });
    const desk = await sbx.create({ image: testEnv.desktopImage, owner: OWNER, pool: 'remote', vnc: true });
    try {
      const conn = await svc.attach(3000, { protocol: 'ws', path: '/echo' });
      const it = conn[Symbol.asyncIterator]();
      conn.send('over two hops');
      assert.deepEqual((await it.next()).value, { type: 'text', data: 'over two hops' });
      conn.close();
      // The signed URL swaps its token for a cookie (303), as a browser follows it.
      const signed = await fetch(await svc.proxy(3001, '/events', { signed: true }), { redirect: 'manual' });
      assert.equal(signed.status, 303);
      const proxyCookie = (signed.headers.get('set-cookie') ?? '').split(';')[0]!;
      const res = await fetch(new URL(signed.headers.get('location')!, t.url), { headers: { accept: 'text/event-stream', cookie: proxyCookie } });
      assert.equal(res.status, 200);
      const reader = res.body!.getReader();
      const first = new TextDecoder().decode((await reader.read()).value);
      assert.match(first, /data:/);
      await reader.cancel();
      // VNC: the viewer's WebSocket, through the cookie the viewer page sets, gives the RFB banner.
      const page = await fetch(await desk.vnc({ ttlMs: 60_000 }), { redirect: 'manual' });
      assert.equal(page.status, 303);
      const cookie = (page.headers.get('set-cookie') ?? '').split(';')[0]!;
      const banner = await waitFor(
        () =>
          new Promise<string | false>((resolve) => {
            const ws = new WebSocket(`${t.url.replace('http', 'ws')}/v1/boxes/${desk.id}/vnc/websockify`, { headers: { cookie, origin: t.url } });
            ws.once('message', (d: Buffer) => {
              resolve(d.toString('latin1'));
              ws.terminate();
            });
            ws.once('error', () => resolve(false));
            ws.once('close', () => resolve(false));
          }),
        { what: "the desktop's VNC server" },
      );
      assert.match(banner, /^RFB 003\.00\d/);
    } finally {
      await Promise.all([svc.remove(), desk.remove()]);
    }
  });

  test('a workspace on a remote node: written in one box, read in the next and through the file API', async () => {
    const ws = await t.manager.workspaces.create({ name: `remote-${process.pid}`, owner: OWNER, node: 'remote' });
    try {
      const first = await t.manager.create({ image: testEnv.baseImage, owner: OWNER, workspaceId: ws.id });
      const node = onNode(first);
      assert.equal((await first.exec(['sh', '-c', `echo kept > ${first.mountPath}/note.txt`])).exitCode, 0);
      await first.remove();
      const second = await t.manager.create({ image: testEnv.baseImage, owner: OWNER, workspaceId: ws.id });
      assert.equal(onNode(second), node, "the next box goes to the workspace's node");
      assert.equal((await second.exec(['cat', `${second.mountPath}/note.txt`])).stdout, 'kept\n');
      await second.remove();
      const fs = await t.manager.workspaces.fs(ws.id);
      assert.equal(await fs.readFile('note.txt', 'utf8'), 'kept\n');
      await fs.writeFile('from-api.txt', 'api');
      const third = await t.manager.create({ image: testEnv.baseImage, owner: OWNER, workspaceId: ws.id });
      assert.equal((await third.exec(['cat', `${third.mountPath}/from-api.txt`])).stdout, 'api');
      await third.remove();
    } finally {
      await t.manager.workspaces.delete(ws.id).catch(() => undefined);
    }
  });

  test('a warm spare on a node is claimed there', async () => {
    await waitFor(async () => (await t.manager.warm()).find((w) => w.pool === 'remote')?.ready === 1, { what: 'a spare on a node' });
    const spares = await Promise.all([n3, n4].map(async (n) => ({ node: n.name, count: await countManaged(n, { [WARM_LABEL]: '' }) })));
    const holder = spares.find((s) => s.count > 0)?.node;
    assert.ok(holder, `a node holds the spare (${JSON.stringify(spares)})`);
    const before = (await t.manager.warm()).find((w) => w.pool === 'remote')!.hits;
    const box = await t.manager.create({ image: testEnv.testImage, owner: OWNER, pool: 'remote' });
    try {
      assert.equal((await t.manager.warm()).find((w) => w.pool === 'remote')!.hits, before + 1, 'the create claimed the spare');
      assert.equal(onNode(box), holder, 'on the node that held it');
      assert.equal((await box.exec(['echo', 'warm'])).stdout, 'warm\n');
    } finally {
      await box.remove();
    }
  });

  test('partition: a node cut off is offline within the bound, calls fail fast naming it, nothing is lost; back, everything is recovered', async () => {
    const b3 = await placeOn('n3');
    const b4 = await placeOn('n4');
    let stopLoad = async () => undefined as unknown;
    try {
      const infoBefore = await b3.info();
      // Load on the other node throughout: it never notices.
      let stop = false;
      let execs = 0;
      const load = (async () => {
        while (!stop) {
          assert.equal((await b4.exec(['true'])).exitCode, 0);
          execs++;
        }
      })();
      load.catch(() => undefined);
      stopLoad = async () => {
        stop = true;
        await load;
      };
      const cut = Date.now();
      await n3.engine.linkDown();
      await waitFor(() => state('n3') === 'offline', { what: 'n3 offline' });
      const offlineAfter = Date.now() - cut;
      assert.ok(offlineAfter < 10_000, `offline after ${offlineAfter} ms (the bound is 10 s)`);
      await assert.rejects(b3.exec(['true']), (e) => isSbxError(e, 'runtime_unavailable') && /n3/.test(e.message) && e.details?.['node'] === 'n3');
      // Two cleanup passes while it is away: the box is still known, with its last state.
      const ticks = t.manager.cleanupStats.ticks;
      await waitFor(() => t.manager.cleanupStats.ticks >= ticks + 2, { what: 'two cleanup passes' });
      const listed = (await t.manager.list({ owner: OWNER })).find((b) => b.id === b3.id);
      assert.ok(listed, 'the box of the offline node is still listed');
      assert.equal(listed.status, 'running');
      await n3.engine.linkUp();
      await waitFor(() => state('n3') === 'online', {
        what: `n3 online again (${t.manager.nodes().find((n) => n.name === 'n3')?.error}; ${n3.log.slice(-600)})`,
      });
      await stopLoad();
      assert.ok(execs > 0);
      assert.equal((await b3.exec(['echo', 'back'])).stdout, 'back\n');
      const infoAfter = await b3.info();
      assert.deepEqual(
        { ...infoAfter, lastActive: undefined, processCount: 0 },
        { ...infoBefore, lastActive: undefined, processCount: 0 },
        'recovered with every field',
      );
    } finally {
      await stopLoad().catch(() => undefined);
      await n3.engine.linkUp();
      await waitFor(() => state('n3') === 'online', { what: 'n3 online for the cleanup' });
      await Promise.all([b3.remove(), b4.remove()]);
    }
  });

  // Issue #27: the lifecycle ladder over the node wire (Invoke pause, unpause, commit).
  test('a box on a node pauses, an exec resumes it; it archives on its node, and an exec restores it there with its files', async () => {
    const box = await placeOn('n3');
    const rt = new DockerRuntime(n3.engine.engineAddr);
    const extra: LocalBox[] = [];
    const onEngine = async () => (await rt.inspect(box.containerId.split(':')[1]!)).status;
    try {
      const made = await box.exec(['sh', '-c', 'head -c 262144 /dev/urandom > "$HOME/blob" && sha256sum "$HOME/blob"']);
      assert.equal(made.exitCode, 0, made.stderr);
      await box.pause();
      assert.equal(await onEngine(), 'paused', "frozen on the node's engine");
      assert.equal((await box.exec(['sh', '-c', 'sha256sum "$HOME/blob"'])).stdout, made.stdout);
      assert.equal(await onEngine(), 'running', 'thawed by the exec');

      await box.archive();
      assert.equal(box.status, 'archived');
      assert.ok(await rt.images.exists(archiveImage(managerName, box.id)), "the archive is an image on the box's node");
      // The archive is on n3 only: load n3 past n4 (as placement counts: every sbx container on the
      // node's engine, whoever made it), so least-loaded placement alone would pick n4.
      const load = (n: Node) => countManaged(n, {}, { 'sbx.managed-by': 'sbx' });
      while ((await load(n3)) <= (await load(n4))) {
        extra.push(await t.manager.create({ image: testEnv.baseImage, owner: OWNER, pool: 'remote' }));
      }
      assert.equal((await box.exec(['sh', '-c', 'sha256sum "$HOME/blob"'])).stdout, made.stdout, 'restored by the exec, its file whole');
      assert.equal(onNode(box), 'n3', 'restored on the node holding its archive');
      assert.equal(await onEngine(), 'running');
      assert.equal(await rt.images.exists(archiveImage(managerName, box.id)), false, 'the archive is gone once restored');
    } finally {
      await Promise.all([box, ...extra].map((b) => b.remove()));
      await rt.close();
    }
  });

  test('sbx node killed with SIGKILL and started again: its boxes are recovered', async () => {
    const b4 = await placeOn('n4');
    try {
      await killNode(n4, 'SIGKILL');
      await waitFor(() => state('n4') === 'offline', { what: 'n4 offline' });
      await assert.rejects(b4.exec(['true']), (e) => isSbxError(e, 'runtime_unavailable'));
      runNode(n4);
      await waitFor(() => state('n4') === 'online', { what: `n4 online again (${n4.log.slice(-400)})` });
      assert.equal((await b4.exec(['echo', 'still here'])).stdout, 'still here\n');
      assert.equal((await t.manager.get(b4.id)).id, b4.id);
    } finally {
      await b4.remove();
    }
  });

  test('a Manager restart reconnects to every node and recovers every box', async () => {
    const b3 = await placeOn('n3');
    const b4 = await placeOn('n4');
    const ids = [b3.id, b4.id];
    // Stop the server and its Manager without removing anything, then start them again on the same data.
    const admin = t.admin;
    await t.server.close();
    await t.manager.close();
    t = await startTestServer('remote-pool', { config, dataDir, name: managerName });
    // The keys are the data directory's: the first start's admin key still holds.
    sbx = new Sbx({ url: t.url, apiKey: admin });
    t.admin = admin;
    await waitFor(() => state('n3') === 'online' && state('n4') === 'online', { what: 'both nodes back after the restart' });
    await waitFor(async () => (await t.manager.list({ owner: OWNER })).filter((b) => ids.includes(b.id)).length === 2, { what: 'both boxes recovered' });
    for (const id of ids) {
      const box = await t.manager.get(id);
      assert.equal((await box.exec(['echo', id])).stdout, `${id}\n`);
      await box.remove();
    }
  });

  test("a snapshot is made on its box's node, and boxes from it are placed there, drained or not (the other node has no such image)", async () => {
    const source = await placeOn('n3');
    const made: LocalBox[] = [];
    let snap: SnapshotInfo | undefined;
    try {
      assert.equal((await source.exec(['sh', '-c', 'echo on-n3 > /tmp/where'])).exitCode, 0);
      snap = await source.snapshot();
      assert.equal(snap.pool, 'remote');
      // Drained, n3 takes no other box: placement without the image's node would send these to n4, which lacks the image.
      await sbx.nodes.drain('n3');
      for (let i = 0; i < 3; i++) made.push(await t.manager.create({ image: snap.id, owner: OWNER }));
      await sbx.nodes.drain('n3', { draining: false });
      assert.deepEqual(
        made.map((b) => onNode(b)),
        ['n3', 'n3', 'n3'],
      );
      assert.equal((await made[0]!.exec(['cat', '/tmp/where'])).stdout, 'on-n3\n');
    } finally {
      await sbx.nodes.drain('n3', { draining: false });
      await Promise.all(made.map((b) => b.remove()));
      await source.remove();
      // The node's engine keeps its images between runs: none of this test's may stay.
      if (snap) await t.manager.snapshots.delete(snap.id);
    }
  });

  test('drain: no new box goes to a drained node; its boxes keep running; undrain takes it back', async () => {
    const kept = await placeOn('n3');
    try {
      await sbx.nodes.drain('n3');
      const placed: LocalBox[] = [];
      for (let i = 0; i < 3; i++) placed.push(await t.manager.create({ image: testEnv.baseImage, owner: OWNER, pool: 'remote' }));
      assert.deepEqual(
        placed.map((b) => onNode(b)),
        ['n4', 'n4', 'n4'],
      );
      assert.equal((await kept.exec(['echo', 'running'])).stdout, 'running\n');
      await Promise.all(placed.map((b) => b.remove()));
      await sbx.nodes.drain('n3', { draining: false });
      assert.equal((await sbx.nodes.list()).find((n) => n.name === 'n3')!.draining, false);
    } finally {
      await kept.remove();
    }
  });

  /** A box on the named node: created until one lands there (least loaded decides). */
  async function placeOn(node: string): Promise<LocalBox> {
    const extra: LocalBox[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        const box = await t.manager.create({ image: testEnv.baseImage, owner: OWNER, pool: 'remote' });
        if (onNode(box) === node) return box;
        extra.push(box);
      }
      throw new Error(`no box landed on ${node}`);
    } finally {
      await Promise.all(extra.map((b) => b.remove()));
    }
  }

  async function countManaged(n: Node, labels: Record<string, string>, of: Record<string, string> = { 'sbx.manager': managerName }): Promise<number> {
    const rt = new DockerRuntime(n.engine.engineAddr);
    try {
      return (await rt.list({ labels: { ...of, ...labels } })).length;
    } finally {
      await rt.close();
    }
  }
});
