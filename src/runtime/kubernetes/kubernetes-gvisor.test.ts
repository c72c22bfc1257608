// gVisor on Kubernetes: boxes of the RuntimeClass that scripts/kube.sh makes (`gvisor`, containerd's
// handler `runsc`; SBX_TEST_KUBE_RUNTIME_CLASS names another) really run on gVisor, get the in-box
// agent either way it is delivered, are reached at their pod IP (the API server's port-forward
// cannot reach into gVisor's network stack), write workspaces, and refuse the egress sidecar with
// the reason (gVisor has no nftables). Then the Runtime conformance suite with the RuntimeClass on
// every box, on both exec paths. Skipped with the reason when the cluster has no such RuntimeClass.
import assert from 'node:assert/strict';
import type { V1Pod } from '@kubernetes/client-node';
import { after, before, describe, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { GRACEFUL_CMD } from '../../sandbox/box-spec.js';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { runtimeConformance } from '../../testing/conformance.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import { waitFor } from '../../testing/wait.js';
import { openTestKube, testAgentImage, testKubeAddress, unavailable, unreachableKubeconfig } from '../../testing/kube-cluster.js';
import type { AgentDeliveryChoice, ContainerSpec } from '../types.js';
import { parseKubeAddress } from './address.js';
import { KubeConnection } from './connection.js';
import { DIAL_POD_IP_ANNOTATION } from './manifest.js';
import { KubernetesRuntime } from './runtime.js';

const runtimeClass = process.env['SBX_TEST_KUBE_RUNTIME_CLASS'] || 'gvisor';
const runId = testRunId('kube-gvisor');

async function connection(): Promise<KubeConnection> {
  return KubeConnection.open(parseKubeAddress(testKubeAddress()));
}

/** Why boxes of the RuntimeClass cannot be made here: the API server's dry run of such a pod says. */
async function missingRuntimeClass(): Promise<string | undefined> {
  const conn = await connection();
  const body: V1Pod = {
    metadata: { name: `sbx-gvisor-dry-${process.pid}` },
    spec: { runtimeClassName: runtimeClass, containers: [{ name: 'main', image: testEnv.baseImage }] },
  };
  try {
    await conn.core.createNamespacedPod({ namespace: conn.namespace, body, dryRun: 'All' });
    return undefined;
  } catch (err) {
    return `no RuntimeClass ${runtimeClass} on the test cluster (scripts/kube.sh up makes it once scripts/gvisor.sh has built runsc): ${(err as Error).message}`;
  }
}

const why = (await unavailable()) ?? (await missingRuntimeClass());

async function readPod(name: string): Promise<V1Pod> {
  const conn = await connection();
  return conn.core.readNamespacedPod({ name, namespace: conn.namespace });
}

describe(`gVisor on Kubernetes (RuntimeClass ${runtimeClass})`, { skip: why ?? false }, () => {
  // No egress sidecar: its nft cannot run under gVisor (the last case shows the refusal).
  let rt: KubernetesRuntime;
  const spec = (extra: Partial<ContainerSpec> = {}): ContainerSpec => ({
    image: testEnv.baseImage,
    cmd: GRACEFUL_CMD,
    ociRuntime: runtimeClass,
    ...extra,
    labels: { [TEST_LABEL]: runId, ...(extra.labels ?? {}) },
  });

  before(() => {
    rt = openTestKube({ agentImage: testAgentImage, egressImage: '' });
  });

  after(async () => {
    try {
      await assertNoContainersLeft(rt, runId);
    } finally {
      await rt.close();
    }
  });

  test("a box of the RuntimeClass runs on gVisor's kernel; a box without it, beside it, on the host's", async () => {
    const [gv, plain] = await Promise.all([rt.create(spec()), rt.create(spec({ ociRuntime: undefined }))]);
    try {
      await Promise.all([rt.start(gv), rt.start(plain)]);
      const probe = ['sh', '-c', 'uname -r; dmesg 2>&1 | head -n 1'];
      const [a, b] = await Promise.all([rt.exec(gv, probe), rt.exec(plain, probe)]);
      assert.match(a.stdout, /^\S*gvisor\S*\n.*Starting gVisor/s, a.stderr);
      assert.doesNotMatch(b.stdout, /gvisor/i, 'the control box runs on the host kernel');
      assert.equal((await readPod(gv)).spec?.runtimeClassName, runtimeClass);
      assert.equal((await readPod(plain)).spec?.runtimeClassName, undefined);
    } finally {
      await Promise.all([rt.remove(gv, { force: true }), rt.remove(plain, { force: true })]);
    }
  });

  for (const delivery of ['image-volume', 'init-container', 'auto'] as AgentDeliveryChoice[]) {
    test(`agentDelivery ${delivery}: the agent runs in the gVisor box and execs go through it, as the user asked for`, async () => {
      const other = openTestKube({ agentImage: testAgentImage, agentDelivery: delivery, egressImage: '' });
      let id: string | undefined;
      try {
        id = await other.create(spec({ user: 'sandbox' }));
        await other.start(id);
        assert.equal((await other.inspect(id)).execPath, 'agent');
        const r = await other.exec(id, ['sh', '-c', 'id -un; uname -r']);
        assert.match(r.stdout, /^sandbox\n\S*gvisor/, r.stderr);
        assert.equal((await other.exec(id, ['id', '-u'], { user: 'root' })).stdout, '0\n');
        const pod = await readPod(id);
        const used = (await other.agentDelivery())!.delivery;
        const installs = (pod.spec!.initContainers ?? []).filter((c) => c.name === 'sbx-agent-install');
        assert.equal(installs.length, used === 'init-container' ? 1 : 0, `${delivery} delivered as ${used}`);
        if (delivery !== 'auto') assert.equal(used, delivery);
      } finally {
        if (id) await other.remove(id, { force: true });
        await other.close();
      }
    });
  }

  test('a second runtime finds the agent of a gVisor pod from the pod alone, at its IP', async () => {
    const id = await rt.create(spec());
    try {
      await rt.start(id);
      const pod = await readPod(id);
      assert.equal(pod.metadata?.annotations?.[DIAL_POD_IP_ANNOTATION], 'true');
      const fresh = openTestKube({ egressImage: '' });
      const r = await fresh.exec(id, ['uname', '-r']);
      assert.match(r.stdout, /gvisor/, r.stderr);
      assert.equal((await fresh.inspect(id)).execPath, 'agent');
      await fresh.close();
    } finally {
      await rt.remove(id, { force: true });
    }
  });

  test("dialPort reaches a listed port at the pod's IP; an unlisted one is not exposed", async () => {
    const id = await rt.create(spec({ cmd: ['sh', '-c', 'while :; do echo hello-from-gvisor | nc -l -p 8080; done'], ports: [{ containerPort: 8080 }] }));
    try {
      await rt.start(id);
      // Each nc serves one connection; between two the dial is refused, as on Docker: not_available port_not_listening.
      const text = await waitFor(
        async () => {
          const sock = await rt.dialPort(id, 8080).catch((e: unknown) => {
            if (isSbxError(e, 'not_available') && e.details?.['reason'] === 'port_not_listening') return undefined;
            throw e;
          });
          if (!sock) return false;
          const chunks: Buffer[] = [];
          for await (const c of sock) chunks.push(c as Buffer);
          return Buffer.concat(chunks).toString() || false;
        },
        { what: 'hello from port 8080 of the gVisor box' },
      );
      assert.equal(text, 'hello-from-gvisor\n');
      await assert.rejects(rt.dialPort(id, 9999), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'port_not_exposed');
    } finally {
      await rt.remove(id, { force: true });
    }
  });

  test('a workspace PVC written in a gVisor box is read in a runc box after the first is gone', async () => {
    const ws = `/sbx-test/workspaces/${runId}`;
    await rt.createWorkspaceVolume(ws, { labels: { [TEST_LABEL]: runId } });
    try {
      // One box on gVisor writes, then (it gone) one on runc reads: the same PVC, two runtimes.
      for (const [ociRuntime, script, want] of [
        [runtimeClass, 'echo written-under-gvisor > /workspace/f && id -u && uname -r', /^1000\n\S*gvisor/],
        [undefined, 'cat /workspace/f; uname -r', /^written-under-gvisor\n(?!\S*gvisor)/],
      ] as const) {
        const id = await rt.create(spec({ ociRuntime, user: '1000', binds: [{ hostPath: ws, containerPath: '/workspace' }] }));
        await rt.start(id);
        const r = await rt.exec(id, ['sh', '-c', script]);
        await rt.remove(id, { force: true });
        assert.match(r.stdout, want, r.stderr);
      }
    } finally {
      await rt.removeWorkspaceVolume(ws);
    }
  });

  test('with the egress sidecar a gVisor box does not start: not_available, saying gVisor has no nftables', async () => {
    const withSidecar = openTestKube({ agentImage: testAgentImage });
    const id = await withSidecar.create(spec());
    try {
      await assert.rejects(
        withSidecar.start(id),
        (e) =>
          isSbxError(e, 'not_available') && e.details?.['reason'] === 'egress_unsupported' && /nftables/.test(e.message) && e.message.includes(runtimeClass),
      );
    } finally {
      await withSidecar.remove(id, { force: true });
      await withSidecar.close();
    }
  });
});

if (!why) {
  // The whole suite with the RuntimeClass on every box (no egress sidecar: see above).
  for (const agentImage of [testAgentImage, undefined]) {
    const options = { egressImage: '', ...(agentImage ? { agentImage } : {}) };
    runtimeConformance(`kubernetes on gVisor (RuntimeClass ${runtimeClass}), exec through ${agentImage ? 'the in-box agent' : 'the API server'}`, {
      open: () => openTestKube(options),
      openUnreachable: () => new KubernetesRuntime(testKubeAddress(unreachableKubeconfig()), options),
      baseImage: testEnv.baseImage,
      runId: testRunId(agentImage ? 'kube-gvisor-agent-conformance' : 'kube-gvisor-conformance'),
      spec: { ociRuntime: runtimeClass },
      ...(agentImage ? { cmd: GRACEFUL_CMD } : {}),
    });
  }
}
