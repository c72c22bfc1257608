/**
 * A deadline on the answer to a read, for every runtime's HTTP client (the Docker Engine's, the
 * Kubernetes API server's): a stuck engine gives callers an error instead of a call that never
 * returns. Docker 20.10's libnetwork deadlock held containers' locks for good while `/_ping` still
 * answered; every inspect of them hung, and everything waiting on one.
 */
import type http from 'node:http';
import { invalidArgument } from '../errors.js';

/** The `code` of the error a read fails with when no answer came in time. */
export const NO_ANSWER = 'SBX_NO_ANSWER';

/** How long a read waits for its answer by default: only a stuck engine takes this long. */
export const DEFAULT_ANSWER_TIMEOUT_MS = 60_000;

/** `RuntimeOptions.answerTimeoutMs`, checked, or the default. */
export function answerTimeoutOf(options: { answerTimeoutMs?: number }): number {
  const ms = options.answerTimeoutMs ?? DEFAULT_ANSWER_TIMEOUT_MS;
  if (!Number.isInteger(ms) || ms <= 0) throw invalidArgument('answerTimeoutMs', `must be a positive whole number of ms, not ${ms}`);
  return ms;
}

/**
 * The deadline's error, or the error an HTTP client wrapped it in: node-fetch (client-node's)
 * keeps only its code and message ("request to … failed, reason: no answer to GET … within … ms").
 */
export function noAnswerOf(err: unknown): { message: string } | undefined {
  for (let e = err as { code?: unknown; cause?: unknown; message?: string } | undefined, depth = 0; e && depth < 3; depth++) {
    if (e.code === NO_ANSWER) return { message: String(e.message) };
    e = e.cause as typeof e;
  }
  return undefined;
}

/**
 * Every GET through `agent` fails once its connection waited `timeoutMs` for the answer's head.
 * The request is destroyed, which frees its place in the pool. Only reads: a create, commit, stop
 * or removal may take long before its answer, and a stream's head comes at once (the Docker
 * Engine flushes it before the first log line or event; a watch's before its first event). The
 * clock starts when the request has a socket, so a pool at its limit is not the engine's delay.
 */
export function answerReadsWithin(agent: http.Agent, timeoutMs: number): void {
  // addRequest is how http.request hands a request to its agent (Node's, not in its types).
  type AddRequest = (req: http.ClientRequest, ...rest: unknown[]) => void;
  const hooked = agent as unknown as { addRequest: AddRequest };
  const add = hooked.addRequest.bind(agent);
  hooked.addRequest = (req, ...rest) => {
    if (req.method === 'GET') {
      req.once('socket', () => {
        const timer = setTimeout(() => {
          const err = Object.assign(new Error(`no answer to GET ${req.path} within ${timeoutMs} ms`), { code: NO_ANSWER, timeoutMs, path: req.path });
          req.destroy(err);
        }, timeoutMs);
        timer.unref();
        const done = () => clearTimeout(timer);
        req.once('response', done);
        req.once('close', done);
      });
    }
    add(req, ...rest);
  };
}
