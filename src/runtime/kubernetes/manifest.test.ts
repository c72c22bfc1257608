// Pod manifests from specs. These pin what the pod asks Kubernetes for; whether Kubernetes does
// it (limits enforced, users applied, argv unchanged) is for the tests against a real cluster.
import { EGRESS_ALL } from '../egress-spec.js';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isSbxError } from '../../errors.js';
import type { ContainerSpec } from '../types.js';
import { egressDenyNetworks, egressDnsServers } from './egress.js';
import { PROBE_LABEL, agentDeliveryChoice, probeManifest } from './agent-delivery.js';
import {
  AGENT_ANNOTATION,
  AGENT_BIN,
  AGENT_PORT,
  AGENT_TOKEN_ENV,
  DIAL_POD_IP_ANNOTATION,
  EGRESS_CONTAINER,
  LABELS_ANNOTATION,
  MAIN_CONTAINER,
  NAME_ANNOTATION,
  podManifest,
  tmpfsSize,
  workspacePvcName,
} from './manifest.js';

const base: ContainerSpec = { image: 'sbx-base:latest' };
const opts = { name: 'sbx-abc123', namespace: 'sbx-test' };
const main = (spec: ContainerSpec, o: Parameters<typeof podManifest>[1] = opts) => {
  const pod = podManifest(spec, o);
  const c = pod.spec!.containers.find((x) => x.name === MAIN_CONTAINER);
  assert.ok(c, 'the pod has its main container');
  return { pod, c };
};

test('every label is kept in the annotation; only valid Kubernetes labels become labels', () => {
  const labels = {
    'sbx.managed-by': 'sbx',
    'sbx.id': 'box-1',
    'sbx.created-at': '2026-12-04T11:00:00.000Z',
    'sbx.mount-path': '/workspace',
    'sbx.label.team': 'a b',
    'sbx.workspace': '',
  };
  const { pod } = main({ ...base, name: 'My_Box', labels });
  assert.deepEqual(JSON.parse(pod.metadata!.annotations![LABELS_ANNOTATION]!), labels);
  assert.deepEqual(pod.metadata!.labels, { 'sbx.managed-by': 'sbx', 'sbx.id': 'box-1', 'sbx.workspace': '' });
  assert.equal(pod.metadata!.annotations![NAME_ANNOTATION], 'My_Box');
  assert.equal(pod.metadata!.name, 'sbx-abc123');
  assert.equal(pod.metadata!.namespace, 'sbx-test');
});

test('memory and cpus become limits; memory is requested whole, CPU at a tenth', () => {
  const { c } = main({ ...base, memory: 256 * 1024 * 1024, cpus: 1.5 });
  assert.deepEqual(c.resources, { limits: { memory: '268435456', cpu: '1500m' }, requests: { memory: '268435456', cpu: '150m' } });
  assert.equal(main({ ...base, cpus: 0.0001 + 0.01 }).c.resources!.limits!['cpu'], '10m');
  assert.equal(main(base).c.resources, undefined);
});

test('the security context drops every capability but the added ones, with seccomp and no escalation', () => {
  const { pod, c } = main({ ...base, user: '1000:1001', security: { capDrop: ['ALL'], capAdd: ['KILL', 'SETUID'], readOnlyRootfs: true } });
  assert.deepEqual(c.securityContext, {
    allowPrivilegeEscalation: false,
    capabilities: { drop: ['ALL'], add: ['KILL', 'SETUID'] },
    seccompProfile: { type: 'RuntimeDefault' },
    readOnlyRootFilesystem: true,
    runAsUser: 1000,
    runAsGroup: 1001,
  });
  assert.equal(pod.spec!.automountServiceAccountToken, false);
  assert.equal(pod.spec!.restartPolicy, 'Never');
  assert.equal(c.imagePullPolicy, 'IfNotPresent');
  assert.deepEqual(pod.spec!.securityContext, { seccompProfile: { type: 'RuntimeDefault' } });
  const plain = main({ ...base, user: '1000' }).c.securityContext!;
  assert.equal(plain.runAsUser, 1000);
  assert.equal(plain.runAsGroup, undefined);
  assert.deepEqual(plain.capabilities, { drop: ['ALL'] });
  assert.equal(plain.readOnlyRootFilesystem, false);
});

