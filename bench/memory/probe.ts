import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { BuiltMemoryArgs, BuiltMemoryReport, ExecMemoryArgs, ExecMemoryReport, MemoryChildArgs, MemoryReport } from './protocol.js';

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));
const EXEC_CHILD = fileURLToPath(new URL('./exec-child.ts', import.meta.url));
const TIMEOUT_MS = 180_000;

/**
 * Forks the memory child and waits for its report and its exit (it removes its boxes before
 * exiting). `onChild` hands the pid to the interrupt handler so Ctrl-C can end it first.
 */
export function probeMemory(args: MemoryChildArgs, onChild: (pid: number | undefined) => void): Promise<MemoryReport> {
  return probe<MemoryReport>(CHILD, args, onChild);
}

/** The same for the exec memory child: one buffered exec far past its output cap. */
export function probeExecMemory(args: ExecMemoryArgs, onChild: (pid: number | undefined) => void): Promise<ExecMemoryReport> {
  return probe<ExecMemoryReport>(EXEC_CHILD, args, onChild);
}

/** The same for the built package's child (`child`: built-child.js in a build of memory/built.ts), run by plain node. */
export function probeBuiltMemory(child: string, args: BuiltMemoryArgs, onChild: (pid: number | undefined) => void): Promise<BuiltMemoryReport> {
  return probe<BuiltMemoryReport>(child, args, onChild, []);
}

// The parent's execArgv carries the tsx loader; --expose-gc makes RSS mean live memory.
function probe<R>(child: string, args: unknown, onChild: (pid: number | undefined) => void, loader = process.execArgv): Promise<R> {
  return new Promise((resolve, reject) => {
    const proc = fork(child, [JSON.stringify(args)], { execArgv: [...loader, '--expose-gc'], stdio: ['ignore', 2, 2, 'ipc'] });
    onChild(proc.pid);
    let report: R | undefined;
    const timer = setTimeout(() => proc.kill('SIGKILL'), TIMEOUT_MS);
    proc.on('message', (m) => (report = m as R));
    proc.once('error', reject);
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      onChild(undefined);
      if (report && code === 0) resolve(report);
      else reject(new Error(`memory child exited with ${signal ?? code}${report ? ' after reporting' : ' without a report'}`));
    });
  });
}
