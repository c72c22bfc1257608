/**
 * Issue #31: boxes on an engine that runs them in a user namespace (`dockerd --userns-remap=default`),
 * beside boxes on the main engine, which does not. userns-remap is daemon-wide, so the remapped
 * engine is a second, disposable dockerd (scripts/engine2.sh) in a network namespace of its own:
 * the host cannot dial its boxes, so their exec is the engine's (agent off). Root in such a box is
 * not root on the host: the files it writes in a workspace, and its processes in the host's /proc,
 * belong to subordinate ids (dockremap's, from 100000). The same on gVisor (the main engine's
 * runsc, registered with the remapped engine too): there the box's own /proc shows gVisor's kernel,
 * and the host's /proc shows who the sandbox (the Sentry) is: the host's root without the remap,
 * the remap's root with it. Needs root, like the rest of the harness.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { isSbxError } from '../errors.js';
import { DockerRuntime } from '../runtime/docker/runtime.js';
import type { UserNamespaceMap } from '../runtime/types.js';
import { Engine2 } from '../testing/engine2.js';
import { testEnv, testRunId } from '../testing/env.js';
import type { Box } from './box.js';
import { managerSelector } from './labels.js';
import { Manager } from './manager.js';

const IMAGE = testEnv.baseImage;
/** The image's user (sbx-base: `sandbox`, 1000:1000), and sbx's workspace file owner. */
const BOX_UID = 1000;
const runId = testRunId('userns');
const name = `userns-${process.pid}`;
const dataDir = mkdtempSync(join(tmpdir(), 'sbx-userns-'));
const run = promisify(execFile);
const GVISOR = testEnv.gvisorRuntime;
let engine2: Engine2 | undefined;
let remappedAddr = '';
let remapped: DockerRuntime;
const main = new DockerRuntime(testEnv.engineAddr);
let manager: Manager;
/** dockremap's subordinate ids, as dockerd wrote them into /etc/subuid and /etc/subgid. */
let dockremap: UserNamespaceMap;

/** The pools of this file: runc and gVisor on each engine. */
const POOLS = {
  remapped: { remap: true, ociRuntime: undefined },
  plain: { remap: false, ociRuntime: undefined },
  'remapped-gvisor': { remap: true, ociRuntime: GVISOR },
  'plain-gvisor': { remap: false, ociRuntime: GVISOR },
} as const;
type PoolName = keyof typeof POOLS;
const IDENTITY_MAP = '0 0 4294967295';

/** The main engine's registration of the gVisor runtime (path, args), for the remapped engine's daemon.json. */
async function gvisorConfig(): Promise<string> {
  const { stdout } = await run('docker', ['info', '--format', '{{json .Runtimes}}']);
  const runtime = (JSON.parse(stdout) as Record<string, unknown>)[GVISOR];
  assert.ok(runtime, `the main engine has no runtime ${GVISOR} (scripts/gvisor.sh registers it): ${stdout}`);
  return JSON.stringify({ runtimes: { [GVISOR]: runtime } });
}

function subidRange(file: string): { start: number; count: number } {
  const line = readFileSync(file, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('dockremap:'));
  assert.ok(line, `${file} has no dockremap range (dockerd --userns-remap=default writes one)`);
  const [, start, count] = line.split(':').map(Number);
  return { start: start!, count: count! };
}

/** What box id `id` is on the host, on a pool: shifted on the remapped engine, itself on the main one. */
function hostId(pool: PoolName, id: number, of: 'uid' | 'gid' = 'uid'): number {
  if (!POOLS[pool].remap) return id;
  return (of === 'uid' ? dockremap.hostUid : dockremap.hostGid) + id;
}

function owner(path: string): string {
  const s = statSync(path);
  return `${s.uid}:${s.gid}`;
}

/** The host pid of a box's main process, from its engine. */
async function hostPid(pool: PoolName, box: Box): Promise<number> {
  const host = POOLS[pool].remap ? ['-H', remappedAddr] : [];
  const { stdout } = await run('docker', [...host, 'inspect', '--format', '{{.State.Pid}}', box.containerId]);
  const pid = Number(stdout.trim());
  assert.ok(pid > 0, `no host pid for ${box.id}: ${stdout}`);
  return pid;
}

/** The real, effective, saved and filesystem uids of a `/proc/<pid>/status`. */
function uidsOf(status: string): number[] {
  const line = status.split('\n').find((l) => l.startsWith('Uid:'));
  assert.ok(line, status);
  return line.split(/\s+/).slice(1).map(Number);
}

