import { Manager } from '../../src/sandbox/manager.js';
import type { Box } from '../../src/sandbox/box.js';
import { BASE_IMAGE, BENCH_LABEL } from '../core/identity.js';
import type { BoxRef, ExecOutcome, Subject } from './subject.js';

interface SbxRef extends BoxRef {
  readonly box: Box;
}

export interface SbxSubjectOptions {
  managerName: string;
  dataDir: string;
  /** Value of the bench label, see core/identity.ts. */
  runId: string;
}

/** sbx through its library API, called the way an embedding application would call it. */
export class SbxSubject implements Subject<SbxRef> {
  readonly name = 'sbx';

  private constructor(
    readonly manager: Manager,
    private readonly labels: Record<string, string>,
  ) {}

  static async open(opts: SbxSubjectOptions): Promise<SbxSubject> {
    const manager = new Manager({ name: opts.managerName, pools: [{ name: 'local', addr: 'local' }], dataDir: opts.dataDir, cleanupIntervalMs: 0 });
    await manager.start();
    return new SbxSubject(manager, { [BENCH_LABEL]: opts.runId });
  }

  async create(): Promise<SbxRef> {
    const box = await this.manager.create({ image: BASE_IMAGE, labels: this.labels });
    return { id: box.id, box };
  }

  async exec(ref: SbxRef, cmd: string[]): Promise<ExecOutcome> {
    const r = await ref.box.exec(cmd);
    return { exitCode: r.exitCode, stdoutBytes: r.stdout.length };
  }

  async info(ref: SbxRef): Promise<void> {
    await ref.box.info();
  }

  stop(ref: SbxRef): Promise<void> {
    return ref.box.stop();
  }

  start(ref: SbxRef): Promise<void> {
    return ref.box.start();
  }

  remove(ref: SbxRef): Promise<void> {
    return ref.box.remove();
  }

  close(): Promise<void> {
    return this.manager.close();
  }
}
