/**
 * The egress helper's lifecycle on the real engine: what every box on the engine sees (so these
 * run alone). Several sbx processes setting it up at once make one; a helper of another image
 * (the image was rebuilt) is made again, and boxes keep their rules across it (state.json).
 * Each test leaves a helper of the current image running, as the other tests need.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { after, before, test } from 'node:test';
import Docker from 'dockerode';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { sh, startTestBox } from '../../testing/boxes.js';
import { testEnv, testRunId } from '../../testing/env.js';
import { fakenet } from '../../testing/fakenet.js';
import type { FakeNet } from '../../testing/fakenet.js';
import { DEFAULT_EGRESS_IMAGE, EGRESS_CONTAINER, EGRESS_HOST_DIR, EGRESS_IMAGE_LABEL, engineDirName } from './egress.js';
import { DockerRuntime } from './runtime.js';

const runId = testRunId('egress-serial');
const docker = new Docker({ socketPath: '/var/run/docker.sock' });
let net: FakeNet;
let rt: DockerRuntime;

async function tcp(id: string, addr: string): Promise<string> {
  const r = await sh(rt, id, `/nettool -timeout 3s tcp ${addr} 2>&1`);
  return r.exitCode === 0 ? 'ok' : r.stdout.trim();
}

/** A box (with the fake internet's client) that may reach other.test's address only. */
function otherOnly(): Promise<string> {
  return startTestBox(rt, runId, {
    cmd: ['sleep', '86400'],
    binds: [{ hostPath: net.toolPath, containerPath: '/nettool', readOnly: true }],
    egress: { mode: 'allowlist', allow: [{ host: `${net.other.address}/32` }], deny: [], endpoints: [] },
  });
}

/** Every container named like the helper (running or not). */
async function helpers(): Promise<Docker.ContainerInfo[]> {
  return docker.listContainers({ all: true, filters: { name: [`^/${EGRESS_CONTAINER}$`] } });
}

before(async () => {
  net = await fakenet();
  rt = new DockerRuntime(testEnv.engineAddr, { egressDns: [net.dns] });
});

after(async () => {
  await assertNoContainersLeft(rt, runId);
  await rt.close();
});

test('several runtimes setting the helper up at once make one, and every one of them uses it', async () => {
  const id = await otherOnly();
  const others = Array.from({ length: 4 }, () => new DockerRuntime(testEnv.engineAddr, { egressDns: [net.dns] }));
  try {
    await docker.getContainer(EGRESS_CONTAINER).remove({ force: true });
    // Each asks the helper for the box's rules: each sets the helper up first.
    const specs = await Promise.all(others.map((o) => o.getEgress(id)));
    for (const s of specs) assert.equal(s?.mode, 'allowlist');
    const made = await helpers();
    assert.equal(made.length, 1);
    assert.equal(made[0]!.State, 'running');
    assert.match(await tcp(id, `${net.ok.address}:80`), /refused/, 'the rules carried over to the new helper');
    assert.equal(await tcp(id, `${net.other.address}:80`), 'ok');
  } finally {
    await Promise.all(others.map((o) => o.close()));
    await rt.remove(id, { force: true });
  }
});

test('a helper of another image is made again with the current one; boxes keep their rules', async () => {
  const id = await otherOnly();
  try {
    // The running helper, relabelled as made from an older image.
    const old = await docker.getContainer(EGRESS_CONTAINER).inspect();
    await docker.getContainer(EGRESS_CONTAINER).remove({ force: true });
    const stale = await docker.createContainer({
      name: EGRESS_CONTAINER,
      Image: old.Image,
      Entrypoint: old.Config.Entrypoint,
      Cmd: old.Config.Cmd,
      Labels: { ...old.Config.Labels, [EGRESS_IMAGE_LABEL]: 'sha256:0000' },
      HostConfig: old.HostConfig,
    });
    await stale.start();

    const fresh = new DockerRuntime(testEnv.engineAddr, { egressDns: [net.dns] });
    try {
      assert.equal((await fresh.getEgress(id))?.mode, 'allowlist');
    } finally {
      await fresh.close();
    }
    const now = await docker.getContainer(EGRESS_CONTAINER).inspect();
    const image = await docker.getImage(DEFAULT_EGRESS_IMAGE).inspect();
    assert.notEqual(now.Id, stale.id, 'made again');
    assert.equal(now.Config.Labels[EGRESS_IMAGE_LABEL], image.Id);
    assert.match(await tcp(id, `${net.ok.address}:80`), /refused/);
    assert.equal(await tcp(id, `${net.other.address}:80`), 'ok');
  } finally {
    await rt.remove(id, { force: true });
  }
});

test("a helper made anew without state (sbx upgraded, the helper removed) takes in the running boxes with their labels' rules", async () => {
  const id = await otherOnly();
  try {
    // Everything of the helper gone: its container, its state, its table (as before the upgrade).
    const info = (await docker.info()) as { ID: string };
    await docker.getContainer(EGRESS_CONTAINER).remove({ force: true });
    rmSync(`${EGRESS_HOST_DIR}/${engineDirName(info.ID)}/state.json`, { force: true });
    execFileSync('nft', ['delete', 'table', 'inet', 'sbx_egress']);
    assert.equal(await tcp(id, `${net.ok.address}:80`), 'ok', 'no rules at all now');

    const fresh = new DockerRuntime(testEnv.engineAddr, { egressDns: [net.dns] });
    try {
      assert.equal((await fresh.getEgress(id))?.mode, 'allowlist', "the box's entry, made from its label");
    } finally {
      await fresh.close();
    }
    assert.match(await tcp(id, `${net.ok.address}:80`), /refused/);
    assert.equal(await tcp(id, `${net.other.address}:80`), 'ok');
  } finally {
    await rt.remove(id, { force: true });
  }
});
