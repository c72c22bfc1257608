import type { EngineClient } from '../engine/client.js';
import { BENCH_CONTAINER_LABEL } from './identity.js';
import { forEachLimited } from './pool.js';

interface Listed {
  Id: string;
  Labels: Record<string, string> | null;
}

/** Whether a process with this pid runs (EPERM: it does, as someone else). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Force-removes bench containers: those of `runId`, plus, with `stale`, those of bench runs
 * whose process is gone (a run killed with SIGKILL leaves its boxes behind). Containers of a
 * bench still running beside this one are left alone. Returns how many were removed.
 */
export async function sweep(engine: EngineClient, runId: string, opts: { stale?: boolean } = {}): Promise<number> {
  const filters = encodeURIComponent(JSON.stringify({ label: [BENCH_CONTAINER_LABEL] }));
  const listed = await engine.json<Listed[]>('GET', `/containers/json?all=1&filters=${filters}`);
  const doomed = listed.filter((c) => {
    const owner = c.Labels?.[BENCH_CONTAINER_LABEL] ?? '';
    if (owner === runId) return true;
    const pid = Number(owner);
    return opts.stale === true && (!Number.isInteger(pid) || pid <= 0 || !alive(pid));
  });
  let removed = 0;
  await forEachLimited(doomed, 5, async (c) => {
    await engine.call('DELETE', `/containers/${c.Id}?force=1&v=1`, undefined, [200, 204, 404]);
    removed++;
  });
  return removed;
}
