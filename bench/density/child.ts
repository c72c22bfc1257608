/**
 * Runs in its own process (forked by density/probe.ts): one Manager grows to each N of the
 * curve in turn, and at each N reports what the host, the engine and the Manager spend on N idle
 * boxes, and what list, info, exec, create, remove and a cleanup pass cost at that N. Its RSS is
 * the Manager's and nothing of the bench around it. It removes every box it made before exiting;
 * killed, the bench's sweep removes them by their label.
 */
import net from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { AGENT_PORT } from '../../src/runtime/agent-protocol.js';
import type { Box } from '../../src/sandbox/box.js';
import { Manager } from '../../src/sandbox/manager.js';
import { BASE_IMAGE, BENCH_LABEL } from '../core/identity.js';
import { forEachLimited } from '../core/pool.js';
import { percentile } from '../core/stats.js';
import { EngineClient } from '../engine/client.js';
import { cgroupMemory, kernelTasks, meminfo, parentOf, pidMax, rollup, rssOfCommands } from './host.js';
import type { DensityArgs, DensityFigures, DensityMessage, DensitySamples } from './protocol.js';

const args = JSON.parse(process.argv[2] ?? '{}') as DensityArgs;
const gc = (globalThis as { gc?: () => void }).gc;
const MiB = 2 ** 20;
/** Creates in flight while growing: what a busy API would send; two cores queue anything wider. */
const PARALLEL = 8;
const REMOVE_PARALLEL = 3;
/** Samples per measured op at each N. */
const SAMPLES = 30;
/** Boxes made and removed one at a time at each N, for create and remove latency. */
const PROBE_BOXES = 8;
const CLEANUP_PASSES = 3;
/** Host memory a box is assumed to take before one was measured. */
const GUESS_PER_BOX = 10 * MiB;
/** Kernel tasks a box is assumed to take before one was measured (~21 seen: shim 12, agent 7–8, command 1). */
const GUESS_TASKS_PER_BOX = 25;
/** Tasks left to everything else on the machine (the engine's forks, tests, shells). */
const TASK_MARGIN = 2000;

/** Waits for the message to leave: the process exits right after the last. */
const send = (m: DensityMessage) => new Promise<void>((resolve) => (process.send ? process.send(m, undefined, {}, () => resolve()) : resolve()));
const p50 = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );
const timed = async (fn: () => Promise<unknown>): Promise<number> => {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
};

async function settled(): Promise<{ rss: number; heap: number }> {
  gc?.();
  await sleep(50);
  gc?.();
  const m = process.memoryUsage();
  return { rss: m.rss, heap: m.heapUsed };
}

const engine = new EngineClient();
const manager = new Manager({ name: args.managerName, pools: [{ name: 'local', addr: 'local', maxPerUser: 0 }], dataDir: args.dataDir, cleanupIntervalMs: 0 });
// Idle for the whole run without the cleanup pass acting on them: the pass still plans over every box.
const createOpts = { image: BASE_IMAGE, labels: { [BENCH_LABEL]: args.runId }, idleTimeoutMs: 24 * 3_600_000 };
const boxes: Box[] = [];
/** Container id → its init's pid (the agent) and its bridge address, read once: a running box keeps them. */
const inits = new Map<string, { pid: number; address: string | undefined }>();
let createFailures = 0;

async function initOf(box: Box): Promise<{ pid: number; address: string | undefined } | undefined> {
  let init = inits.get(box.containerId);
  if (init === undefined) {
    const c = await engine.json<{ State?: { Pid?: number }; NetworkSettings?: { Networks?: Record<string, { IPAddress?: string }> } }>(
      'GET',
      `/containers/${box.containerId}/json`,
    );
    const pid = c.State?.Pid || undefined;
    const address = Object.values(c.NetworkSettings?.Networks ?? {}).find((n) => n.IPAddress)?.IPAddress;
    if (pid) inits.set(box.containerId, (init = { pid, address }));
  }
  return init;
}

/** A bare TCP connect to the box's agent port and its close: what the kernel charges any fresh connection to a box at this N. */
function connectTo(address: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(AGENT_PORT, address, () => {
      socket.destroy();
      resolve();
    });
    socket.once('error', reject);
  });
}

/** `n` distinct boxes in random order. */
function distinct(n: number): Box[] {
  const all = [...boxes];
  for (let i = all.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [all[i], all[j]] = [all[j]!, all[i]!];
  }
  return all.slice(0, n);
}

const pick = () => boxes[Math.floor(Math.random() * boxes.length)]!;

