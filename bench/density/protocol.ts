/** What the density child (density/child.ts) and the bench say to each other over IPC. */
import type { DensityPoint } from '../core/density-plot.js';

/**
 * One point of the density curve: N idle boxes on this machine, every field measured (the plot,
 * core/density-plot.ts, reads the DensityPoint ones).
 */
export interface DensityFigures extends DensityPoint {
  boxes: number;
  /** MemAvailable (/proc/meminfo) before the first box minus now, over N: everything the boxes cost the host. */
  hostMiBPerBox: number;
  /** Sum of the box cgroups' memory (v1 memory.usage_in_bytes, v2 memory.current) over N. */
  cgroupMiBPerBox: number;
  /** Per box: the box's containerd-shim-runc-v2 (parent of its init) and its agent (the init), from smaps_rollup. */
  shimRssMiB: number;
  shimPssMiB: number;
  agentRssMiB: number;
  agentPssMiB: number;
  /** The Manager's process RSS after GC, and its growth per box since the first step. */
  managerMiB: number;
  managerKiBPerBox: number;
  /** The same for its JS heap (RSS after GC moves with pages V8 and malloc give back: the heap says what boxes hold). */
  managerHeapMiB: number;
  managerHeapKiBPerBox: number;
  /** Creates per second while growing to N (PARALLEL at once). */
  createsPerSec: number;
  listP50Ms: number;
  infoP50Ms: number;
  /** The first exec of distinct boxes holding no kept agent connection (the Scale row's exec). */
  execP50Ms: number;
  /** An exec right after another to the same box, on its kept agent connection. */
  execKeptP50Ms: number;
  /** A bare TCP connect to a box's agent port from the Manager's process: the kernel's share of a fresh exec connection. */
  agentConnectP50Ms: number;
  /** The Manager process's event-loop delay p99 while list/info/inspect/exec were timed. */
  loopDelayP99Ms: number;
  /** CPU (user + system) of the Manager's process during one cleanup pass, p50 of a few. */
  cleanupPassCpuMs: number;
  /** Wall time of one box's remove() at N, p50. */
  removeWallMs: number;
  /** Boxes that did not answer an exec (every box is asked at every N). */
  execFailures: number;
  /** Creates that failed on the way to N (the curve goes on past a few; half of a wave stops it). */
  createFailures: number;
  /** One create() at N, one at a time, p50: the Scale row's create. */
  createP50Ms: number;
  /** Wall time of one cleanup pass, p50. */
  cleanupPassWallMs: number;
  /** dockerd's and containerd's RSS together: the engine's own share. */
  engineMiB: number;
  /** The engine's own inspect of a box at N, p50 (what info() asks): whether info's growth is the engine's. */
  engineInspectP50Ms: number;
  /** MemAvailable at N. */
  availableMiB: number;
}

/** Per-op samples behind the Scale rows (ms; cleanup: CPU ms). */
export interface DensitySamples {
  create: number[];
  exec: number[];
  execKept: number[];
  /** Bare TCP connects to the agents' port, before each `exec`. */
  connect: number[];
  info: number[];
  /** The engine's inspect, as info() asks it. */
  inspect: number[];
  cleanupCpu: number[];
}

export interface DensityStep {
  figures: DensityFigures;
  samples: DensitySamples;
  wallMs: number;
}

export type DensityMessage =
  | { type: 'step'; step: DensityStep }
  /** The curve stopped below the largest N asked: why (memory, a failure). */
  | { type: 'stopped'; boxes: number; reason: string }
  | { type: 'removed'; boxes: number; wallMs: number };

export interface DensityArgs {
  managerName: string;
  dataDir: string;
  runId: string;
  /** Increasing N to measure at. */
  steps: number[];
  /** Stop climbing when MemAvailable would fall below this. */
  floorMiB: number;
}
