import { notRun } from '../core/result.js';
import type { RowResult } from '../core/result.js';
import { probeExecMemory } from './probe.js';
import { EXEC_CAP_BYTES, EXEC_MEMORY_ROW, EXEC_OUTPUT_BYTES, execMemoryRow } from './rows.js';

/** Runs the exec memory row in a child process; a failure is a failed row, not a failed run. */
export async function runExecMemory(opts: {
  runId: string;
  signal: AbortSignal;
  log: (line: string) => void;
  onChild: (pid: number | undefined) => void;
}): Promise<RowResult[]> {
  opts.signal.throwIfAborted();
  opts.log(`memory: child process, one buffered exec printing ${EXEC_OUTPUT_BYTES / 1e6} MB against a ${EXEC_CAP_BYTES / 2 ** 20} MiB cap`);
  const t0 = performance.now();
  try {
    const report = await probeExecMemory({ runId: opts.runId, bytes: EXEC_OUTPUT_BYTES, capBytes: EXEC_CAP_BYTES }, opts.onChild);
    return [execMemoryRow(report, performance.now() - t0)];
  } catch (err) {
    if (opts.signal.aborted) throw opts.signal.reason;
    opts.log(`memory: FAILED: ${(err as Error).message}`);
    return [notRun({ name: EXEC_MEMORY_ROW, group: 'memory' }, 'failed', (err as Error).message)];
  }
}
