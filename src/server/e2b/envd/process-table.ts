/**
 * envd's process table: the processes started through the e2b Process service, held by the
 * server so that they outlive the client that started them (background commands, `connect(pid)`).
 * Each is one `box.stream()`. Its output fans out to whoever is connected (Start's caller and any
 * Connect); with nobody connected it is read and dropped, so a background process never blocks
 * on a reader that went away. A connected reader that falls behind pauses the process's output
 * (backpressure) instead of being buffered without bound.
 */
import type { Readable } from 'node:stream';
import { SbxError } from '../../../errors.js';
import type { ExecStream, ProcessSignal } from '../../../runtime/types.js';
import { PROCESS_SIGNALS } from '../../../runtime/types.js';

export interface ProcessSpec {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
  tag?: string;
  tty: boolean;
}

/** How the process ended, as envd reports it (Go's ProcessState). */
export interface ProcessEnd {
  exitCode: number;
  exited: boolean;
  status: string;
  error?: string;
}

export type ProcessUpdate = { kind: 'stdout' | 'stderr' | 'pty'; data: Buffer } | { kind: 'end'; end: ProcessEnd };

/** Updates queued for one reader before the process's output is paused. */
const HIGH_WATER = 64;
/** The output resumes once every reader is down to this many. */
const LOW_WATER = HIGH_WATER / 2;
/**
 * Output of one kind that arrived while a reader was behind is sent as one update, up to this
 * size: a program that writes a byte per write (curl's errors, progress bars) would otherwise
 * cost an event, an envelope and a client callback per byte.
 */
const JOIN_MAX_BYTES = 32 * 1024;

/** A queued update: output as the parts it arrived in, joined when it is read. */
type Queued = { kind: 'stdout' | 'stderr' | 'pty'; parts: Buffer[]; size: number } | { kind: 'end'; end: ProcessEnd };

/** One reader's view of a process: its updates in order, ending with `end`. */
export class Subscription implements AsyncIterable<ProcessUpdate> {
  private readonly queue: Queued[] = [];
  private wake: (() => void) | undefined;
  private closed = false;

  constructor(private readonly onDrain: () => void) {}

  get backlog(): number {
    return this.queue.length;
  }

  push(update: ProcessUpdate): void {
    if (this.closed) return;
    const last = this.queue.at(-1);
    if (update.kind === 'end') this.queue.push(update);
    else if (last && last.kind === update.kind && last.size + update.data.length <= JOIN_MAX_BYTES) {
      last.parts.push(update.data);
      last.size += update.data.length;
    } else this.queue.push({ kind: update.kind, parts: [update.data], size: update.data.length });
    this.wake?.();
  }

  close(): void {
    this.closed = true;
    this.queue.length = 0;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ProcessUpdate> {
    while (!this.closed) {
      const next = this.queue.shift();
      if (!next) {
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = undefined;
        continue;
      }
      // Every read at or under the low mark, not only the one that crossed it: the output may have
      // been paused by another reader's backlog, which was above the mark then.
      if (this.queue.length <= LOW_WATER) this.onDrain();
      if (next.kind === 'end') {
        yield next;
        return;
      }
      yield { kind: next.kind, data: next.parts.length === 1 ? next.parts[0]! : Buffer.concat(next.parts, next.size) };
    }
  }
}

export class TrackedProcess {
  private readonly subscribers = new Set<Subscription>();
  private ended: ProcessEnd | undefined;
  private paused = false;
  /** The signal sbx delivered last, so an exit by it reads as envd's `signal: …`. */
  private delivered: ProcessSignal | undefined;
  private markDone = (): void => undefined;
  /** Settles when the process has ended. */
  readonly done = new Promise<void>((resolve) => (this.markDone = resolve));

  constructor(
    readonly pid: number,
    readonly spec: ProcessSpec,
    private readonly stream: ExecStream,
    private readonly onEnd: () => void,
  ) {
    const outputs: Array<[Readable, 'stdout' | 'stderr' | 'pty']> = [
      [stream.stdout, spec.tty ? 'pty' : 'stdout'],
      [stream.stderr, 'stderr'],
    ];
    const closed = outputs.map(([readable, kind]) => {
      readable.on('data', (data: Buffer) => this.publish({ kind, data }));
      return new Promise<void>((resolve) => {
        readable.once('end', resolve);
        readable.once('close', resolve);
        readable.once('error', () => resolve());
      });
    });
    // The end goes out after every byte of output: wait() can resolve before the last chunk was read.
    void Promise.all([stream.wait(), ...closed]).then(
      ([code]) => this.finish(this.endOf(code)),
      (err: unknown) => this.finish({ exitCode: -1, exited: false, status: 'error', error: err instanceof Error ? err.message : String(err) }),
    );
  }

