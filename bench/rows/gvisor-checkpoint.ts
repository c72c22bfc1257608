/**
 * The memory-releasing pause on gVisor (issue #31), as ratios in one run against the engine's own
 * checkpoint API:
 *
 * - `gVisor Checkpoint`: box.pause({ memory: 'release' }) of a running gVisor box (an agent pool
 *   with `ociRuntime: runsc`, the box a user gets) against `POST /containers/{id}/checkpoints
 *   {Exit: true}` on a raw runsc container of sbx's create body. Its figures: one box's host
 *   memory running and checkpointed (the RSS of every host process that carries its container id:
 *   gVisor's sandbox and gofer, containerd's shim),
 *   its cgroup, and its checkpoint's size on disk. Goal: a checkpointed box holds ≤ 1 MiB.
 * - `gVisor Restore`: restore → first exec result: an exec on a released box (sbx restores it
 *   first, its agent answers) against `POST /containers/{id}/start?checkpoint=` and the engine's
 *   exec. Goal: p50 ≤ 150 ms.
 *
 * Run alone: `npx tsx bench/rows/gvisor-checkpoint.ts [--quick]`, or `npm run bench -- --only
 * 'gVisor Checkpoint,gVisor Restore'`.
 */
import { execFile } from 'node:child_process';
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import type { RowResult } from '../core/result.js';
import { defineRow } from '../core/row.js';
import type { AnyRow } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import type { RunContext } from '../core/run-rows.js';
import { runStandalone } from '../core/standalone.js';
import { EngineClient } from '../engine/client.js';
import { PoolSubject } from '../subjects/pool.js';
import type { PoolRef } from '../subjects/pool.js';
import { RawSubject } from '../subjects/raw.js';
import type { RawRef } from '../subjects/raw.js';
import { rawCreateBody, rawCreateTemplate } from '../subjects/raw-create-body.js';
import { retryRestore } from '../../src/runtime/docker/checkpoint.js';

const CHECKPOINT_ROW = 'gVisor Checkpoint';
const RESTORE_ROW = 'gVisor Restore';
export const GVISOR_CHECKPOINT_ROW_NAMES: readonly string[] = [CHECKPOINT_ROW, RESTORE_ROW];
/** The engine's name of gVisor's runtime (scripts/gvisor.sh registers `runsc`). */
const GVISOR_RUNTIME = process.env['SBX_TEST_GVISOR_RUNTIME'] ?? 'runsc';
const RESTORE_GOAL_MS = 150;
const MEMORY_GOAL_BYTES = 2 ** 20;
/** The engine's data root, where a container's checkpoints are (`<root>/containers/<id>/checkpoints`). */
const ENGINE_ROOT = '/var/lib/docker';
const MiB = 2 ** 20;
const run = promisify(execFile);

/** A side of the rows: a gVisor box it can checkpoint, restore and exec in. */
interface CheckpointSide {
  readonly name: string;
  create(): Promise<unknown>;
  checkpoint(box: unknown): Promise<void>;
  /** Restores the box and runs its first exec; resolves with the exec's result. */
  restoreAndExec(box: unknown): Promise<void>;
  remove(box: unknown): Promise<void>;
}

class SbxSide implements CheckpointSide {
  readonly name = 'sbx';
  constructor(readonly pool: PoolSubject) {}
  create(): Promise<PoolRef> {
    return this.pool.create();
  }
  checkpoint(ref: PoolRef): Promise<void> {
    return ref.box.pause({ memory: 'release' });
  }
  async restoreAndExec(ref: PoolRef): Promise<void> {
    // A use: the box is restored first, then the exec runs through its agent.
    const r = await this.pool.exec(ref, ['true']);
    if (r.exitCode !== 0) throw new Error(`first exec after restore: exit ${r.exitCode}`);
  }
  remove(ref: PoolRef): Promise<void> {
    return this.pool.remove(ref);
  }
}

/** The engine's calls, by hand, on a runsc container of sbx's create body (no agent: the engine's exec). */
class RawSide implements CheckpointSide {
  readonly name = 'raw';
  private readonly template;
  constructor(
    readonly raw: RawSubject,
    opts: { managerName: string; runId: string },
  ) {
    this.template = rawCreateTemplate(`${opts.managerName}-raw`, opts.runId);
    this.template.hostConfig['Runtime'] = GVISOR_RUNTIME;
  }
  async create(): Promise<RawRef> {
    const { id, name, body } = rawCreateBody(this.template);
    const engine = this.raw.engine;
    const { Id } = await engine.json<{ Id: string }>('POST', `/containers/create?name=${encodeURIComponent(name)}`, body);
    await engine.call('POST', `/containers/${Id}/start`);
    return { id, container: Id };
  }
  async checkpoint(ref: RawRef): Promise<void> {
    await this.raw.engine.call('POST', `/containers/${ref.container}/checkpoints`, { CheckpointID: 'c1', Exit: true }, [200, 201, 204]);
    // As sbx does: the engine learns of the sandbox's exit a moment after it answers, and refuses a start (304) until then.
    while ((await this.raw.engine.json<{ State: { Running: boolean } }>('GET', `/containers/${ref.container}/json`)).State.Running) await sleep(5);
  }
  async restoreAndExec(ref: RawRef): Promise<void> {
    // As sbx does: the engine's restore is asked again when it trips over its content store (moby/moby#42900).
    await retryRestore(() => this.raw.engine.call('POST', `/containers/${ref.container}/start?checkpoint=c1`, undefined, [204]));
    const r = await this.raw.exec(ref, ['true']);
    if (r.exitCode !== 0) throw new Error(`first exec after restore: exit ${r.exitCode}`);
  }
  async remove(ref: RawRef): Promise<void> {
    await this.raw.engine.call('DELETE', `/containers/${ref.container}?force=1&v=1`, undefined, [200, 204, 404]);
  }
}