/** Grows to `n` boxes, PARALLEL creates at once; stops early (returning why) when memory runs low. */
async function grow(n: number, perBox: number, tasksPerBox: number): Promise<{ createsPerSec: number; stopped?: string }> {
  const floor = args.floorMiB * MiB;
  const need = (n - boxes.length) * perBox;
  if (meminfo('MemAvailable') - need < floor) {
    return {
      createsPerSec: Number.NaN,
      stopped: `${n} boxes would take ~${Math.round(need / MiB)} MiB more and leave MemAvailable under ${args.floorMiB} MiB`,
    };
  }
  // Every box is a shim's threads, the agent's and its command's: past pid_max the engine's
  // forks fail (at 1,564 boxes with the default 32,768), so say so before, not by failed creates.
  const tasksNeeded = Math.ceil((n - boxes.length) * tasksPerBox);
  const taskRoom = pidMax() - kernelTasks() - TASK_MARGIN;
  if (tasksNeeded > taskRoom) {
    return {
      createsPerSec: Number.NaN,
      stopped: `${n} boxes would take ~${tasksNeeded} more kernel tasks (~${tasksPerBox.toFixed(0)} a box) where kernel.pid_max ${pidMax()} leaves ${taskRoom}: raise it (sysctl -w kernel.pid_max=4194304) to go on`,
    };
  }
  const from = boxes.length;
  const t0 = performance.now();
  while (boxes.length < n) {
    // Checked between waves: others share this machine, so the estimate above can be wrong.
    if (meminfo('MemAvailable') < floor) return { createsPerSec: Number.NaN, stopped: `MemAvailable fell under ${args.floorMiB} MiB at ${boxes.length} boxes` };
    const wave = Math.min(50, n - boxes.length);
    let failed = 0;
    await forEachLimited(Array.from({ length: wave }), PARALLEL, async () => {
      try {
        boxes.push(await manager.create(createOpts));
      } catch (err) {
        // One failed create on a loaded machine is a figure, not the end of the curve.
        if (failed++ === 0) process.stderr.write(`density child: a create failed at ${boxes.length} boxes: ${(err as Error).message}\n`);
      }
    });
    createFailures += failed;
    if (failed > wave / 2) return { createsPerSec: Number.NaN, stopped: `${failed} of ${wave} creates failed at ${boxes.length} boxes` };
  }
  return { createsPerSec: ((boxes.length - from) / (performance.now() - t0)) * 1000 };
}

/** Every box answers an exec: how many did not. */
async function execAll(): Promise<number> {
  let failures = 0;
  await forEachLimited(boxes, PARALLEL, async (b) => {
    const r = await b.exec(['true']).catch((err: unknown) => err as Error);
    if (r instanceof Error || r.exitCode !== 0) {
      if (failures++ < 3) process.stderr.write(`density child: ${b.id} did not answer exec: ${r instanceof Error ? r.message : `exit ${r.exitCode}`}\n`);
    }
  });
  return failures;
}

function processMemory(pids: Array<number | undefined>): { rss: number; pss: number; n: number } {
  let rss = 0;
  let pss = 0;
  let n = 0;
  for (const pid of pids) {
    const m = pid ? rollup(pid) : undefined;
    if (!m) continue;
    rss += m.rss;
    pss += m.pss;
    n++;
  }
  return { rss, pss, n };
}