async function sh(box: Box, script: string, user?: string): Promise<string> {
  const r = await box.exec(['sh', '-c', script], user === undefined ? {} : { user });
  assert.equal(r.exitCode, 0, `${script}: ${r.stderr}`);
  return r.stdout;
}

before(async () => {
  engine2 = new Engine2({ name: 'sbx-userns', images: [IMAGE], dockerdArgs: ['--userns-remap=default'], config: await gvisorConfig() });
  const up = await engine2.up();
  console.log(`# ${up.out} | engine2.sh up took ${up.ms} ms`);
  remappedAddr = up.addr;
  remapped = new DockerRuntime(remappedAddr);
  // This engine serves this file alone: a container on it now is a killed run's.
  const stale = await remapped.list({});
  await Promise.all(stale.map((c) => remapped.remove(c.id, { force: true })));
  if (stale.length) console.log(`# removed ${stale.length} container(s) a killed run left on sbx-userns`);
  const uids = subidRange('/etc/subuid');
  const gids = subidRange('/etc/subgid');
  dockremap = { hostUid: uids.start, hostGid: gids.start, size: Math.min(uids.count, gids.count) };
  manager = new Manager({
    name,
    dataDir,
    // The remapped engine's bridges are in its own network namespace, not this machine's to
    // firewall, and the host cannot dial a box there: the engine's exec serves. On the main engine
    // the agent serves runc boxes; gVisor boxes keep the engine's exec (the agent on gVisor is the
    // conformance suite's to prove).
    pools: Object.entries(POOLS).map(([pool, p]) => ({
      name: pool,
      addr: p.remap ? remappedAddr : testEnv.engineAddr,
      ...(p.remap ? { agent: false, runtimeOptions: { hostFirewall: false } } : {}),
      ...(p.ociRuntime ? { ociRuntime: p.ociRuntime, agent: false } : {}),
    })),
    cleanupIntervalMs: 0,
    logger: pino({ level: 'silent' }),
  });
  await manager.start();
});

after(async () => {
  const left = [];
  for (const rt of [main, remapped]) {
    if (!rt) continue;
    const mine = await rt.list({ labels: managerSelector(name) }).catch(() => []);
    left.push(...mine.map((c) => c.name));
    await Promise.all(mine.map((c) => rt.remove(c.id, { force: true }).catch(() => undefined)));
  }
  await manager?.close();
  await main.close();
  await remapped?.close();
  // Down, not left for the next run: a dockerd, its containerd and a netns cost memory the machine's other tests want.
  await engine2?.down();
  rmSync(dataDir, { recursive: true, force: true });
  assert.deepEqual(left, [], 'boxes left behind by the userns tests');
});

