/** What the memory child reports to the parent over IPC. */
export interface MemoryReport {
  /** RSS after GC before sbx is imported: node + the tsx loader. */
  baselineRss: number;
  /** A started Manager (engine connection open, recovery done), no boxes. */
  managerRss: number;
  managerHeapUsed: number;
  /**
   * After the first wave of `firstBoxes` parallel creates: they warmed every lazy path (token
   * secret, schemas, pooled sockets), so growth from here on is what a box itself costs.
   */
  firstBoxes: number;
  firstRss: number;
  firstHeapUsed: number;
  /** The same Manager holding `boxes` idle boxes. */
  boxesRss: number;
  boxesHeapUsed: number;
  boxes: number;
  /** Whether `global.gc` was there; without it RSS includes garbage. */
  gc: boolean;
  createWallMs: number;
}

export interface MemoryChildArgs {
  managerName: string;
  dataDir: string;
  runId: string;
  boxes: number;
}

export interface ExecMemoryArgs {
  runId: string;
  /** What the exec prints on stdout. */
  bytes: number;
  /** Its maxOutputBytes. */
  capBytes: number;
}

/** What the exec memory child (memory/exec-child.ts) reports. */
export interface ExecMemoryReport {
  /** RSS after GC before sbx is imported: node + the tsx loader. */
  aloneRss: number;
  /** RSS after GC just before the exec: runtime loaded, box up, one small exec done. */
  beforeRss: number;
  /** The highest RSS during the exec (the kernel's VmHWM, reset just before it). */
  peakRss: number;
  /** False when VmHWM could not be reset and the peak was sampled every 5 ms instead. */
  exactPeak: boolean;
  /** RSS and heap after GC with the result still held. */
  heldRss: number;
  heldHeapUsed: number;
  stdoutChars: number;
  truncated: boolean;
  exitCode: number;
  bytes: number;
  capBytes: number;
  execMs: number;
  gc: boolean;
}

/** What the built-package memory child (memory/built-child.ts) reports: Memory0Boxes' readings. */
export type BuiltMemoryReport = Pick<MemoryReport, 'baselineRss' | 'managerRss' | 'managerHeapUsed' | 'gc'>;

export interface BuiltMemoryArgs {
  managerName: string;
  dataDir: string;
}
