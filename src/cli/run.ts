/**
 * The commands that work on this machine's engine through the library, with no server: `run`
 * and `pools` without a subcommand. main.ts loads this file only when one of them runs (the
 * Manager and the engine clients are most of sbx's modules).
 */
import { Manager } from '../sandbox/manager.js';
import type { Box } from '../sandbox/box.js';
import { loadConfig, resolveConfig } from '../sandbox/config.js';
import { labelsToRecord, managerSelector } from '../sandbox/labels.js';
import { Pool } from '../sandbox/pool.js';
import { isSbxError } from '../errors.js';
import { execInBox } from './boxes.js';
import type { ExecFlags } from './boxes.js';
import { SIGNAL_EXIT } from './exit.js';
import { createPulling } from './pull-progress.js';
import type { PullPolicy } from './pull-progress.js';
import type { PortSpec } from './remote.js';

export interface RunOptions extends ExecFlags {
  config?: string;
  pool?: string;
  name?: string;
  publish?: PortSpec[];
  pull: PullPolicy;
}

/** The Manager for a command: its `-c` first, then the global one, then $SBX_CONFIG and SBX_* variables. */
function manager(file: string | undefined): Manager {
  return new Manager(loadConfig(file ? { file } : {}));
}

/**
 * `sbx run`: a oneshot box, one command with this terminal (execInBox, as `sbx exec`), the box
 * removed; sets the exit status to leave with.
 */
export async function runCommand(image: string, cmd: string[], opts: RunOptions, configFile: string | undefined): Promise<void> {
  const m = manager(configFile);
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => stop.abort(signal);
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal);
  let box: Box | undefined;
  try {
    const create = async () =>
      (box = await m.create({
        image,
        policy: 'oneshot',
        ...(opts.pool ? { pool: opts.pool } : {}),
        ...(opts.name ? { id: opts.name } : {}),
        ...(opts.publish ? { ports: opts.publish } : {}),
      }));
    const pool = async () => opts.pool ?? (await m.pools())[0]?.name ?? 'local';
    await createPulling(image, opts.pull, create, async function* () {
      yield* m.pullImage(await pool(), image);
    });
    if (stop.signal.aborted) return;
    // The box's env is its command's (docker run -e); the pull and the create are not timed.
    process.exitCode = await execInBox(box!, cmd, opts);
  } finally {
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
    // A oneshot box removes itself after its exec; this covers a command that never started.
    await (box as Box | undefined)?.remove().catch((err: unknown) => {
      if (!isSbxError(err, 'not_found')) throw err;
    });
    await m.close();
    if (stop.signal.aborted) process.exitCode = SIGNAL_EXIT[String(stop.signal.reason)] ?? 1;
  }
}

/**
 * `sbx pools` alone: this machine's configured pools, read from the engines without a Manager.
 * A Manager's start recovers the instance's boxes: it starts the ones the engine stopped, sweeps
 * containers never started, runs a cleanup pass; and `sbx serve` under the same instance name
 * (the default, `sbx`) owns those boxes. A listing must not act on them, so this only pings each
 * engine and counts the instance's boxes there.
 */
export async function localPools(configFile: string | undefined): Promise<void> {
  const config = resolveConfig(loadConfig(configFile ? { file: configFile } : {}));
  for (const def of config.pools) {
    const rt = new Pool(def).runtime();
    let connected = false;
    let boxes = 0;
    try {
      await rt.ping();
      connected = true;
      const listed = await rt.list({ labels: managerSelector(config.name, def.name) });
      // Warm spares carry no box id: not boxes (as the Manager counts them).
      boxes = listed.filter((c) => labelsToRecord(c.labels, { idleTimeoutMs: 0, stopTimeoutMs: 0, maxLifetimeMs: 0, createdAt: 0, image: '' }) !== null).length;
    } catch {
      // An engine that does not answer is what the `unreachable` column says.
    } finally {
      await rt.close().catch(() => undefined);
    }
    console.log(`${def.name}\t${def.addr}\t${connected ? 'connected' : 'unreachable'}\tboxes=${boxes}`);
  }
}
