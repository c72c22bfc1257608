/**
 * The seed's JSAPI shapes (DESIGN, Phase 2: JSAPI), field for field: snake_case names,
 * durations in milliseconds, times as ISO 8601 strings. The facade maps them onto the library's
 * camelCase types; nothing here has behaviour.
 */
import type { Readable, Writable } from 'node:stream';

/** `sandbox.Create(options)`; `id` makes it a get-or-create. */
export interface CreateOptions {
  id?: string;
  owner: string;
  pool?: string;
  image: string;
  workdir?: string;
  /** e.g. "1000:1000". */
  user?: string;
  env?: Record<string, string>;
  /** Bytes. */
  memory?: number;
  cpus?: number;
  vnc?: boolean;
  ports?: PortMapping[];
  policy?: 'oneshot' | 'session' | 'longrunning' | 'persistent';
  /** Milliseconds. */
  idle_timeout?: number;
  /** Milliseconds. */
  stop_timeout?: number;
  workspace_id?: string;
  mount_mode?: 'rw' | 'ro';
  mount_path?: string;
  labels?: Record<string, string>;
}

/** One entry of `CreateOptions.ports`. */
export interface PortMapping {
  /** Port inside the box. */
  container: number;
  /** Host port; 0 or absent picks a free one. */
  host?: number;
  /** Loopback address to publish on; default 127.0.0.1. */
  host_ip?: string;
  protocol?: 'tcp' | 'udp';
}

/** `sandbox.List(filter)`; an empty or absent field matches everything. */
export interface ListOptions {
  owner?: string;
  pool?: string;
  labels?: Record<string, string>;
}

export interface BoxInfo {
  id: string;
  container_id: string;
  pool: string;
  owner: string;
  status: 'creating' | 'running' | 'paused' | 'restarting' | 'stopped' | 'archived';
  image: string;
  vnc: boolean;
  policy: 'oneshot' | 'session' | 'longrunning' | 'persistent';
  labels: Record<string, string>;
  /** ISO 8601. */
  created_at: string;
  /** ISO 8601. */
  last_active: string;
  process_count: number;
}

/** `box.Exec(cmd, options)` and `box.Stream(cmd, options)`. */
export interface ExecOptions {
  workdir?: string;
  env?: Record<string, string>;
  /** Milliseconds; the process is killed inside the box when it passes (exit code 137). */
  timeout?: number;
}

export interface ExecResult {
  exit_code: number;
  stdout: string;
  stderr: string;
}

/** What `box.Stream` returns. The streams are Node streams (`Readable.toWeb` gives web streams). */
export interface ExecStream {
  stdout: Readable;
  stderr: Readable;
  /** `end()` closes the process's stdin; its remaining output still arrives. */
  stdin: Writable;
  /** The exit code, once the process has exited and its output is drained. */
  wait(): Promise<number>;
  /** Kills the process inside the box. */
  cancel(): Promise<void>;
}

/** `box.Attach(port, options)`; accepted for the seed's signature, see `Attach`. */
export interface AttachOptions {
  protocol?: 'ws' | 'sse';
  path?: string;
  headers?: Record<string, string>;
}

/** `workspace.Create(options)`. */
export interface WorkspaceCreateOptions {
  id?: string;
  name: string;
  owner: string;
  node: string;
  labels?: Record<string, string>;
}

/** `workspace.List(filter)`; an empty or absent field matches everything. */
export interface WorkspaceListOptions {
  owner?: string;
  node?: string;
}

export interface WorkspaceInfo {
  id: string;
  name: string;
  owner: string;
  node: string;
  labels: Record<string, string>;
  /** ISO 8601. */
  created_at: string;
  /** ISO 8601. */
  updated_at: string;
}

/** One entry of `ws.ReadDir`. */
export interface DirEntry {
  name: string;
  is_dir: boolean;
  size: number;
}

/** What `ws.Stat` returns. */
export interface FileInfo {
  name: string;
  size: number;
  is_dir: boolean;
  /** ISO 8601. */
  mod_time: string;
}
