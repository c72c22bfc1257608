import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { MemoryChildArgs, MemoryReport } from './protocol.js';

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));
const TIMEOUT_MS = 180_000;

/**
 * Forks the memory child and waits for its report and its exit (it removes its boxes before
 * exiting). `onChild` hands the pid to the interrupt handler so Ctrl-C can end it first.
 */
export function probeMemory(args: MemoryChildArgs, onChild: (pid: number | undefined) => void): Promise<MemoryReport> {
  return new Promise((resolve, reject) => {
    // The parent's execArgv carries the tsx loader; --expose-gc makes RSS mean live memory.
    const child = fork(CHILD, [JSON.stringify(args)], { execArgv: [...process.execArgv, '--expose-gc'], stdio: ['ignore', 2, 2, 'ipc'] });
    onChild(child.pid);
    let report: MemoryReport | undefined;
    const timer = setTimeout(() => child.kill('SIGKILL'), TIMEOUT_MS);
    child.on('message', (m) => (report = m as MemoryReport));
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      onChild(undefined);
      if (report && code === 0) resolve(report);
      else reject(new Error(`memory child exited with ${signal ?? code}${report ? ' after reporting' : ' without a report'}`));
    });
  });
}
