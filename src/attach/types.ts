/**
 * The connection `box.attach()` gives to a WebSocket or Server-Sent Events service inside a
 * box: the same types for the library (direct to the published port) and the SDK (through the
 * server's port proxy). Types only; the SDK imports them.
 */

export type AttachProtocol = 'ws' | 'sse';

export interface AttachOptions {
  protocol: AttachProtocol;
  /** The request path (and query) on the service, default `/`. */
  path?: string;
  /** Extra request headers for the handshake (WebSocket upgrade or SSE GET). */
  headers?: Record<string, string>;
  /**
   * How long the service may take to answer its handshake (WS 101, SSE 200 with
   * text/event-stream): refused, reset and 502-like answers are retried until then. Default 10 s.
   */
  readyTimeoutMs?: number;
  /** Aborting before the handshake rejects with `cancelled`; after it, closes the connection. */
  signal?: AbortSignal;
}

export interface WsAttachOptions extends AttachOptions {
  protocol: 'ws';
}
export interface SseAttachOptions extends AttachOptions {
  protocol: 'sse';
}

/** One WebSocket message: text frames as strings, binary frames as bytes. */
export type WsMessage = { type: 'text'; data: string } | { type: 'binary'; data: Uint8Array };

export interface WsCloseInfo {
  code: number;
  reason: string;
}

/**
 * A WebSocket to a service of a box. Read it with `for await` (or the `message` event: adding
 * a `message` listener before iterating hands every message to the listeners instead); the
 * iterator buffers about 1 MiB and pauses the socket beyond that. It ends when the socket closes.
 */
export interface WsServiceConn extends AsyncIterable<WsMessage> {
  readonly protocol: 'ws';
  /** Where the connection went (the published port for the library, the server's proxy for the SDK). */
  readonly url: string;
  send(data: string | Uint8Array): void;
  /** Starts the closing handshake (default code 1000); `closed` resolves when it is done. */
  close(code?: number, reason?: string): void;
  readonly closed: Promise<WsCloseInfo>;
  on(event: 'message', listener: (message: WsMessage) => void): this;
  on(event: 'close', listener: (info: WsCloseInfo) => void): this;
  on(event: 'error', listener: (err: Error) => void): this;
  off(event: 'message', listener: (message: WsMessage) => void): this;
  off(event: 'close', listener: (info: WsCloseInfo) => void): this;
  off(event: 'error', listener: (err: Error) => void): this;
}

/** One Server-Sent Event. `id` is the last event id seen (it carries over), `retry` the reconnection time sent with it. */
export interface SseEvent {
  id?: string;
  event: string;
  data: string;
  retry?: number;
}

/** A Server-Sent Events stream of a service of a box; ends when the service ends the response. */
export interface SseServiceConn extends AsyncIterable<SseEvent> {
  readonly protocol: 'sse';
  readonly url: string;
  /** Drops the connection; the iterator ends. */
  close(): void;
  /** Resolves when the connection is gone (ended by either side). */
  readonly closed: Promise<void>;
}

export type ServiceConn = WsServiceConn | SseServiceConn;
