import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { DensityArgs, DensityMessage } from './protocol.js';

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));
/** The whole curve to 2,000 boxes on a loaded machine: creates at ~5/s and their removal. */
const TIMEOUT_MS = 90 * 60_000;

/**
 * Forks the density child and hands each of its messages to `onMessage` as it comes (a curve
 * cut short still has its first steps). Resolves with the child's exit; `onChild` gives the pid
 * to the interrupt handler.
 */
export function probeDensity(
  args: DensityArgs,
  onMessage: (m: DensityMessage) => void,
  onChild: (pid: number | undefined) => void,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve, reject) => {
    // The parent's execArgv carries the tsx loader; --expose-gc makes RSS mean live memory.
    const proc = fork(CHILD, [JSON.stringify(args)], { execArgv: [...process.execArgv, '--expose-gc'], stdio: ['ignore', 2, 2, 'ipc'] });
    onChild(proc.pid);
    const timer = setTimeout(() => proc.kill('SIGKILL'), TIMEOUT_MS);
    proc.on('message', (m) => onMessage(m as DensityMessage));
    proc.once('error', reject);
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      onChild(undefined);
      resolve({ code, signal });
    });
  });
}
