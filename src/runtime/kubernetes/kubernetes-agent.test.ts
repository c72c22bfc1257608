// The in-box agent on Kubernetes (docs/kubernetes.md, "The in-box agent"), on real pods: what
// the conformance suite does not ask. The agent listens on the pod's loopback with a per-pod
// token; boxes must not be able to use it, a second runtime must find it from the pod alone,
// and a box command the agent cannot start must fail start with its reason.
import assert from 'node:assert/strict';
import type { V1Pod } from '@kubernetes/client-node';
import { after, before, describe, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { GRACEFUL_CMD } from '../../sandbox/box-spec.js';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import type { ContainerSpec } from '../types.js';
import { AGENT_BIN, AGENT_PORT, AGENT_TOKEN_ENV } from './manifest.js';
import type { KubernetesRuntime } from './runtime.js';
import { openTestKube, testAgentImage, testKubeAddress, unavailable } from '../../testing/kube-cluster.js';
import { parseKubeAddress } from './address.js';
import { KubeConnection } from './connection.js';

const why = await unavailable();
const runId = testRunId('kube-agent');

/** The pod as the API server stored it. */
async function readPod(name: string): Promise<V1Pod> {
  const conn = await KubeConnection.open(parseKubeAddress(testKubeAddress()));
  return conn.core.readNamespacedPod({ name, namespace: conn.namespace });
}

describe('the in-box agent on Kubernetes', { skip: why ?? false }, () => {
  let rt: KubernetesRuntime;
  let box: string;
  const spec = (extra: Partial<ContainerSpec> = {}): ContainerSpec => ({
    image: testEnv.baseImage,
    cmd: GRACEFUL_CMD,
    ...extra,
    labels: { [TEST_LABEL]: runId, ...(extra.labels ?? {}) },
  });

  before(async () => {
    rt = openTestKube({ agentImage: testAgentImage });
    // A user by name: only the agent can resolve it (the pod's securityContext takes ids).
    box = await rt.create(spec({ user: 'sandbox' }));
    await rt.start(box);
  });

  after(async () => {
    try {
      if (box) await rt.remove(box, { force: true });
      await assertNoContainersLeft(rt, runId);
    } finally {
      await rt.close();
    }
  });

  test('execs take the agent path, as the box user by name, and as any other user asked for', async () => {
    assert.equal((await rt.inspect(box)).execPath, 'agent');
    assert.equal(rt.capabilities.execUser, true);
    assert.equal((await rt.exec(box, ['id', '-un'])).stdout, 'sandbox\n');
    assert.equal((await rt.exec(box, ['id', '-u'], { user: 'root' })).stdout, '0\n');
    assert.equal((await rt.exec(box, ['sh', '-c', 'echo $HOME'])).stdout, '/home/sandbox\n');
    await assert.rejects(rt.exec(box, ['id'], { user: 'nobody-here' }), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'user');
  });

  test('a box process cannot use the agent: no token in its environment, and a wrong one is refused', async () => {
    const env = await rt.exec(box, ['env']);
    assert.doesNotMatch(env.stdout, new RegExp(AGENT_TOKEN_ENV));
    // The box user cannot read PID 1's (the agent's) initial environment either.
    const environ = await rt.exec(box, ['cat', '/proc/1/environ']);
    assert.notEqual(environ.exitCode, 0);
    assert.doesNotMatch(environ.stdout, new RegExp(AGENT_TOKEN_ENV));
    for (const token of ['', 'guess'.repeat(13)]) {
      const r = await rt.exec(box, [AGENT_BIN, 'hello', `tcp:127.0.0.1:${AGENT_PORT}`, 'id'], { env: { [AGENT_TOKEN_ENV]: token } });
      assert.match(r.stdout, /forbidden/, r.stdout + r.stderr);
      assert.doesNotMatch(r.stdout, /uid=/);
    }
  });

  test('a second runtime finds the agent from the pod alone (recovery) and hands it box variables', async () => {
    const other = openTestKube({ agentImage: testAgentImage });
    try {
      assert.equal((await other.exec(box, ['id', '-un'])).stdout, 'sandbox\n');
      assert.equal(await other.setBoxEnv(box, { SBX_LATE: 'handed over' }), true);
      assert.equal((await rt.exec(box, ['sh', '-c', 'printf %s "$SBX_LATE"'])).stdout, 'handed over');
    } finally {
      await other.close();
    }
  });

  test('a timeout kills setsid, env -i and double-forked children through the agent', async () => {
    const r = await rt.exec(box, ['sh', '-c', 'setsid sleep 351 & env -i sleep 352 & (sleep 353 &) ; sleep 354'], { timeoutMs: 500 });
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, 137);
    const left = (await rt.processes(box)).filter((p) => /sleep 35[1234]/.test(p.command));
    assert.deepEqual(left, []);
  });

  test('a box command the agent cannot start fails start naming cmd, and the pod can be removed', async () => {
    const id = await rt.create(spec({ cmd: ['/no/such/program'] }));
    try {
      await assert.rejects(rt.start(id), (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'cmd' && /no\/such\/program/.test(e.message));
    } finally {
      await rt.remove(id, { force: true });
    }
  });

  test('without a user the box runs as the image user, and the agent starts processes as it', async () => {
    const id = await rt.create(spec());
    try {
      await rt.start(id);
      assert.equal((await rt.exec(id, ['id', '-u'])).stdout, '1000\n');
      // PID 1 runs as the same uid here, but is not dumpable: its initial environment (the token) stays closed.
      const environ = await rt.exec(id, ['cat', '/proc/1/environ']);
      assert.notEqual(environ.exitCode, 0);
      assert.doesNotMatch(environ.stdout, new RegExp(AGENT_TOKEN_ENV));
      // The agent is not root here: switching users is refused with the reason.
      await assert.rejects(rt.exec(id, ['id'], { user: 'root' }), (e) => isSbxError(e, 'not_available') && e.details?.['field'] === 'user');
    } finally {
      await rt.remove(id, { force: true });
    }
  });

  test('a box command that tries to take the agent port first gets nothing: the agent binds before it starts', async () => {
    const id = await rt.create(spec({ user: 'sandbox', cmd: ['sh', '-c', `nc -l -p ${AGENT_PORT} -e /bin/cat; echo nc-failed > /tmp/nc; exec sleep 3600`] }));
    try {
      await rt.start(id);
      assert.equal((await rt.exec(id, ['id', '-un'])).stdout, 'sandbox\n', 'the real agent answers');
      assert.equal((await rt.exec(id, ['cat', '/tmp/nc'])).stdout, 'nc-failed\n', 'the impostor could not bind');
    } finally {
      await rt.remove(id, { force: true });
    }
  });

  test('output that looks like the port-forward port prefix arrives intact (5 runs)', async () => {
    // 32763 bytes and then the port's two bytes: the frame ends where a 32 KiB read would leave exactly them.
    for (let i = 0; i < 5; i++) {
      const r = await rt.exec(box, [
        'sh',
        '-c',
        `head -c 32763 /dev/zero | tr '\\0' a; printf '\\${(AGENT_PORT & 0xff).toString(8)}\\${(AGENT_PORT >> 8).toString(8)}'`,
      ]);
      assert.equal(r.exitCode, 0, `run ${i}: ${r.stderr}`);
      assert.equal(r.stdout.slice(0, 32763), 'a'.repeat(32763), `run ${i}`);
      assert.equal(r.stdout.length, 32765, `run ${i}`);
    }
  });

  test("the agent's port is the agent's: a box cannot list it", async () => {
    await assert.rejects(
      rt.create(spec({ ports: [{ containerPort: AGENT_PORT }] })),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'ports',
    );
  });

  test("the agent's binary: the pod has the delivery the probe chose, and its mount is read-only even to root", async () => {
    const { delivery, why } = (await rt.agentDelivery())!;
    assert.equal(await openTestKube({ agent: false }).agentDelivery(), undefined, 'no agent, no probe');
    const pod = await readPod(box);
    const vol = pod.spec!.volumes!.find((v) => v.name === 'sbx-agent')!;
    const installs = (pod.spec!.initContainers ?? []).filter((c) => c.name === 'sbx-agent-install');
    if (delivery === 'image-volume') {
      assert.deepEqual({ ...vol.image }, { reference: testAgentImage, pullPolicy: 'IfNotPresent' }, why);
      assert.equal(installs.length, 0, 'no init container when the image is the volume');
    } else {
      assert.ok(vol.emptyDir, why);
      assert.equal(installs.length, 1);
    }
    const r = await rt.exec(box, ['sh', '-c', `echo x > ${AGENT_BIN} || echo refused; touch /.sbx/new || echo refused`], { user: 'root' });
    assert.equal(r.stdout, 'refused\nrefused\n', r.stderr);
    assert.equal((await rt.exec(box, [AGENT_BIN, 'version'])).exitCode, 0);
  });

  test('agentDelivery init-container: the fallback path still makes boxes whose exec takes the agent', async () => {
    const other = openTestKube({ agentImage: testAgentImage, agentDelivery: 'init-container' });
    let id: string | undefined;
    try {
      assert.deepEqual(await other.agentDelivery(), { delivery: 'init-container', why: 'the agentDelivery option' });
      id = await other.create(spec({ user: 'sandbox' }));
      await other.start(id);
      assert.equal((await other.inspect(id)).execPath, 'agent');
      assert.equal((await other.exec(id, ['id', '-un'])).stdout, 'sandbox\n');
      const pod = await readPod(id);
      assert.deepEqual(
        pod.spec!.initContainers!.map((c) => c.name),
        ['sbx-egress', 'sbx-agent-install'],
      );
    } finally {
      if (id) await other.remove(id, { force: true });
      await other.close();
    }
  });

  test('box.files() has its tool: the agent binary in the pod', async () => {
    assert.equal(await rt.boxTool(box), AGENT_BIN);
    const r = await rt.exec(box, [AGENT_BIN, 'fs', 'stat', '/etc/passwd']);
    assert.match(r.stdout, /"size"/);
  });
});