  get running(): boolean {
    return this.ended === undefined;
  }

  /** A reader from now on. A process that already ended gives its end at once. */
  subscribe(): Subscription {
    const sub = new Subscription(() => this.maybeResume());
    if (this.ended) {
      sub.push({ kind: 'end', end: this.ended });
      return sub;
    }
    this.subscribers.add(sub);
    return sub;
  }

  unsubscribe(sub: Subscription): void {
    sub.close();
    this.subscribers.delete(sub);
    this.maybeResume();
  }

  async writeStdin(data: Uint8Array): Promise<void> {
    this.mustRun();
    const stdin = this.stream.stdin;
    if (stdin.writableEnded) throw new SbxError('invalid_argument', `stdin of process ${this.pid} is closed`);
    await new Promise<void>((resolve, reject) => stdin.write(Buffer.from(data), (err) => (err ? reject(err) : resolve())));
  }

  closeStdin(): void {
    this.mustRun();
    if (!this.stream.stdin.writableEnded) this.stream.stdin.end();
  }

  async resize(size: { cols: number; rows: number }): Promise<void> {
    this.mustRun();
    if (!this.spec.tty) throw new SbxError('invalid_argument', `process ${this.pid} has no terminal to resize`);
    await this.stream.resize(size);
  }

  /**
   * SIGKILL ends the process and everything it started (the box's cancel); other signals go to
   * the process alone where the runtime can deliver them (the in-box agent). On the engine's
   * exec, which cannot, SIGTERM ends it like SIGKILL.
   */
  async signal(name: ProcessSignal): Promise<void> {
    this.mustRun();
    this.delivered = name;
    if (name !== 'SIGKILL' && this.stream.signal) await this.stream.signal(name);
    else {
      this.delivered = 'SIGKILL';
      await this.stream.cancel();
    }
  }

  private mustRun(): void {
    if (this.ended) throw new SbxError('not_found', `process ${this.pid} has ended`);
  }

  private endOf(code: number): ProcessEnd {
    const signal = this.delivered;
    if (signal && code === 128 + PROCESS_SIGNALS[signal]) {
      const status = `signal: ${signal === 'SIGKILL' ? 'killed' : signal === 'SIGTERM' ? 'terminated' : signal}`;
      return { exitCode: -1, exited: false, status, error: status };
    }
    return { exitCode: code, exited: true, status: `exit status ${code}` };
  }

  private publish(update: ProcessUpdate): void {
    for (const sub of this.subscribers) sub.push(update);
    if (!this.paused && [...this.subscribers].some((s) => s.backlog >= HIGH_WATER)) {
      this.paused = true;
      this.stream.stdout.pause();
      this.stream.stderr.pause();
    }
  }

  private maybeResume(): void {
    if (!this.paused || [...this.subscribers].some((s) => s.backlog > LOW_WATER)) return;
    this.paused = false;
    this.stream.stdout.resume();
    this.stream.stderr.resume();
  }

  private finish(end: ProcessEnd): void {
    this.ended = end;
    for (const sub of this.subscribers) sub.push({ kind: 'end', end });
    this.subscribers.clear();
    this.onEnd();
    this.markDone();
  }
}

/** The processes of every box, by box id and pid. */
export class ProcessTable {
  private readonly boxes = new Map<string, Map<number, TrackedProcess>>();
  /** Pids for runtimes that do not report one (the engine's exec): above any real Linux pid. */
  private nextHandle = 1 << 22;

  /** Tracks a started stream; its entry goes away when the process has ended. */
  add(boxId: string, spec: ProcessSpec, stream: ExecStream): TrackedProcess {
    let procs = this.boxes.get(boxId);
    if (!procs) this.boxes.set(boxId, (procs = new Map()));
    const table = procs;
    const pid = stream.pid ?? this.nextHandle++;
    const proc = new TrackedProcess(pid, spec, stream, () => {
      if (table.get(pid) === proc) table.delete(pid);
      if (table.size === 0 && this.boxes.get(boxId) === table) this.boxes.delete(boxId);
    });
    table.set(pid, proc);
    return proc;
  }

  list(boxId: string): TrackedProcess[] {
    return [...(this.boxes.get(boxId)?.values() ?? [])];
  }

  /** The running process of the box with this pid or tag; not_found otherwise. */
  find(boxId: string, selector: { pid: number } | { tag: string }): TrackedProcess {
    const procs = this.list(boxId);
    const found = 'pid' in selector ? procs.find((p) => p.pid === selector.pid) : procs.find((p) => p.spec.tag === selector.tag);
    if (!found) {
      const what = 'pid' in selector ? `pid ${selector.pid}` : `tag ${JSON.stringify(selector.tag)}`;
      throw new SbxError('not_found', `process with ${what} not found`);
    }
    return found;
  }
}
