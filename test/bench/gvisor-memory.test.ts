/**
 * The gVisor IdleMemory row's pure parts: which host processes are a box's (bench/density/host.ts's
 * containerProcesses, processLabel) and the per-box figures made of them (bench/rows/gvisor.ts's
 * idleFigures). Made-up process tables shaped as this machine's; no engine.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { containerProcesses, processLabel, processTable } from '../../bench/density/host.js';
import type { HostProcess } from '../../bench/density/host.js';
import { idleFigures } from '../../bench/rows/gvisor.js';

const RUNC = 'a'.repeat(64);
const GVISOR = 'b'.repeat(64);
/** An id that starts as GVISOR does: a prefix match would take its processes. */
const LONGER = `${'b'.repeat(64)}0`;
const MiB = 2 ** 20;

const p = (pid: number, ppid: number, comm: string, cmdline: string): HostProcess => ({ pid, ppid, comm, cmdline });

/** A runc box (shim → agent → sleep), a gVisor box (shim → gofer, sandbox → stubs), and what is not theirs. */
const TABLE: HostProcess[] = [
  p(1, 0, 'init', '/sbin/init'),
  p(10, 1, 'dockerd', `/usr/sbin/dockerd -H unix:///var/run/docker.sock`),
  p(20, 1, 'containerd-shim', `/usr/bin/containerd-shim-runc-v2 -namespace moby -id ${RUNC} -address /run/containerd.sock`),
  p(21, 20, 'sbx-agent', '/.sbx/sbx-agent init'),
  p(22, 21, 'sleep', 'sleep infinity'),
  p(30, 1, 'containerd-shim', `/usr/bin/containerd-shim-runc-v2 -namespace moby -id ${GVISOR} -address /run/containerd.sock`),
  p(31, 30, 'exe', `runsc-gofer --root=/var/run/docker/runtime-runc/moby gofer --bundle /run/moby/${GVISOR} ${GVISOR}`),
  p(32, 30, 'exe', `runsc-sandbox --root=/var/run/docker/runtime-runc/moby boot --bundle=/run/moby/${GVISOR} ${GVISOR}`),
  p(33, 32, 'exe', ''),
  p(34, 33, 'exe', ''),
  p(40, 1, 'containerd-shim', `/usr/bin/containerd-shim-runc-v2 -namespace moby -id ${LONGER} -address /run/containerd.sock`),
  p(41, 40, 'sh', 'sh'),
];

const pids = (found: Map<string, HostProcess[]>, id: string) => found.get(id)?.map((x) => x.pid);

test("a runc box's processes: its shim (named by the id) and everything under it", () => {
  assert.deepEqual(pids(containerProcesses(TABLE, [RUNC]), RUNC), [20, 21, 22]);
});

test("a gVisor box's processes: shim, gofer, sandbox and the sandbox's stubs; not a box whose id it prefixes", () => {
  const found = containerProcesses(TABLE, [GVISOR, LONGER]);
  assert.deepEqual(pids(found, GVISOR), [30, 31, 32, 33, 34]);
  assert.deepEqual(pids(found, LONGER), [40, 41]);
});

test('a container with no process on the host has an empty list, not a missing one', () => {
  assert.deepEqual(pids(containerProcesses(TABLE, ['c'.repeat(64)]), 'c'.repeat(64)), []);
});

test('processes are labelled by their program, stubs without a command line as stub', () => {
  const labels = containerProcesses(TABLE, [RUNC, GVISOR]);
  assert.deepEqual(labels.get(GVISOR)?.map(processLabel), ['containerd-shim-runc-v2', 'runsc-gofer', 'runsc-sandbox', 'stub', 'stub']);
  assert.deepEqual(labels.get(RUNC)?.map(processLabel), ['containerd-shim-runc-v2', 'sbx-agent', 'sleep']);
});

test("this process is in the host's process table, with its command line", () => {
  const me = processTable().find((x) => x.pid === process.pid);
  assert.ok(me, 'own pid listed');
  assert.equal(me.ppid, process.ppid);
  assert.match(me.cmdline, /node/);
});

test('idle figures are per box: host drop, cgroup, PSS and RSS summed over processes, PSS by kind', () => {
  const perBox = new Map([
    [
      'x',
      [
        { label: 'runsc-sandbox', pss: 20 * MiB, rss: 40 * MiB },
        { label: 'stub', pss: 1 * MiB, rss: 2 * MiB },
      ],
    ],
    ['y', [{ label: 'runsc-sandbox', pss: 22 * MiB, rss: 44 * MiB }]],
  ]);
  const f = idleFigures(2, { availableBytes: 100 * MiB, cgroupBytes: 30 * MiB }, perBox);
  assert.equal(f.boxes, 2);
  assert.equal(f.hostMiB, 50);
  assert.equal(f.cgroupMiB, 15);
  assert.equal(f.pssMiB, 21.5);
  assert.equal(f.rssMiB, 43);
  assert.equal(f.processes, 1.5);
  assert.deepEqual(f.pssMiBByCommand, { 'runsc-sandbox': 21, stub: 0.5 });
});
