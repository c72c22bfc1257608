/**
 * The host side of the in-box agent's wire protocol (agent/proto.go; docs/agent.md): one TCP
 * connection per exec, frames of 1 byte type + 4 bytes big-endian length + payload.
 */
import { Writable } from 'node:stream';
import type { PassThrough } from 'node:stream';

/**
 * The agent's TCP port in every box that has one (Docker: on each of the box's addresses, the host
 * dials its bridge address; Kubernetes: the pod's loopback, behind the port-forward). Taken from
 * the box's ports: a box can neither publish it nor have it dialled for its owner.
 */
export const AGENT_PORT = 43011;
/** The variable holding the per-box secret every connection to the agent presents (agent/init.go). */
export const AGENT_TOKEN_ENV = 'SBX_AGENT_TOKEN';
/** Where the agent's binary is inside every box, on Docker (a read-only bind) and Kubernetes (a volume) alike. */
export const AGENT_BIN = '/.sbx/sbx-agent';
/** Capabilities the agent needs as PID 1: start processes as the box user, kill any process of the box. */
export const AGENT_CAPS: readonly string[] = ['KILL', 'SETUID', 'SETGID'];

/** The protocol versions this host speaks, newest first. */
export const HOST_PROTOCOL_VERSIONS = [1];

export const F = {
  hello: 0x01,
  start: 0x02,
  stdin: 0x03,
  stdinEof: 0x04,
  resize: 0x05,
  kill: 0x06,
  signal: 0x07,
  configure: 0x08,
  helloOk: 0x81,
  started: 0x82,
  stdout: 0x83,
  stderr: 0x84,
  exit: 0x85,
  error: 0x86,
  stdinAck: 0x87,
  configured: 0x88,
} as const;

const HEADER = 5;
/** The control frames an agent sends (output frames aside). */
const AGENT_CONTROL_FRAMES: ReadonlySet<number> = new Set([F.helloOk, F.started, F.exit, F.error, F.stdinAck, F.configured]);
/** Control frames (JSON) larger than this are a broken agent, not something to buffer. */
const MAX_CONTROL = 1024 * 1024;
/** Stdin bytes the agent takes before it acknowledges them (agent/proto.go stdinWindow). */
export const STDIN_WINDOW = 256 * 1024;
/** Stdin frames are cut to this size, so the window fills in useful steps. */
export const STDIN_CHUNK = 64 * 1024;

export function frame(type: number, payload?: Buffer | string | object): Buffer {
  const body =
    payload === undefined ? Buffer.alloc(0) : Buffer.isBuffer(payload) ? payload : Buffer.from(typeof payload === 'string' ? payload : JSON.stringify(payload));
  const head = Buffer.allocUnsafe(HEADER);
  head[0] = type;
  head.writeUInt32BE(body.length, 1);
  return body.length ? Buffer.concat([head, body], HEADER + body.length) : head;
}

export interface StartRequest {
  argv: string[];
  env?: Record<string, string>;
  workDir?: string;
  user?: string;
  tty?: boolean;
  cols?: number;
  rows?: number;
  stdin?: boolean;
  /** Keep the connection open after EXIT for another START (agent/session.go); an agent that predates it half-closes as before. */
  keep?: boolean;
}

export interface ExitMessage {
  exitCode: number;
  signal?: string;
  killed?: boolean;
}

export interface ErrorMessage {
  code: string;
  field?: string;
  message: string;
}

/**
 * Reads the agent's frames: output payloads are handed to stdout/stderr as they arrive
 * (slices of the socket's chunks, no gathering), with backpressure — a slow reader of either
 * side pauses the socket; control frames are gathered and handed to `onControl`.
 */
export class AgentFrameReader extends Writable {
  private readonly header = Buffer.alloc(HEADER);
  private headerFill = 0;
  private remaining = 0;
  private type = 0;
  private control: Buffer[] = [];

  constructor(
    private readonly stdout: PassThrough,
    private readonly stderr: PassThrough,
    private readonly onControl: (type: number, payload: Buffer) => void,
  ) {
    super();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    const waits = new Set<PassThrough>();
    let at = 0;
    while (at < chunk.length) {
      if (this.remaining === 0 && this.headerFill < HEADER) {
        const n = Math.min(HEADER - this.headerFill, chunk.length - at);
        chunk.copy(this.header, this.headerFill, at, at + n);
        this.headerFill += n;
        at += n;
        if (this.headerFill < HEADER) break;
        this.type = this.header[0]!;
        this.remaining = this.header.readUInt32BE(1);
        if (!this.isOutput() && this.remaining > MAX_CONTROL) return done(new Error(`agent sent a control frame of ${this.remaining} bytes`));
        if (this.remaining === 0) {
          const bad = this.endFrame();
          if (bad) return done(bad);
        }
        continue;
      }
      const n = Math.min(this.remaining, chunk.length - at);
      const payload = chunk.subarray(at, at + n);
      at += n;
      this.remaining -= n;
      if (this.isOutput()) {
        const target = this.type === F.stdout ? this.stdout : this.stderr;
        if (!target.destroyed && !target.writableEnded && !target.write(payload)) waits.add(target);
      } else {
        this.control.push(payload);
      }
      if (this.remaining === 0) {
        const bad = this.endFrame();
        if (bad) return done(bad);
      }
    }
    if (waits.size === 0) return done();
    let left = waits.size;
    for (const w of waits) {
      const go = () => {
        w.off('drain', go);
        w.off('close', go);
        if (--left === 0) done();
      };
      w.on('drain', go);
      w.on('close', go);
    }
  }

  override _final(done: (err?: Error | null) => void): void {
    for (const side of [this.stdout, this.stderr]) if (!side.destroyed) side.end();
    done();
  }

  private isOutput(): boolean {
    return this.type === F.stdout || this.type === F.stderr;
  }

  /**
   * Ends a frame; a control frame goes to onControl. What the other side sends is not trusted (a
   * box could stand in for its agent): an unknown type or a payload onControl cannot take is an
   * error of this reader, never an exception out of a stream callback.
   */
  private endFrame(): Error | undefined {
    this.headerFill = 0;
    if (this.isOutput()) return undefined;
    const payload = this.control.length === 1 ? this.control[0]! : Buffer.concat(this.control);
    this.control = [];
    if (!AGENT_CONTROL_FRAMES.has(this.type)) return new Error(`the agent sent a frame of unknown type 0x${this.type.toString(16)}`);
    try {
      this.onControl(this.type, payload);
      return undefined;
    } catch (err) {
      return new Error(`the agent sent a malformed frame of type 0x${this.type.toString(16)}: ${(err as Error).message}`);
    }
  }
}