async function measure(
  createsPerSec: number,
  availableBefore: number,
  first: { boxes: number; rss: number; heap: number } | undefined,
): Promise<{ figures: DensityFigures; samples: DensitySamples }> {
  const n = boxes.length;
  const self = await settled();
  const available = meminfo('MemAvailable');
  const agents: Array<number | undefined> = [];
  for (const b of boxes) agents.push((await initOf(b))?.pid);
  const agent = processMemory(agents);
  const shim = processMemory(agents.map((pid) => (pid ? parentOf(pid) : undefined)));
  const cgroups = agents.reduce<number>((t, pid) => t + ((pid ? cgroupMemory(pid) : undefined) ?? 0), 0);
  const engineRss = rssOfCommands(['dockerd', 'containerd']);

  // Whether the Manager's own event loop is late while the ops below are timed (a process busy
  // with per-box background work would show here, at large N only).
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  const list: number[] = [];
  for (let i = 0; i < SAMPLES; i++) list.push(await timed(() => manager.list()));
  const info: number[] = [];
  for (let i = 0; i < SAMPLES; i++) info.push(await timed(() => pick().info()));
  const inspect: number[] = [];
  for (let i = 0; i < SAMPLES; i++) inspect.push(await timed(() => engine.json('GET', `/containers/${pick().containerId}/json`)));
  // The first exec of distinct boxes that hold no kept agent connection (none was exec'd since the
  // last step's, longer ago than the host keeps one): the same state at every N. Random picks
  // would reuse kept connections at 10 boxes (each picked ~3 times in 30) and none at 1,000, and
  // time that difference instead. Each exec follows a bare TCP connect to the same box, timed
  // apart: the kernel's share of a fresh connection at this N (its neighbour entry, conntrack).
  const exec: number[] = [];
  const connect: number[] = [];
  for (const b of distinct(SAMPLES)) {
    const address = (await initOf(b))?.address;
    if (address) connect.push(await timed(() => connectTo(address)));
    exec.push(await timed(() => b.exec(['true'])));
  }
  // An exec right after another to the same box: on its kept connection.
  const execKept: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const b = pick();
    await b.exec(['true']);
    execKept.push(await timed(() => b.exec(['true'])));
  }
  loop.disable();
  const execFailures = await execAll();

  const cleanupCpu: number[] = [];
  const cleanupWall: number[] = [];
  for (let i = 0; i < CLEANUP_PASSES; i++) {
    const cpu0 = process.cpuUsage();
    cleanupWall.push(await timed(() => manager.cleanup()));
    const cpu = process.cpuUsage(cpu0);
    cleanupCpu.push((cpu.user + cpu.system) / 1000);
  }

  // One at a time, at N: then removed one at a time, so N stays N.
  const create: number[] = [];
  const made: Box[] = [];
  for (let i = 0; i < PROBE_BOXES; i++) create.push(await timed(async () => made.push(await manager.create(createOpts))));
  const remove: number[] = [];
  for (const b of made) remove.push(await timed(() => b.remove()));

  const per = (bytes: number, count: number) => (count > 0 ? bytes / MiB / count : Number.NaN);
  const figures: DensityFigures = {
    boxes: n,
    hostMiBPerBox: per(availableBefore - available, n),
    cgroupMiBPerBox: per(cgroups, n),
    shimRssMiB: per(shim.rss, shim.n),
    shimPssMiB: per(shim.pss, shim.n),
    agentRssMiB: per(agent.rss, agent.n),
    agentPssMiB: per(agent.pss, agent.n),
    managerMiB: self.rss / MiB,
    managerKiBPerBox: first && n > first.boxes ? (self.rss - first.rss) / 1024 / (n - first.boxes) : Number.NaN,
    managerHeapMiB: self.heap / MiB,
    managerHeapKiBPerBox: first && n > first.boxes ? (self.heap - first.heap) / 1024 / (n - first.boxes) : Number.NaN,
    createsPerSec,
    listP50Ms: p50(list),
    infoP50Ms: p50(info),
    execP50Ms: p50(exec),
    execKeptP50Ms: p50(execKept),
    agentConnectP50Ms: p50(connect),
    loopDelayP99Ms: loop.percentile(99) / 1e6,
    cleanupPassCpuMs: p50(cleanupCpu),
    removeWallMs: p50(remove),
    execFailures,
    createFailures,
    createP50Ms: p50(create),
    cleanupPassWallMs: p50(cleanupWall),
    engineMiB: engineRss / MiB,
    engineInspectP50Ms: p50(inspect),
    availableMiB: available / MiB,
  };
  return { figures, samples: { create, exec, execKept, connect, info, inspect, cleanupCpu } };
}

let exitCode = 0;
try {
  await manager.start();
  // One box made and removed first: the lazy paths (token secret, schemas, pooled sockets,
  // the box network and firewall check) are paid before the baseline.
  await (await manager.create(createOpts)).remove();
  await settled();
  const availableBefore = meminfo('MemAvailable');
  const tasksBefore = kernelTasks();
  let first: { boxes: number; rss: number; heap: number } | undefined;
  let perBox = GUESS_PER_BOX;
  let tasksPerBox = GUESS_TASKS_PER_BOX;
  for (const n of args.steps) {
    const t0 = performance.now();
    const grown = await grow(n, perBox, tasksPerBox);
    if (grown.stopped) {
      await send({ type: 'stopped', boxes: boxes.length, reason: grown.stopped });
      break;
    }
    const { figures, samples } = await measure(grown.createsPerSec, availableBefore, first);
    first ??= { boxes: figures.boxes, rss: figures.managerMiB * MiB, heap: figures.managerHeapMiB * MiB };
    // At small N others' memory on this machine swamps the boxes': the guess stands until then.
    if (figures.boxes >= 100 && figures.hostMiBPerBox > 0) perBox = figures.hostMiBPerBox * MiB * 1.25;
    if (figures.boxes >= 100) tasksPerBox = Math.max(1, ((kernelTasks() - tasksBefore) / figures.boxes) * 1.1);
    await send({ type: 'step', step: { figures, samples, wallMs: performance.now() - t0 } });
  }
} catch (err) {
  process.stderr.write(`density child: ${(err as Error).stack ?? String(err)}\n`);
  await send({ type: 'stopped', boxes: boxes.length, reason: `failed at ${boxes.length} boxes: ${(err as Error).message}` });
  exitCode = 1;
} finally {
  const count = boxes.length;
  // Fewer removals at once than creates: Docker 20.10 deadlocked its network store once under 8
  // concurrent removals at 1,000 boxes (every later network call hung until dockerd restarted).
  const wallMs = await timed(() => forEachLimited(boxes, REMOVE_PARALLEL, (b) => b.remove()).catch(() => undefined));
  await send({ type: 'removed', boxes: count, wallMs });
  await manager.close();
  engine.close();
}
process.exit(exitCode);
