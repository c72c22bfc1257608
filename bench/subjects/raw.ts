import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { EngineError } from '../engine/client.js';
import type { EngineClient } from '../engine/client.js';
import { readFrames } from '../engine/frames.js';
import { rawCreateBody, rawCreateTemplate } from './raw-create-body.js';
import type { RawCreateTemplate } from './raw-create-body.js';
import type { BoxRef, ExecOutcome, Subject } from './subject.js';

export interface RawRef extends BoxRef {
  /** The engine's container id. */
  readonly container: string;
}

interface ExecInspect {
  Running: boolean;
  ExitCode: number | null;
}

/**
 * The baseline: the same engine calls sbx makes, issued directly with the minimal client.
 * Only what the engine needs to do the same work is kept (same body, same exec marker env,
 * same exit-code poll); everything sbx adds around the calls is left out.
 */
export class RawSubject implements Subject<RawRef> {
  readonly name = 'raw';
  private readonly template: RawCreateTemplate;

  constructor(
    readonly engine: EngineClient,
    opts: { managerName: string; runId: string },
  ) {
    this.template = rawCreateTemplate(`${opts.managerName}-raw`, opts.runId);
  }

  async create(): Promise<RawRef> {
    const { id, name, body } = rawCreateBody(this.template);
    const { Id } = await this.engine.json<{ Id: string }>('POST', `/containers/create?name=${encodeURIComponent(name)}`, body);
    try {
      await this.engine.call('POST', `/containers/${Id}/start`);
    } catch (err) {
      // Same as sbx: a box that cannot start is not left behind.
      await this.engine.call('DELETE', `/containers/${Id}?force=1&v=1`).catch(() => undefined);
      throw err;
    }
    return { id, container: Id };
  }

  async exec(ref: RawRef, cmd: string[]): Promise<ExecOutcome> {
    const { Id } = await this.engine.json<{ Id: string }>('POST', `/containers/${ref.container}/exec`, {
      Cmd: cmd,
      // sbx marks every exec so a timeout can find its processes; the engine stores it either way.
      Env: [`SBX_EXEC_ID=${randomUUID()}`],
      AttachStdin: false,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
    });
    const res = await this.engine.stream('POST', `/exec/${Id}/start`, { Detach: false, Tty: false });
    if (res.statusCode !== 200) {
      const chunks: Buffer[] = [];
      for await (const c of res) chunks.push(c as Buffer);
      throw new EngineError(res.statusCode ?? 0, 'POST', `/exec/${Id}/start`, Buffer.concat(chunks).toString('utf8'));
    }
    const { stdout } = await readFrames(res);
    return { exitCode: await this.exitCode(Id), stdoutBytes: stdout.length };
  }

  /** The engine may report the exec as running for a moment after its output closed; sbx polls the same way. */
  private async exitCode(execId: string): Promise<number> {
    let delay = 2;
    for (;;) {
      const info = await this.engine.json<ExecInspect>('GET', `/exec/${execId}/json`);
      if (!info.Running && info.ExitCode !== null) return info.ExitCode;
      await sleep(delay);
      delay = Math.min(delay * 2, 50);
    }
  }

  async info(ref: RawRef): Promise<void> {
    await this.engine.json('GET', `/containers/${ref.container}/json`);
  }

  async stop(ref: RawRef): Promise<void> {
    await this.engine.call('POST', `/containers/${ref.container}/stop?t=2`);
  }

  async start(ref: RawRef): Promise<void> {
    await this.engine.call('POST', `/containers/${ref.container}/start`);
  }

  async remove(ref: RawRef): Promise<void> {
    await this.engine.call('DELETE', `/containers/${ref.container}?force=1&v=1`);
  }

  async close(): Promise<void> {
    this.engine.close();
  }
}