interface Made {
  box?: unknown;
}

/** A row whose op acts on one box made untimed before it (`made`, ready for the op) and removed untimed after it. */
function boxRow(name: string, note: string, made: (s: CheckpointSide) => Promise<unknown>, op: (s: CheckpointSide, box: unknown) => Promise<void>) {
  return defineRow<CheckpointSide, undefined, Made>({
    name,
    group: 'latency',
    note,
    iterations: { quick: 4, full: 20 },
    warmup: 1,
    before: async (s) => ({ box: await made(s) }),
    op: (s, _shared, m) => op(s, m.box),
    async after(s, _shared, m) {
      if (m.box !== undefined) await s.remove(m.box);
    },
  });
}

const ROWS: AnyRow<CheckpointSide>[] = [
  boxRow(
    CHECKPOINT_ROW,
    'checkpoint a running gVisor box to disk, its memory released (raw: POST /containers/{id}/checkpoints {Exit: true}, until it reads exited)',
    (s) => s.create(),
    (s, box) => s.checkpoint(box),
  ),
  boxRow(
    RESTORE_ROW,
    'checkpointed gVisor box: restore → first exec result (raw: POST start?checkpoint= + engine exec)',
    async (s) => {
      const box = await s.create();
      await s.checkpoint(box);
      return box;
    },
    (s, box) => s.restoreAndExec(box),
  ),
];

/** The host processes of one container (those whose command line carries its id), and their RSS. */
async function hostProcesses(containerId: string): Promise<{ count: number; rssBytes: number }> {
  const { stdout } = await run('ps', ['-eo', 'rss=,args='], { maxBuffer: 16 * MiB });
  let count = 0;
  let rssBytes = 0;
  for (const line of stdout.split('\n')) {
    // gVisor's sandbox and gofer, and containerd's shim of the container (which ends with it).
    if (!line.includes(containerId)) continue;
    count++;
    rssBytes += (Number(line.trim().split(/\s+/)[0]) || 0) * 1024;
  }
  return { count, rssBytes };
}

/** Bytes under a directory (0 when it is not there). */
async function du(dir: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const p = join(dir, e.name);
    total += e.isDirectory() ? await du(p) : (await stat(p)).size;
  }
  return total;
}

/** One gVisor box measured from the host running (after an exec) and then checkpointed. */
async function measureMemory(pool: PoolSubject, engine: EngineClient): Promise<Record<string, number>> {
  const ref = await pool.create();
  try {
    const r = await pool.exec(ref, ['true']);
    if (r.exitCode !== 0) throw new Error(`exec: exit ${r.exitCode}`);
    const container = ref.box.containerId;
    const running = await hostProcesses(container);
    await ref.box.pause({ memory: 'release' });
    // Right as pause() returns, and a second later (what stays).
    const atReturn = await hostProcesses(container);
    await new Promise((r) => setTimeout(r, 1000));
    const released = await hostProcesses(container);
    const state = await engine.json<{ State: { Pid: number; Status: string } }>('GET', `/containers/${container}/json`);
    return {
      running_processes: running.count,
      running_rss_bytes: running.rssBytes,
      at_return_processes: atReturn.count,
      at_return_rss_bytes: atReturn.rssBytes,
      checkpointed_processes: released.count,
      checkpointed_rss_bytes: released.rssBytes,
      checkpointed_pid: state.State.Pid,
      checkpoint_disk_bytes: await du(join(ENGINE_ROOT, 'containers', container, 'checkpoints')),
    };
  } finally {
    await pool.remove(ref);
  }
}

const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;

export async function runGvisorCheckpointRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  const rows = ROWS.filter((r) => !opts.only || opts.only.has(r.name));
  if (rows.length === 0) return [];
  const pool = await PoolSubject.open('gvisor', { ociRuntime: GVISOR_RUNTIME }, opts);
  const engine = new EngineClient();
  const raw = new RawSubject(engine, { managerName: opts.managerName, runId: opts.runId });
  try {
    const results = await runPairRows(rows, new SbxSide(pool), new RawSide(raw, opts), ctx);
    for (const r of results) {
      if (r.sides.length !== 2) continue;
      if (r.name === RESTORE_ROW) r.note = `${r.note}; goal p50 ≤ ${RESTORE_GOAL_MS} ms: ${r.sides[0].stats.p50 <= RESTORE_GOAL_MS ? 'met' : 'MISSED'}`;
      if (r.name === CHECKPOINT_ROW) {
        const figures = await measureMemory(pool, engine);
        r.figures = figures;
        const held = figures['checkpointed_rss_bytes']!;
        r.note =
          `${r.note}; host memory: running ${mib(figures['running_rss_bytes']!)} in ${figures['running_processes']} processes, ` +
          `checkpointed ${mib(held)} in ${figures['checkpointed_processes']} a second after pause() returned (${mib(figures['at_return_rss_bytes']!)} in ${figures['at_return_processes']} as it returned; ` +
          `checkpoint ${mib(figures['checkpoint_disk_bytes']!)} on disk); ` +
          `goal ≤ 1 MiB: ${held <= MEMORY_GOAL_BYTES ? 'met' : 'MISSED'}`;
        ctx.log(`${CHECKPOINT_ROW}: ${r.note}`);
      }
    }
    return results;
  } finally {
    await pool.close();
    await raw.close();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await runStandalone('gvck', ['sbx', 'raw'], runGvisorCheckpointRows);