describe(`boxes in a user namespace (userns-remap) beside boxes without one (${runId})`, { timeout: 180_000 }, () => {
  test("the remapped engine's resources name dockremap's ids; the main engine's name none", async () => {
    assert.ok(dockremap.hostUid >= 100000, `dockremap's range starts at ${dockremap.hostUid}`);
    assert.deepEqual((await remapped.resources()).userns, dockremap);
    assert.equal((await main.resources()).userns, undefined);
  });

  test('a workspace on a pool whose engine sbx never reached is refused (runtime_unavailable): its owner would be a guess', async () => {
    const gone = new Manager({
      name: `${name}-gone`,
      dataDir: join(dataDir, 'gone'),
      pools: [{ name: 'gone', addr: `unix://${join(dataDir, 'no-engine.sock')}` }],
      cleanupIntervalMs: 0,
      logger: pino({ level: 'silent' }),
    });
    try {
      await assert.rejects(gone.workspaces.create({ name: 'w', owner: 'alice', node: 'gone' }), (err: unknown) => {
        assert.ok(isSbxError(err, 'runtime_unavailable'), String(err));
        assert.match(err.message, /a workspace of pool 'gone' is owned by the ids its engine gives boxes/);
        assert.equal(err.details?.['pool'], 'gone');
        return true;
      });
      assert.deepEqual(await gone.workspaces.list({}), []);
    } finally {
      await gone.close();
    }
  });

  for (const pool of Object.keys(POOLS) as PoolName[]) {
    const { remap, ociRuntime } = POOLS[pool];
    test(`${pool}: what the box's user, root in the box and the workspace API write is owned on the host by the box's ids ${remap ? 'shifted into the remap' : 'as they are'}`, async () => {
      const ws = await manager.workspaces.create({ name: `own-${pool}`, owner: 'alice', node: pool });
      const root = await manager.workspaces.mountPath(ws.id);
      const user = `${hostId(pool, BOX_UID)}:${hostId(pool, BOX_UID, 'gid')}`;
      assert.equal(owner(root), user, "the workspace's root belongs to the box user's host ids");
      await (await manager.workspaces.fs(ws.id)).writeFile('from-api.txt', 'api\n');
      assert.equal(owner(join(root, 'from-api.txt')), user, 'a file the API wrote');

      // `sudo`: root's exec keeps its capabilities. In a `standard` box (no-new-privileges) the
      // engine's exec as user 0 has none (the image's user is not root), so root could not write
      // the box user's directory on either engine; the agent's exec (the plain pool) could.
      await using box = await manager.create({ image: IMAGE, owner: 'alice', workspaceId: ws.id, security: 'sudo', labels: { run: runId } });
      // The box user sees the API's file as its own, and may write it and the root.
      assert.equal(
        await sh(box, 'id -u; stat -c %u:%g /workspace /workspace/from-api.txt; echo box >> /workspace/from-api.txt; touch /workspace/by-user'),
        `${BOX_UID}\n${BOX_UID}:${BOX_UID}\n${BOX_UID}:${BOX_UID}\n`,
      );
      assert.equal(await sh(box, 'id -u; touch /workspace/by-root', '0'), '0\n');

      assert.equal(owner(join(root, 'by-user')), user, "a file the box's user wrote");
      const rootOnHost = `${hostId(pool, 0)}:${hostId(pool, 0, 'gid')}`;
      assert.equal(owner(join(root, 'by-root')), rootOnHost, 'a file root in the box wrote');
      if (remap) {
        // The point: neither root's nor the box user's files are the host's root's or uid 1000's.
        for (const f of ['by-root', 'by-user', 'from-api.txt']) {
          const { uid, gid } = statSync(join(root, f));
          assert.ok(uid >= 100000 && gid >= 100000, `${f} is ${uid}:${gid} on the host`);
        }
      } else assert.equal(owner(join(root, 'by-root')), '0:0', "on the main engine, root in the box is the host's root");
      assert.equal(readFileSync(join(root, 'from-api.txt'), 'utf8'), 'api\nbox\n');
      await box.remove();
      await manager.workspaces.delete(ws.id);
    });

    test(`${pool}: /proc says who root in the box is on the host`, async () => {
      await using box = await manager.create({ image: IMAGE, owner: 'alice', pool, user: '0', labels: { run: runId } });
      const inBox = await sh(box, 'cat /proc/self/uid_map; cat /proc/self/gid_map; grep ^Uid: /proc/1/status');
      const [uidMap, gidMap, status] = inBox
        .trim()
        .split('\n')
        .map((l) => l.trim().split(/\s+/).join(' '));
      const hostMap = remap
        ? { uid: `0 ${dockremap.hostUid} ${dockremap.size}`, gid: `0 ${dockremap.hostGid} ${dockremap.size}` }
        : { uid: IDENTITY_MAP, gid: IDENTITY_MAP };
      // runc: the box's namespace has the host's map (without the remap, the identity: the box's
      // ids are the host's). gVisor: the box sees its own kernel's root namespace, whatever the host gave the sandbox.
      const boxMap = ociRuntime ? { uid: IDENTITY_MAP, gid: IDENTITY_MAP } : hostMap;
      assert.deepEqual({ uid: uidMap, gid: gidMap }, boxMap, "the box's /proc/self/{uid,gid}_map");
      assert.equal(status, 'Uid: 0 0 0 0', "the box's main process is root, as the box sees it");
      // Its host process (runc: the box's main process; gVisor: the sandbox, the Sentry), as the host sees it.
      const pid = await hostPid(pool, box);
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0];
      if (ociRuntime) assert.equal(cmd, 'runsc-sandbox', `host pid ${pid} is gVisor's sandbox`);
      else assert.notEqual(cmd, 'runsc-sandbox');
      assert.deepEqual(uidsOf(readFileSync(`/proc/${pid}/status`, 'utf8')), Array(4).fill(hostId(pool, 0)), `host /proc/${pid}/status`);
      assert.equal(readFileSync(`/proc/${pid}/uid_map`, 'utf8').trim().split(/\s+/).join(' '), hostMap.uid, `host /proc/${pid}/uid_map`);
    });
  }
});
