/**
 * Checkpoint and restore of a container through the Engine API's experimental checkpoint calls
 * (dockerd ≥ 1.13 with `experimental: true`), which hand the work to the container's OCI runtime.
 * Only gVisor's `runsc` does it here: runc would need CRIU, which fails on this kernel, so a
 * container on any OCI runtime but runsc is refused before the engine is asked.
 *
 * A checkpoint writes the sandbox's whole state (memory, processes, open files, its netstack) to
 * `<engine root>/containers/<id>/checkpoints/<name>` and ends the sandbox: the container reads
 * `exited` and holds no process and no memory on the host. A start with `?checkpoint=<name>`
 * restores it: the processes go on where they were. The container's filesystem (its layer and its
 * mounts) is the container's as with any stop, so files written before are there.
 */
import type Docker from 'dockerode';
import { SbxError } from '../../errors.js';
import { engineStatus } from './errors.js';

/**
 * Why a container cannot be checkpointed, or undefined when it can: its OCI runtime (`runtime`,
 * gVisor or not as the engine's runtimes say: gvisor.ts) is not runsc, or the engine's checkpoint
 * API is off (not experimental).
 */
export function checkpointRefusal(runtime: string, gvisor: boolean, experimental: boolean): { reason: string; message: string } | undefined {
  if (!gvisor) {
    return {
      reason: 'checkpoint_unsupported',
      message: `it runs on the OCI runtime '${runtime}', which cannot checkpoint a box (no CRIU here); pools with ociRuntime: runsc (gVisor) can`,
    };
  }
  if (!experimental) {
    return { reason: 'checkpoint_unsupported', message: "the engine's checkpoint API is off: dockerd needs experimental: true in its daemon.json" };
  }
  return undefined;
}

interface DialOptions {
  path: string;
  method: 'GET' | 'POST' | 'DELETE';
  options?: Record<string, unknown>;
  statusCodes: Record<number, boolean | string>;
}

/** One Engine API call through dockerode's modem (dockerode 5 has no typed checkpoint helpers). */
function dial<T>(docker: Docker, opts: DialOptions): Promise<T> {
  const modem = docker.modem as unknown as { dial(o: DialOptions, cb: (err: unknown, data: unknown) => void): void };
  return new Promise((resolve, reject) => {
    modem.dial(opts, (err, data) => (err ? reject(err) : resolve(data as T)));
  });
}

/** Starts asked again when the engine trips over its own content store (retryRestore). */
const RESTORE_RETRIES = 6;

const COMMON = { 404: 'no such container', 409: 'conflict', 500: 'server error' } as const;

/** The engine's checkpoint calls for one engine; errors are the engine's, for the caller to map. */
export class DockerCheckpoints {
  constructor(private readonly docker: () => Docker) {}

  /** Writes the container's state to checkpoint `name` and ends it (the container reads exited). */
  async create(id: string, name: string): Promise<void> {
    await dial(this.docker(), {
      path: `/containers/${encodeURIComponent(id)}/checkpoints`,
      method: 'POST',
      options: { CheckpointID: name, Exit: true },
      statusCodes: { 200: true, 201: true, 204: true, ...COMMON },
    });
  }

  /** Starts the container from checkpoint `name`: its processes go on where they were (see retryRestore). */
  restore(id: string, name: string): Promise<void> {
    return retryRestore(() => this.restoreOnce(id, name));
  }

  private async restoreOnce(id: string, name: string): Promise<void> {
    await dial(this.docker(), {
      path: `/containers/${encodeURIComponent(id)}/start?`,
      method: 'POST',
      // The name in the query, and an empty `_body`, which the modem then sends as no body: a
      // start's body must be empty since API 1.24.
      options: { _query: { checkpoint: name }, _body: {} },
      statusCodes: { 204: true, 304: 'container already started', ...COMMON },
    });
  }

  /** The names of the container's checkpoints. */
  async list(id: string): Promise<string[]> {
    const items = await dial<Array<{ Name?: string }> | Buffer | null>(this.docker(), {
      path: `/containers/${encodeURIComponent(id)}/checkpoints?`,
      method: 'GET',
      statusCodes: { 200: true, ...COMMON },
    });
    // The engine answers `null` for none, which the modem hands back as raw bytes.
    const list = (Buffer.isBuffer(items) ? JSON.parse(items.toString('utf8') || 'null') : items) as Array<{ Name?: string }> | null;
    return (list ?? []).flatMap((c) => (c.Name ? [c.Name] : []));
  }

  /** Deletes checkpoint `name` (its files); a missing one is not an error. */
  async remove(id: string, name: string): Promise<void> {
    try {
      await dial(this.docker(), {
        path: `/containers/${encodeURIComponent(id)}/checkpoints/${encodeURIComponent(name)}?`,
        method: 'DELETE',
        statusCodes: { 200: true, 204: true, ...COMMON },
      });
    } catch (err) {
      if (engineStatus(err) === 404 && /checkpoint/i.test(String((err as Error).message))) return;
      throw err;
    }
  }
}

/**
 * A start from a checkpoint, asked again when the engine (20.10) trips over its own content store:
 * it copies the checkpoint into containerd's first and sometimes finds a blob of it there already,
 * left by an earlier restore and not yet collected ("commit failed: content sha256:…: already
 * exists", moby/moby#42900, fixed only in later engines). Nothing started then, so the start is
 * safe to ask again, a few times, 50 ms … 1.6 s apart.
 */
export async function retryRestore<T>(start: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await start();
    } catch (err) {
      if (attempt >= RESTORE_RETRIES || !/upload checkpoint to containerd.*already exists/i.test(String((err as Error).message))) throw err;
      await new Promise((r) => setTimeout(r, 50 * 2 ** attempt));
    }
  }
}

/** not_available for a container that cannot be checkpointed, naming why. */
export function checkpointRefused(id: string, why: { reason: string; message: string }): SbxError {
  return new SbxError('not_available', `container ${id} cannot be checkpointed: ${why.message}`, { details: { id, reason: why.reason } });
}