test('a user name is invalid_argument naming user: Kubernetes takes only ids', () => {
  assert.throws(
    () => podManifest({ ...base, user: 'sandbox' }, opts),
    (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'user',
  );
});

test('argv with spaces, quotes and $(…) stays argv, never a shell string', () => {
  const argv = ['printf', '%s\\n', 'two words', `it's "quoted"`, '$(id -u)', '`id`', '; rm -rf /'];
  const { c } = main({ ...base, entrypoint: ['/bin/env'], cmd: argv });
  assert.deepEqual(c.command, ['/bin/env']);
  assert.deepEqual(c.args, argv);
  // Only what the spec says: the image's entrypoint and CMD stay when the spec has none.
  const bare = main(base).c;
  assert.equal(bare.command, undefined);
  assert.equal(bare.args, undefined);
});

test('the in-box agent: an init container copies it into an emptyDir, the box command is its child', () => {
  const cmd = ['/bin/sh', '-c', "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done"];
  const agent = { image: 'sbx-agent:1', token: 'k'.repeat(64), delivery: 'init-container' as const };
  const { pod, c } = main({ ...base, cmd, user: 'sandbox' }, { ...opts, agent });
  assert.deepEqual(c.command, [AGENT_BIN, 'init', '--socket', '', '--listen', `127.0.0.1:${AGENT_PORT}`, '--user', 'sandbox', '--home', '--', ...cmd]);
  assert.equal(c.args, undefined);
  // The secret reaches the agent only (agent/init.go drops it from the box's environment).
  assert.deepEqual(c.env, [{ name: AGENT_TOKEN_ENV, value: agent.token }]);
  assert.equal(pod.metadata!.annotations![AGENT_ANNOTATION], String(AGENT_PORT));
  // Root with only what switching users and killing needs; the agent takes the user (a name is fine).
  assert.equal(c.securityContext!.runAsUser, 0);
  assert.deepEqual(c.securityContext!.capabilities, { drop: ['ALL'], add: ['KILL', 'SETUID', 'SETGID'] });
  assert.equal(c.securityContext!.allowPrivilegeEscalation, false);
  assert.equal(c.terminationMessagePolicy, 'FallbackToLogsOnError');
  // Without a user: the image's user, whatever it is (no runAsUser); HOME from the spec is kept.
  const own = main({ ...base, cmd, env: { HOME: '/h' } }, { ...opts, agent }).c;
  assert.equal(own.securityContext!.runAsUser, undefined);
  assert.deepEqual(own.command, [AGENT_BIN, 'init', '--socket', '', '--listen', `127.0.0.1:${AGENT_PORT}`, '--', ...cmd]);
  const init = pod.spec!.initContainers![0]!;
  assert.deepEqual(init.command, ['/sbx-agent', 'install', AGENT_BIN]);
  assert.equal(init.image, 'sbx-agent:1');
  const vol = pod.spec!.volumes!.find((v) => v.emptyDir && v.name === init.volumeMounts![0]!.name);
  assert.ok(vol, 'the binary goes to an emptyDir');
  assert.deepEqual(
    c.volumeMounts!.find((m) => m.name === vol.name),
    { name: vol.name, mountPath: '/.sbx', readOnly: true },
  );
  assert.throws(
    () => podManifest(base, { ...opts, agent }),
    (e) => isSbxError(e, 'invalid_argument'),
  );
  assert.throws(
    () => podManifest({ ...base, cmd, env: { [AGENT_TOKEN_ENV]: 'mine' } }, { ...opts, agent }),
    (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'env',
  );
  assert.throws(
    () => podManifest({ ...base, cmd, ports: [{ containerPort: AGENT_PORT }] }, { ...opts, agent }),
    (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'ports',
  );
});

test('a pod of a RuntimeClass is reached at its IP: the agent listens on every address, the pod says so', () => {
  const cmd = ['sleep', '1'];
  const agent = { image: 'sbx-agent:1', token: 'k'.repeat(64), delivery: 'image-volume' as const };
  const { pod, c } = main({ ...base, cmd, ociRuntime: 'gvisor' }, { ...opts, agent });
  assert.deepEqual(c.command, [AGENT_BIN, 'init', '--socket', '', '--listen', `0.0.0.0:${AGENT_PORT}`, '--home', '--', ...cmd]);
  assert.equal(pod.metadata!.annotations![DIAL_POD_IP_ANNOTATION], 'true');
  assert.equal(pod.spec!.runtimeClassName, 'gvisor');
  // Without a RuntimeClass: the loopback and the port-forward, as before.
  const plain = main({ ...base, cmd }, { ...opts, agent });
  assert.equal(plain.pod.metadata!.annotations![DIAL_POD_IP_ANNOTATION], undefined);
  assert.equal(plain.c.command![5], `127.0.0.1:${AGENT_PORT}`);
  // Without the agent the box's ports are reached at the IP too.
  assert.equal(main({ ...base, ociRuntime: 'gvisor' }).pod.metadata!.annotations![DIAL_POD_IP_ANNOTATION], 'true');
});

test('the in-box agent from an image volume: the agent image mounted read-only at /.sbx, no init container', () => {
  const cmd = ['sleep', '1'];
  const agent = { image: 'sbx-agent:1', token: 'k'.repeat(64), delivery: 'image-volume' as const };
  const { pod, c } = main({ ...base, cmd }, { ...opts, agent });
  assert.equal(pod.spec!.initContainers, undefined, 'nothing starts before the box');
  assert.equal(c.command![0], AGENT_BIN);
  const mount = c.volumeMounts!.find((m) => m.mountPath === '/.sbx');
  assert.deepEqual(mount, { name: mount!.name, mountPath: '/.sbx', readOnly: true });
  const vol = pod.spec!.volumes!.find((v) => v.name === mount!.name)!;
  assert.deepEqual(vol.image, { reference: 'sbx-agent:1', pullPolicy: 'IfNotPresent' });
  assert.equal(vol.emptyDir, undefined);
  // The same hardening as with the init container: the box's container is the only one, and it is the agent's.
  const viaInit = main({ ...base, cmd }, { ...opts, agent: { ...agent, delivery: 'init-container' } }).c;
  assert.deepEqual(c.securityContext, viaInit.securityContext);
  assert.deepEqual(c.command, viaInit.command);
  // Under egress rules the sidecar is the only init container.
  const egress = { image: 'sbx-egress:1', dns: [] };
  assert.deepEqual(
    main({ ...base, cmd }, { ...opts, agent, egress }).pod.spec!.initContainers!.map((i) => i.name),
    [EGRESS_CONTAINER],
  );
});

test('agentDelivery: auto, image-volume or init-container; anything else is refused', () => {
  assert.equal(agentDeliveryChoice(undefined), 'auto');
  assert.equal(agentDeliveryChoice('image-volume'), 'image-volume');
  assert.equal(agentDeliveryChoice('init-container'), 'init-container');
  assert.throws(
    () => agentDeliveryChoice('hostPath'),
    (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'agentDelivery',
  );
});

test('the delivery probe pod runs the agent from an image volume, unprivileged, and is never a box', () => {
  const pod = probeManifest('sbx-agent-probe-1', 'ns', 'sbx-agent:1');
  const [c] = pod.spec!.containers;
  assert.deepEqual(c!.command, [AGENT_BIN, 'version']);
  assert.deepEqual(pod.spec!.volumes, [{ name: 'sbx-agent', image: { reference: 'sbx-agent:1', pullPolicy: 'IfNotPresent' } }]);
  assert.deepEqual(c!.volumeMounts, [{ name: 'sbx-agent', mountPath: '/.sbx', readOnly: true }]);
  assert.deepEqual(c!.securityContext!.capabilities, { drop: ['ALL'] });
  assert.equal(c!.securityContext!.runAsUser, 65534);
  assert.equal(pod.spec!.automountServiceAccountToken, false);
  assert.equal(pod.metadata!.labels![PROBE_LABEL], 'agent-delivery');
});

test('grace period, env, workDir, ports, RuntimeClass', () => {
  const { pod, c } = main(
    { ...base, env: { A: '1', B: 'x y' }, workDir: '/tmp', ports: [{ containerPort: 8080 }, { containerPort: 53, protocol: 'udp' }] },
    { ...opts, terminationGracePeriodSeconds: 3 },
  );
  assert.equal(pod.spec!.terminationGracePeriodSeconds, 3);
  assert.equal(pod.spec!.runtimeClassName, undefined);
  assert.deepEqual(c.env, [
    { name: 'A', value: '1' },
    { name: 'B', value: 'x y' },
  ]);
  assert.equal(c.workingDir, '/tmp');
  assert.deepEqual(c.ports, [
    { containerPort: 8080, protocol: 'TCP' },
    { containerPort: 53, protocol: 'UDP' },
  ]);
  // The pool's ociRuntime reaches the spec: the RuntimeClass (gVisor, Kata).
  assert.equal(main({ ...base, ociRuntime: 'kata' }).pod.spec!.runtimeClassName, 'kata');
});

test('tmpfs and shm are memory emptyDirs; binds are the workspaces’ PVCs', () => {
  const { pod, c } = main({
    ...base,
    shmSize: 1024,
    security: { tmpfs: { '/tmp': 'rw,nosuid,size=64m' } },
    binds: [{ hostPath: '/data/workspaces/ws-1', containerPath: '/workspace', readOnly: true }],
  });
  const byName = Object.fromEntries(pod.spec!.volumes!.map((v) => [v.name, v]));
  const mountOf = (path: string) => c.volumeMounts!.find((m) => m.mountPath === path)!;
  assert.deepEqual(byName[mountOf('/tmp').name]!.emptyDir, { medium: 'Memory', sizeLimit: '64Mi' });
  assert.deepEqual(byName[mountOf('/dev/shm').name]!.emptyDir, { medium: 'Memory', sizeLimit: '1024' });
  assert.deepEqual(byName[mountOf('/workspace').name]!.persistentVolumeClaim, { claimName: workspacePvcName('/data/workspaces/ws-1'), readOnly: true });
  assert.match(workspacePvcName('/data/workspaces/ws-1'), /^sbx-ws-ws-1-[0-9a-f]{8}$/);
  // The box's group owns the volume's files, so its user can write the workspace.
  const withUser = podManifest({ ...base, user: '1000', binds: [{ hostPath: '/w', containerPath: '/workspace' }] }, opts);
  assert.equal(withUser.spec!.securityContext!.fsGroup, 1000);
  assert.equal(pod.spec!.securityContext!.fsGroup, undefined);
  assert.notEqual(workspacePvcName('/a/ws-1'), workspacePvcName('/b/ws-1'));
  assert.equal(tmpfsSize('rw,nodev'), undefined);
  assert.equal(tmpfsSize('size=2g'), '2Gi');
});

test('a network other than the pod network is refused', () => {
  assert.throws(
    () => podManifest({ ...base, network: 'none' }, opts),
    (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'network',
  );
  assert.doesNotThrow(() => podManifest({ ...base, network: 'bridge' }, opts));
});

test('egress: a native sidecar with NET_ADMIN alone holds the rules, first of the init containers; the box never gets NET_ADMIN', () => {
  const egress = { mode: 'allowlist' as const, allow: [{ host: '198.18.0.1/32', ports: [80, 80] as [number, number] }], deny: [], endpoints: [] };
  const cmd = ['sleep', '1'];
  const agent = { image: 'sbx-agent:1', token: 'k'.repeat(64), delivery: 'init-container' as const };
  const { pod, c } = main({ ...base, cmd, egress, memory: 64 * 1024 * 1024 }, { ...opts, agent, egress: { image: 'sbx-egress:1', dns: ['198.18.0.53:53'] } });
  const [sidecar, install] = pod.spec!.initContainers!;
  assert.equal(sidecar!.name, EGRESS_CONTAINER);
  assert.equal(install!.name, 'sbx-agent-install', 'the agent is installed only once the rules are in place');
  assert.equal(sidecar!.image, 'sbx-egress:1');
  // restartPolicy Always on an init container is what makes it a sidecar that runs beside the box.
  assert.equal(sidecar!.restartPolicy, 'Always');
  assert.deepEqual(sidecar!.command, ['/usr/local/bin/sbx-egress', 'pod']);
  assert.deepEqual(sidecar!.securityContext!.capabilities, { drop: ['ALL'], add: ['NET_ADMIN'] });
  assert.equal(sidecar!.securityContext!.allowPrivilegeEscalation, false);
  assert.equal(sidecar!.securityContext!.readOnlyRootFilesystem, true);
  const env = Object.fromEntries(sidecar!.env!.map((e) => [e.name, e]));
  assert.deepEqual(JSON.parse(env['SBX_EGRESS_SPEC']!.value!), { spec: egress, dns: ['198.18.0.53:53'] });
  assert.deepEqual(env['SBX_EGRESS_HOST_ADDRESSES']!.valueFrom, { fieldRef: { fieldPath: 'status.hostIP' } });
  // Fail closed: the box's container starts only after this probe passed.
  assert.deepEqual(sidecar!.lifecycle!.postStart!.exec, { command: ['/usr/local/bin/sbx-egress', 'ready', '--wait'] });
  assert.equal(sidecar!.startupProbe, undefined, 'the hook gates the box, without the probe tick');
  assert.ok(sidecar!.resources!.requests!['memory'] && sidecar!.resources!.limits!['memory'], 'the sidecar is counted in the pod');
  // Its socket's volume is the sidecar's alone.
  const run = sidecar!.volumeMounts!.map((m) => m.name);
  assert.ok(!c.volumeMounts!.some((m) => run.includes(m.name)), 'the box does not mount the sidecar’s socket');
  assert.deepEqual(c.securityContext!.capabilities, { drop: ['ALL'], add: ['KILL', 'SETUID', 'SETGID'] });
  assert.equal(c.resources!.limits!['memory'], String(64 * 1024 * 1024), 'the box keeps its own limit');
  // No rules in the spec: everything but the always denied.
  const plain = podManifest({ ...base }, { ...opts, egress: { image: 'sbx-egress:1', dns: [] } }).spec!.initContainers![0]!;
  assert.deepEqual(JSON.parse(plain.env![0]!.value!), { spec: EGRESS_ALL, dns: [] });
  // Without the sidecar: no init container of it, and rules are refused rather than ignored.
  assert.equal(main(base).pod.spec!.initContainers, undefined);
  assert.throws(
    () => podManifest({ ...base, egress }, opts),
    (e) => isSbxError(e, 'not_available') && e.details?.['field'] === 'egress',
  );
});

test('egress: a box under egress rules cannot add the capabilities that would undo them', () => {
  const o = { ...opts, egress: { image: 'sbx-egress:1', dns: [] } };
  for (const cap of ['NET_ADMIN', 'NET_RAW', 'ALL']) {
    assert.throws(
      () => podManifest({ ...base, security: { capAdd: ['CHOWN', cap] } }, o),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'security.capAdd' && e.message.includes(cap),
    );
  }
  assert.doesNotThrow(() => podManifest({ ...base, security: { capAdd: ['NET_ADMIN'] } }, opts), 'without the sidecar there is nothing to undo');
});

test('egress DNS servers: the option, else SBX_EGRESS_DNS, with port 53 by default; a bad one names itself', () => {
  assert.deepEqual(egressDnsServers(['198.18.0.53', '10.0.0.1:5353', '2001:db8::53', '[2001:db8::1]:53'], {}), [
    '198.18.0.53:53',
    '10.0.0.1:5353',
    '[2001:db8::53]:53',
    '[2001:db8::1]:53',
  ]);
  assert.deepEqual(egressDnsServers(undefined, { SBX_EGRESS_DNS: '198.18.0.53, 198.18.0.54:53' }), ['198.18.0.53:53', '198.18.0.54:53']);
  assert.deepEqual(egressDnsServers(undefined, {}), []);
  assert.deepEqual(egressDnsServers([], { SBX_EGRESS_DNS: '198.18.0.53' }), [], 'an empty option is a choice: the pods’ own resolv.conf');
  assert.throws(
    () => egressDnsServers(['dns.example'], {}),
    (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'egressDns[0]',
  );
  assert.throws(
    () => egressDnsServers(undefined, { SBX_EGRESS_DNS: '1.2.3.4:99999' }),
    (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'SBX_EGRESS_DNS',
  );
});

test('egress deny networks: the option, else SBX_EGRESS_DENY_NETWORKS, into the sidecar’s SBX_EGRESS_ALWAYS_DENY', () => {
  assert.deepEqual(egressDenyNetworks(['10.244.0.0/16', '10.96.0.1', 'fd00::/8'], {}), ['10.244.0.0/16', '10.96.0.1/32', 'fd00::/8']);
  assert.deepEqual(egressDenyNetworks(undefined, { SBX_EGRESS_DENY_NETWORKS: '10.244.0.0/16,10.96.0.0/12' }), ['10.244.0.0/16', '10.96.0.0/12']);
  for (const bad of ['10.0.0.0/33', 'pods', '10.0.0.0/8/1', '::/129']) {
    assert.throws(
      () => egressDenyNetworks([bad], {}),
      (e) => isSbxError(e, 'invalid_argument') && e.details?.['field'] === 'egressDenyNetworks[0]',
    );
  }
  const sidecar = podManifest(base, { ...opts, egress: { image: 'sbx-egress:1', dns: [], alwaysDeny: ['10.244.0.0/16', '10.96.0.0/12'] } }).spec!
    .initContainers![0]!;
  assert.equal(sidecar.env!.find((e) => e.name === 'SBX_EGRESS_ALWAYS_DENY')?.value, '10.244.0.0/16,10.96.0.0/12');
});
