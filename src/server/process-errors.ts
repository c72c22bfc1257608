/**
 * `sbx serve`'s last line of defence: an error nothing handled (an 'error' event without a
 * listener, a rejected promise nobody awaited) is logged loudly and the server keeps serving,
 * instead of every client's boxes losing their API because of one bad request. Every stream that
 * parses client bytes handles its own errors (tests in client-bytes.test.ts); reaching this
 * handler is a bug, which the log line says, with the stack.
 */
import type { Logger } from 'pino';

/**
 * Installs the process-wide handlers; returns their removal.
 *
 * @example
 * const restore = logUncaughtErrors(log);
 * // … serve …
 * restore();
 */
export function logUncaughtErrors(log: Logger, proc: NodeJS.Process = process): () => void {
  const onException = (err: Error, origin: string) => {
    log.error({ err, origin }, 'uncaught exception (a bug in sbx; please report it with this stack); the server keeps serving');
  };
  const onRejection = (reason: unknown) => {
    log.error({ err: reason }, 'unhandled promise rejection (a bug in sbx; please report it with this stack); the server keeps serving');
  };
  proc.on('uncaughtException', onException);
  proc.on('unhandledRejection', onRejection);
  return () => {
    proc.off('uncaughtException', onException);
    proc.off('unhandledRejection', onRejection);
  };
}
