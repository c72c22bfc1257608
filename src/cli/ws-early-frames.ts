/**
 * A stopgap for a race in the SDK's `box.stream()` (src/client/stream.ts, reported to its
 * owner): it listens for messages only once the `open` promise has resumed, so frames that
 * arrive in the same read as the upgrade answer (a fast command's output and exit frame) are
 * emitted to nobody, and `wait()` then fails with "closed before the process exited". About
 * half of `sbx exec ID -- true` runs hit it.
 *
 * Here, messages a socket emits while it has no message listener are held and replayed, in
 * order, right after the first listener is added. Delete this file once the SDK attaches its
 * listener before the socket opens.
 */
import WebSocket from 'ws';

const HELD = Symbol('sbx.heldMessages');
type Held = WebSocket & { [HELD]?: unknown[][] };

let installed = false;

export function holdEarlyMessages(): void {
  if (installed) return;
  installed = true;
  const emit = WebSocket.prototype.emit;
  WebSocket.prototype.emit = function (this: Held, event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'message' && this.listenerCount('message') === 0) {
      const held = (this[HELD] ??= []);
      if (held.length === 0) {
        const onListener = (name: string | symbol) => {
          if (name !== 'message') return;
          this.off('newListener', onListener);
          // After the listener is in place (newListener fires before it is added), before any I/O.
          queueMicrotask(() => {
            const queued = this[HELD] ?? [];
            this[HELD] = [];
            for (const a of queued) emit.call(this, 'message', ...a);
          });
        };
        this.on('newListener', onListener);
      }
      held.push(args);
      return false;
    }
    return emit.call(this, event, ...args);
  } as typeof emit;
}
