// What the conformance suite does not ask and Kubernetes makes its own: argv through the API
// server, a pod that cannot start, port-forward, the pod watch, labels that Kubernetes labels
// cannot hold, least privilege, kills of escaped children. Real pods only (src/testing/kube-cluster.ts
// says which cluster, and skips with the reason when there is none).
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { isSbxError } from '../../errors.js';
import { readPort, startTestBox } from '../../testing/boxes.js';
import { assertNoContainersLeft } from '../../testing/cleanup.js';
import { TEST_LABEL, testEnv, testRunId } from '../../testing/env.js';
import type { ContainerEvent, ContainerSpec } from '../types.js';
import { KubernetesRuntime } from './runtime.js';
import { openTestKube, testKubeAddress, testKubeconfig, unavailable } from '../../testing/kube-cluster.js';

const why = await unavailable();
const runId = testRunId('kube-runtime');

describe('Kubernetes runtime on a real cluster', { skip: why ?? false }, () => {
  let rt: KubernetesRuntime;
  let box: string;
  const spec = (extra: Partial<ContainerSpec> = {}): ContainerSpec => ({
    image: testEnv.baseImage,
    ...extra,
    labels: { [TEST_LABEL]: runId, ...(extra.labels ?? {}) },
  });

  before(async () => {
    rt = openTestKube();
    box = await startTestBox(rt, runId);
  });

  after(async () => {
    try {
      if (box) await rt.remove(box, { force: true });
      await assertNoContainersLeft(rt, runId);
    } finally {
      await rt.close();
    }
  });

  test('argv with spaces, quotes and $(…) reaches the process unchanged', async () => {
    const argv = ['two words', `it's "quoted"`, '$(id -u)', '`id`', '; echo pwned', '', '*'];
    const r = await rt.exec(box, ['printf', '[%s]\\n', ...argv], { env: { X: '$(id) x' } });
    assert.equal(r.stdout, argv.map((a) => `[${a}]\n`).join(''));
    assert.equal((await rt.exec(box, ['sh', '-c', 'printf %s "$X"'], { env: { X: '$(id) x' } })).stdout, '$(id) x');
  });

  test('labels Kubernetes cannot hold round-trip, and a second runtime lists the box with all of them', async () => {
    const labels = { 'sbx.created-at': '2026-12-04T11:00:00.000Z', 'sbx.mount-path': '/workspace', 'sbx.label.note': 'free text: a/b c', 'sbx.conf': 'k' };
    const id = await rt.create(spec({ labels, name: 'Not_A_Pod_Name' }));
    const other = openTestKube();
    const [found] = await other.list({ labels: { [TEST_LABEL]: runId, 'sbx.label.note': 'free text: a/b c' } });
    assert.equal(found?.id, id);
    assert.deepEqual(found?.labels, { ...labels, [TEST_LABEL]: runId });
    assert.equal(found?.name, 'Not_A_Pod_Name');
    await rt.remove(id, { force: true });
  });

  test('a pod whose image is not on the node fails start with the reason, and nothing is left', async () => {
    const ref = `sbx-not-imported-${Date.now()}:none`;
    const id = await rt.create(spec({ image: ref }));
    const t0 = performance.now();
    await assert.rejects(
      rt.start(id),
      (e) => isSbxError(e, 'not_found') && e.message.includes(ref) && /ErrImage|ImagePull|not found|no such host/i.test(e.message),
    );
    assert.ok(performance.now() - t0 < 60_000);
    await rt.remove(id, { force: true });
    await assert.rejects(rt.inspect(id), (e) => isSbxError(e, 'not_found'));
  });

  test('a workspace PVC keeps its data across pods: written in one box, read in a second after the first is gone', async () => {
    const ws = `/sbx-test/workspaces/${runId}`;
    await rt.createWorkspaceVolume(ws, { labels: { [TEST_LABEL]: runId } });
    try {
      const mount = { user: '1000', binds: [{ hostPath: ws, containerPath: '/workspace' }] };
      const a = await rt.create(spec(mount));
      await rt.start(a);
      const w = await rt.exec(a, ['sh', '-c', 'echo kept > /workspace/f && id -u']);
      assert.equal(w.stdout, '1000\n', w.stderr);
      await rt.remove(a, { force: true });
      const b = await rt.create(spec(mount));
      await rt.start(b);
      assert.equal((await rt.exec(b, ['cat', '/workspace/f'])).stdout, 'kept\n');
      await rt.remove(b, { force: true });
    } finally {
      await rt.removeWorkspaceVolume(ws);
    }
  });

  test('dialPort reaches a listed port through port-forward; an unlisted one is not exposed', async () => {
    const id = await rt.create(spec({ cmd: ['sh', '-c', 'while :; do echo hello-from-box | nc -l -p 8080; done'], ports: [{ containerPort: 8080 }] }));
    await rt.start(id);
    assert.match(await readPort(rt, id, 8080, /hello/), /hello-from-box/);
    await assert.rejects(rt.dialPort(id, 9999), (e) => isSbxError(e, 'not_available') && e.details?.['reason'] === 'port_not_exposed');
    await rt.remove(id, { force: true });
  });

  test('the pod watch reports started and removed', async () => {
    const ac = new AbortController();
    const seen: ContainerEvent[] = [];
    const watching = (async () => {
      for await (const e of rt.events({ labels: { [TEST_LABEL]: runId, 'sbx.watch': 'yes' }, signal: ac.signal })) seen.push(e);
    })();
    await sleep(300);
    const id = await rt.create(spec({ labels: { 'sbx.watch': 'yes' } }));
    await rt.start(id);
    await rt.remove(id, { force: true });
    for (let i = 0; i < 50 && !seen.some((e) => e.action === 'removed'); i++) await sleep(100);
    ac.abort();
    await watching;
    const mine = seen.filter((e) => e.id === id).map((e) => e.action);
    assert.ok(mine.includes('started'), `events: ${mine.join(', ')}`);
    assert.equal(mine.at(-1), 'removed');
    assert.equal(seen.find((e) => e.id === id)?.labels['sbx.watch'], 'yes');
  });

  test('a timeout kills setsid and env -i children too', async () => {
    const r = await rt.exec(box, ['sh', '-c', 'setsid sleep 341 & env -i sleep 342 & sleep 343'], { timeoutMs: 500 });
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, 137);
    const left = (await rt.processes(box)).filter((p) => /sleep 34[123]/.test(p.command));
    assert.deepEqual(left, []);
  });

  test('least privilege: outside the Role, the error names the permission', async (t) => {
    const elsewhere = new KubernetesRuntime(testKubeAddress(testKubeconfig, 'default'));
    const outside = await elsewhere.list().then(
      () => undefined,
      (e: unknown) => e,
    );
    // Another cluster's identity may be allowed more: then there is nothing of the Role to check.
    if (outside === undefined) return t.skip('this identity may list pods in default: it is not the least-privilege Role of docs/kubernetes.md');
    assert.ok(isSbxError(outside, 'forbidden') && /cannot list resource "pods"/.test(outside.message) && /"default"/.test(outside.message), String(outside));
    // Nodes are cluster-scoped: the Role has none, so whether an image is there cannot be told.
    await assert.rejects(rt.images.exists(testEnv.baseImage), (e) => isSbxError(e, 'not_available') && /nodes/.test(e.message));
    assert.deepEqual(await rt.resources(), { cpus: 0, memoryBytes: 0 });
  });
});
