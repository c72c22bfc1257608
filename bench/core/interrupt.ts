/** Why a run stopped early: Ctrl-C or SIGTERM. */
export class Interrupted extends Error {
  constructor(signal: string) {
    super(`interrupted by ${signal}`);
  }
}

/** A signal this soon after the first is the same Ctrl-C delivered twice. */
const REPEAT_MS = 1000;

/**
 * Turns SIGINT/SIGTERM into an abort the sampler sees between ops, so the run stops where it
 * is and the normal cleanup path (subjects closed, containers swept) still runs. A second
 * signal exits at once; the next run's start-up sweep removes what that leaves.
 */
export function abortOnSignals(log: (line: string) => void, onAbort: () => void): AbortSignal {
  const controller = new AbortController();
  let first = 0;
  const handler = (signal: NodeJS.Signals) => {
    // Under tsx one Ctrl-C arrives twice (from the terminal and relayed by tsx's parent process).
    if (controller.signal.aborted && performance.now() - first < REPEAT_MS) return;
    if (controller.signal.aborted) {
      log(`${signal} again: exiting now; leftover containers go at the next run's start-up sweep`);
      process.exit(130);
    }
    log(`${signal}: stopping after the current op, then removing this run's containers (again to exit at once)`);
    first = performance.now();
    controller.abort(new Interrupted(signal));
    onAbort();
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return controller.signal;
}
