// The workspace helper pod and PVC manifests (pure). What Kubernetes does with them (the user
// applied, the root read-only, the token out of reach) is tested on the cluster, in
// src/sandbox/kubernetes-workspace.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pvcManifest } from './pvcs.js';
import { AGENT_ANNOTATION, AGENT_PORT, AGENT_TOKEN_ENV, LABELS_ANNOTATION, MAIN_CONTAINER, workspacePvcName } from './manifest.js';
import { HELPER_ROOT, HELPER_TOOL, helperManifest, helperPodName } from './workspace-helper.js';

const path = '/var/lib/sbx/workspaces/kube/ws-1/root';
const labels = { 'sbx.workspace-helper': 'sbx', 'sbx.workspace-id': 'ws-1', 'sbx.note': 'not a label value: a/b' };
const pod = helperManifest(path, { name: 'sbx-wsh-x', namespace: 'ns', image: 'sbx-agent:1', token: 'secret', uid: 1000, gid: 1001, labels });
const main = pod.spec!.containers[0]!;

test('the helper is the agent image alone with the PVC: no command, every operation as uid:gid', () => {
  assert.equal(pod.spec!.containers.length, 1);
  assert.equal(pod.spec!.initContainers, undefined);
  assert.equal(main.name, MAIN_CONTAINER);
  assert.equal(main.image, 'sbx-agent:1');
  assert.deepEqual(main.command, [HELPER_TOOL, 'init', '--socket', '', '--listen', `127.0.0.1:${AGENT_PORT}`, '--user', '1000:1001']);
  assert.equal(main.args, undefined);
  assert.deepEqual(main.env, [{ name: AGENT_TOKEN_ENV, value: 'secret' }]);
  assert.equal(pod.metadata!.annotations![AGENT_ANNOTATION], String(AGENT_PORT));
  assert.deepEqual(pod.spec!.volumes, [{ name: 'workspace', persistentVolumeClaim: { claimName: workspacePvcName(path) } }]);
  assert.deepEqual(main.volumeMounts, [{ name: 'workspace', mountPath: HELPER_ROOT }]);
  assert.equal(pod.spec!.securityContext!.fsGroup, 1001);
});

test('the helper holds nothing of the cluster and can change nothing but the PVC', () => {
  const sc = main.securityContext!;
  assert.equal(sc.readOnlyRootFilesystem, true);
  assert.equal(sc.allowPrivilegeEscalation, false);
  assert.deepEqual(sc.capabilities, { drop: ['ALL'], add: ['KILL', 'SETUID', 'SETGID'] });
  assert.equal(pod.spec!.automountServiceAccountToken, false);
  assert.equal(pod.spec!.enableServiceLinks, false);
  assert.equal(pod.spec!.restartPolicy, 'Never');
  assert.ok(main.resources?.limits?.['memory'], 'a memory limit');
});

test('labels: all in the annotation, the valid ones as labels; names are fresh per start', () => {
  assert.deepEqual(JSON.parse(pod.metadata!.annotations![LABELS_ANNOTATION]!), labels);
  assert.deepEqual(pod.metadata!.labels, { 'sbx.workspace-helper': 'sbx', 'sbx.workspace-id': 'ws-1' });
  const a = helperPodName(path);
  assert.match(a, /^sbx-wsh-[0-9a-f]{8}-[0-9a-f]{6}$/);
  assert.notEqual(helperPodName(path), a);
  assert.equal(helperPodName(path).slice(0, 16), a.slice(0, 16));
});

test('a PVC: labels Kubernetes cannot hold stay in the annotation only; size and class as asked', () => {
  const c = pvcManifest(path, 'ns', {
    labels: { 'sbx.workspace-id': 'ws-1', 'sbx.workspace-owner': 'alice@example.com' },
    sizeBytes: 4096,
    storageClassName: 'fast',
  });
  assert.deepEqual(c.metadata!.labels, { 'sbx.workspace-id': 'ws-1' });
  assert.deepEqual(JSON.parse(c.metadata!.annotations![LABELS_ANNOTATION]!), { 'sbx.workspace-id': 'ws-1', 'sbx.workspace-owner': 'alice@example.com' });
  assert.equal(c.metadata!.annotations!['sbx.dev/workspace-path'], path);
  assert.deepEqual(c.spec, { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '4096' } }, storageClassName: 'fast' });
  assert.equal(pvcManifest(path, 'ns').spec!.storageClassName, undefined);
});
