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
