import { SbxError } from '../errors.js';
import type { ExecOptions, ExecResult, ExecStream, ExecStreamOptions, Runtime } from '../runtime/types.js';
import type { WorkspaceFS } from '../workspace/index.js';
import type { BoxRecord } from './labels.js';
import type { BoxInfo, BoxStatus, LifecyclePolicy } from './types.js';

/** What a Box needs from the Manager that owns it. */
export interface BoxHost {
  runtimeFor(pool: string): Runtime;
  removeBox(id: string): Promise<void>;
  /** Called when an exec or stream of the box has finished. */
  onExecFinished(box: Box): void;
  workspaceFs(workspaceId: string): Promise<WorkspaceFS>;
}

/** When the box was last used, and what is in use right now. */
export class BoxActivityState {
  lastCall: number;
  lastHeartbeat = 0;
  inFlight = 0;
  execsCompleted = 0;
  processCount = 0;

  constructor(now: number) {
    this.lastCall = now;
  }

  /** The latest of an external call and a heartbeat; "now" while work is in flight. */
  lastActive(now: number): number {
    return this.inFlight > 0 ? now : Math.max(this.lastCall, this.lastHeartbeat);
  }
}

export type BoxExecOptions = ExecOptions;
export type BoxStreamOptions = ExecStreamOptions;

/**
 * One sandbox. Every call counts as activity for the idle clock; an exec or stream that is
 * open keeps the box alive however long it runs.
 *
 * @example
 * await using box = await manager.create({ image: 'sbx-base:latest' });
 * const { stdout } = await box.exec(['echo', 'hello']);
 */
export class Box implements AsyncDisposable {
  readonly activity: BoxActivityState;

  constructor(
    readonly record: BoxRecord,
    readonly containerId: string,
    private readonly host: BoxHost,
    now: number = Date.now(),
  ) {
    this.activity = new BoxActivityState(now);
  }

  get id(): string {
    return this.record.id;
  }
  get owner(): string {
    return this.record.owner;
  }
  get pool(): string {
    return this.record.pool;
  }
  get policy(): LifecyclePolicy {
    return this.record.policy;
  }
  get workspaceId(): string | null {
    return this.record.workspaceId;
  }
  get labels(): Record<string, string> {
    return { ...this.record.labels };
  }

  private get runtime(): Runtime {
    return this.host.runtimeFor(this.record.pool);
  }

  /** Marks an external call; the Manager's API calls it too. */
  touch(now = Date.now()): void {
    this.activity.lastCall = Math.max(this.activity.lastCall, now);
  }

  /** Runs a command to completion. A `timeoutMs` kills it inside the box (`timedOut: true`, exit 137). */
  async exec(cmd: string[], opts: BoxExecOptions = {}): Promise<ExecResult> {
    const finish = this.begin();
    try {
      return await this.runtime.exec(this.containerId, cmd, opts);
    } finally {
      finish();
    }
  }

  /** Starts a command with live stdin/stdout/stderr; the box counts as busy until it exits. */
  async stream(cmd: string[], opts: BoxStreamOptions = {}): Promise<ExecStream> {
    const finish = this.begin();
    let stream: ExecStream;
    try {
      stream = await this.runtime.execStream(this.containerId, cmd, opts);
    } catch (err) {
      finish();
      throw err;
    }
    stream.wait().then(finish, finish);
    return stream;
  }

  /** Registers work in flight; the returned function ends it (once). */
  private begin(): () => void {
    this.touch();
    this.activity.inFlight++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.activity.inFlight--;
      this.activity.execsCompleted++;
      this.touch();
      this.host.onExecFinished(this);
    };
  }

  /** The file API of the workspace mounted into this box; not_found when it has none. */
  async workspace(): Promise<WorkspaceFS> {
    this.touch();
    if (!this.record.workspaceId) throw new SbxError('not_found', `box '${this.id}' has no workspace`, { details: { id: this.id } });
    return this.host.workspaceFs(this.record.workspaceId);
  }

  async info(): Promise<BoxInfo> {
    this.touch();
    const c = await this.runtime.inspect(this.containerId);
    const status: BoxStatus = c.running ? 'running' : c.status === 'created' ? 'creating' : 'stopped';
    const now = Date.now();
    return {
      id: this.id,
      containerId: this.containerId,
      pool: this.pool,
      owner: this.owner,
      status,
      policy: this.policy,
      labels: this.labels,
      image: this.record.image,
      createdAt: new Date(this.record.createdAt).toISOString(),
      lastActive: new Date(this.activity.lastActive(now)).toISOString(),
      processCount: this.activity.processCount,
      vnc: this.record.vnc,
      workspaceId: this.record.workspaceId,
      idleTimeoutMs: this.record.idleTimeoutMs,
      maxLifetimeMs: this.record.maxLifetimeMs,
      stopTimeoutMs: this.record.stopTimeoutMs,
      ports: c.ports,
    };
  }

  async start(): Promise<void> {
    this.touch();
    await this.runtime.start(this.containerId);
  }

  /** SIGTERM, then SIGKILL after the box's stop timeout. The box stays registered. */
  async stop(): Promise<void> {
    this.touch();
    await this.runtime.stop(this.containerId, { timeoutMs: this.record.stopTimeoutMs });
  }

  /** Force-removes the container and forgets the box. */
  async remove(): Promise<void> {
    await this.host.removeBox(this.id);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.remove();
    } catch (err) {
      if (!(err instanceof SbxError && err.code === 'not_found')) throw err;
    }
  }
}
