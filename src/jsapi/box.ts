/**
 * The seed's Box object. Like the seed's, it holds the box's id (and the two fields that never
 * change) and asks the process-wide Manager for the box on every call, so an object outlives a
 * re-`Init` and a removed box fails with a clear not_found instead of a dead container id.
 */
import type { ExecOptions as LibExecOptions, ExecStreamOptions } from '../runtime/types.js';
import { M } from './singleton.js';
import type { Box as LibBox, BoxInfo as LibBoxInfo } from '../sandbox/index.js';
import { EXEC_FIELDS, mapOptions, seedNames } from './options.js';
import type { ServiceConn } from '../attach/types.js';
import type { AttachOptions, BoxInfo, ExecOptions, ExecResult, ExecStream } from './types.js';
import { WorkspaceFS } from './workspace-fs.js';

/**
 * One sandbox, as the seed's `sandbox.Create`/`Get` return it.
 *
 * @example
 * const box = await sandbox.Create({ owner: 'alice', image: 'sbx-base:latest' });
 * const { exit_code, stdout } = await box.Exec(['echo', 'hi']);
 */
export class Box {
  readonly id: string;
  readonly owner: string;
  readonly pool: string;

  /** @internal Made by the `sandbox` namespace. */
  constructor(box: LibBox) {
    this.id = box.id;
    this.owner = box.owner;
    this.pool = box.pool;
  }

  private box(): Promise<LibBox> {
    return M().get(this.id);
  }

  /** Runs a command to completion; a non-zero exit is a result, not an error. */
  async Exec(cmd: string[], options?: ExecOptions): Promise<ExecResult> {
    const opts = mapOptions(options, EXEC_FIELDS, 'exec') as LibExecOptions;
    const box = await this.box();
    const r = await seedNames(() => box.exec(cmd, opts));
    return { exit_code: r.exitCode, stdout: r.stdout, stderr: r.stderr };
  }

  /** Starts a command with live stdin, stdout and stderr. */
  async Stream(cmd: string[], options?: ExecOptions): Promise<ExecStream> {
    const opts = mapOptions(options, EXEC_FIELDS, 'exec') as ExecStreamOptions;
    const box = await this.box();
    const s = await seedNames(() => box.stream(cmd, opts));
    return { stdout: s.stdout, stderr: s.stderr, stdin: s.stdin, wait: () => s.wait(), cancel: () => s.cancel() };
  }

  /** A connection to a WebSocket (default) or SSE service of the box: the library's box.attach(). */
  async Attach(port: number, options: AttachOptions = {}): Promise<ServiceConn> {
    const { protocol = 'ws', ...rest } = options;
    return (await this.box()).attach(port, { ...rest, protocol });
  }

  /** The URL of the box's VNC viewer page with an access token: the library's box.vnc(). */
  async VNC(): Promise<string> {
    return (await this.box()).vnc();
  }

  /** A URL for `path` on `port` of the box: the library's box.proxy() (not_available port_not_exposed for a port the box did not publish). */
  async Proxy(port: number, path?: string): Promise<string> {
    return (await this.box()).proxy(port, path);
  }

  /** The file API of the workspace mounted into this box; not_found when it has none. */
  async Workspace(): Promise<WorkspaceFS> {
    const files = await (await this.box()).workspace();
    return new WorkspaceFS(await M().workspaces.get(files.id));
  }

  /** The box's fields and its status, asked of the engine now. */
  async Info(): Promise<BoxInfo> {
    return toBoxInfo(await (await this.box()).info());
  }

  async Start(): Promise<void> {
    await (await this.box()).start();
  }

  /** SIGTERM, then SIGKILL after the box's stop timeout; the box stays. */
  async Stop(): Promise<void> {
    await (await this.box()).stop();
  }

  /** Removes the box and its container. */
  async Remove(): Promise<void> {
    await (await this.box()).remove();
  }
}

export function toBoxInfo(i: LibBoxInfo): BoxInfo {
  return {
    id: i.id,
    container_id: i.containerId,
    pool: i.pool,
    owner: i.owner,
    status: i.status,
    image: i.image,
    vnc: i.vnc,
    policy: i.policy,
    labels: i.labels,
    created_at: i.createdAt,
    last_active: i.lastActive,
    process_count: i.processCount,
  };
}
