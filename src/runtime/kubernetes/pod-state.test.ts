// Pods read as containers: statuses, OOM kills, exit codes and the reasons a pod is not ready,
// from pod objects shaped as the API server returns them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { canonicalImage } from './images.js';
import { LABELS_ANNOTATION, NAME_ANNOTATION } from './manifest.js';
import { infoOf, isReady, lastEvent, notReadyReason, statusOf } from './pod-state.js';
import { quantity } from './runtime.js';

const pod = (status: V1Pod['status'], meta: Partial<NonNullable<V1Pod['metadata']>> = {}): V1Pod => ({
  metadata: { name: 'sbx-1', creationTimestamp: new Date('2026-12-04T11:00:00Z'), ...meta },
  spec: { containers: [{ name: 'main', image: 'sbx-base:latest' }] },
  status,
});

test('phase and main container state map to the runtime status', () => {
  assert.equal(statusOf(pod({ phase: 'Pending' })), 'created');
  const running = pod({
    phase: 'Running',
    containerStatuses: [
      { name: 'main', ready: true, restartCount: 0, image: '', imageID: '', state: { running: { startedAt: new Date('2026-12-04T11:00:01Z') } } },
    ],
  });
  assert.equal(statusOf(running), 'running');
  assert.equal(isReady(running), true);
  assert.equal(infoOf(running).startedAt, '2026-12-04T11:00:01.000Z');
  assert.equal(infoOf(running).exitCode, null);
  assert.equal(statusOf(pod({ phase: 'Running' }, { deletionTimestamp: new Date() })), 'removing');
  assert.equal(statusOf(pod({ phase: 'Unknown' })), 'dead');
});

test('a container waiting to run again after its run ended (another policy than sbx’s Never) is restarting, with the last exit code', () => {
  const crashing = pod({
    phase: 'Running',
    containerStatuses: [
      {
        name: 'main',
        ready: false,
        restartCount: 3,
        image: '',
        imageID: '',
        state: { waiting: { reason: 'CrashLoopBackOff' } },
        lastState: { terminated: { exitCode: 4, reason: 'Error' } },
      },
    ],
  });
  assert.deepEqual([statusOf(crashing), infoOf(crashing).exitCode, infoOf(crashing).running], ['restarting', 4, false]);
});

test('an OOM kill and an exit code are read from the terminated state', () => {
  const oom = pod({
    phase: 'Failed',
    containerStatuses: [{ name: 'main', ready: false, restartCount: 0, image: '', imageID: '', state: { terminated: { exitCode: 137, reason: 'OOMKilled' } } }],
  });
  const info = infoOf(oom);
  assert.equal(info.status, 'exited');
  assert.equal(info.running, false);
  assert.equal(info.exitCode, 137);
  assert.equal(info.oomKilled, true);
  const done = infoOf(
    pod({
      phase: 'Succeeded',
      containerStatuses: [{ name: 'main', ready: false, restartCount: 0, image: '', imageID: '', state: { terminated: { exitCode: 0, reason: 'Completed' } } }],
    }),
  );
  assert.equal(done.exitCode, 0);
  assert.equal(done.oomKilled, false);
  // gVisor: the host kernel killed the whole sandbox, and its shim says 128; the box exits 137 as anywhere else.
  const sandboxOom = (exitCode: number, reason: string) =>
    infoOf(
      pod({
        phase: 'Failed',
        containerStatuses: [{ name: 'main', ready: false, restartCount: 0, image: '', imageID: '', state: { terminated: { exitCode, reason } } }],
      }),
    ).exitCode;
  assert.equal(sandboxOom(128, 'OOMKilled'), 137);
  assert.equal(sandboxOom(128, 'Error'), 128, 'only an OOM kill is read as SIGKILL');
});

test('labels and name come from the annotations', () => {
  const info = infoOf(
    pod(
      { phase: 'Pending' },
      { labels: { 'sbx.id': 'b' }, annotations: { [LABELS_ANNOTATION]: '{"sbx.id":"b","sbx.mount-path":"/workspace"}', [NAME_ANNOTATION]: 'My_Box' } },
    ),
  );
  assert.deepEqual(info.labels, { 'sbx.id': 'b', 'sbx.mount-path': '/workspace' });
  assert.equal(info.name, 'My_Box');
  assert.equal(info.id, 'sbx-1');
  assert.deepEqual(infoOf(pod({}, { labels: { a: 'b' }, annotations: { [LABELS_ANNOTATION]: '{broken' } })).labels, { a: 'b' });
});

test('why a pod is not ready: a waiting reason, a failed schedule, else the latest event', () => {
  const waiting = pod({
    phase: 'Pending',
    containerStatuses: [
      {
        name: 'main',
        ready: false,
        restartCount: 0,
        image: '',
        imageID: '',
        state: { waiting: { reason: 'ErrImageNeverPull', message: 'Container image "x" is not present with pull policy of Never' } },
      },
    ],
  });
  assert.deepEqual(notReadyReason(waiting), { reason: 'ErrImageNeverPull', message: 'Container image "x" is not present with pull policy of Never' });
  const creating = pod({
    phase: 'Pending',
    containerStatuses: [{ name: 'main', ready: false, restartCount: 0, image: '', imageID: '', state: { waiting: { reason: 'ContainerCreating' } } }],
  });
  assert.equal(notReadyReason(creating), undefined);
  const unschedulable = pod({
    phase: 'Pending',
    conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/1 nodes are available: 1 Insufficient memory.' }],
  });
  assert.deepEqual(notReadyReason(unschedulable), { reason: 'Unschedulable', message: '0/1 nodes are available: 1 Insufficient memory.' });
  assert.deepEqual(
    lastEvent([
      { metadata: {}, involvedObject: {}, reason: 'Scheduled', message: 'a', lastTimestamp: new Date('2026-12-04T11:00:00Z') },
      { metadata: {}, involvedObject: {}, reason: 'FailedMount', message: 'b', lastTimestamp: new Date('2026-12-04T11:00:05Z') },
    ]),
    { reason: 'FailedMount', message: 'b' },
  );
});

test('quantities and image names as Kubernetes writes them', () => {
  assert.equal(quantity('2'), 2);
  assert.equal(quantity('1500m'), 1.5);
  assert.equal(quantity('16318892Ki'), 16318892 * 1024);
  assert.equal(quantity('8Gi'), 8 * 2 ** 30);
  assert.equal(quantity('junk'), 0);
  assert.equal(canonicalImage('sbx-base:latest'), 'docker.io/library/sbx-base:latest');
  assert.equal(canonicalImage('sbx-base'), 'docker.io/library/sbx-base:latest');
  assert.equal(canonicalImage('127.0.0.1:5000/sbx/pulltest:v1'), '127.0.0.1:5000/sbx/pulltest:v1');
  assert.equal(canonicalImage('org/app:1'), 'docker.io/org/app:1');
});
