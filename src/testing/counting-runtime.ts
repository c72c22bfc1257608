/**
 * CountingRuntime wraps any Runtime and counts every call by operation, so a test can assert
 * that bad input is refused before any engine request (`assert.equal(rt.total(), 0)`), or that
 * a cleanup pass lists each pool once.
 *
 * A call is counted when it is made, before it resolves, whether it succeeds or throws.
 * `events`, `images.pull` and `images.build` count when called, not when iterated. Properties
 * (`address`, `images`, `capabilities`) are not calls.
 */
import type { Readable } from 'node:stream';
import type {
  LogOptions,
  ContainerEvent,
  ContainerListOptions,
  ContainerSpec,
  ExecOptions,
  ExecStreamOptions,
  Images,
  PullProgress,
  RegistryAuth,
  Runtime,
  RuntimeCapabilities,
} from '../runtime/types.js';
import { capabilitiesOf } from '../runtime/types.js';

type MethodsOf<T> = { [K in keyof T]-?: T[K] extends (...args: never[]) => unknown ? K : never }[keyof T] & string;

/** Every method of Runtime and of Images, as `create`, `exec`, `images.pull`, ... */
export type RuntimeOp = MethodsOf<Runtime> | `images.${MethodsOf<Images>}`;

// `satisfies` makes TypeScript hold these tables to the interfaces: a method added to Runtime
// or Images and missing here (or one here that is gone) fails the typecheck.
const RUNTIME_METHODS = {
  ping: true,
  version: true,
  create: true,
  start: true,
  stop: true,
  pause: true,
  unpause: true,
  commit: true,
  remove: true,
  inspect: true,
  list: true,
  processes: true,
  events: true,
  resources: true,
  stats: true,
  exec: true,
  execStream: true,
  logs: true,
  setBoxEnv: true,
  dialPort: true,
  close: true,
} as const satisfies Record<MethodsOf<Runtime>, true>;

const IMAGES_METHODS = {
  exists: true,
  pull: true,
  list: true,
  remove: true,
  build: true,
} as const satisfies Record<MethodsOf<Images>, true>;

/** Every operation of the Runtime interface, images included. */
export const RUNTIME_OPS: readonly RuntimeOp[] = [
  ...(Object.keys(RUNTIME_METHODS) as MethodsOf<Runtime>[]),
  ...(Object.keys(IMAGES_METHODS) as MethodsOf<Images>[]).map((m) => `images.${m}` as const),
];

/**
 * @example
 * const rt = new CountingRuntime(new MemoryRuntime());
 * await assert.rejects(manager.create({ memory: -1 }));
 * assert.equal(rt.total(), 0, 'refused before any engine call');
 */
export class CountingRuntime implements Runtime {
  readonly images: Images;
  private tally = new Map<RuntimeOp, number>();

  constructor(readonly inner: Runtime) {
    const images = inner.images;
    this.images = {
      exists: (ref: string) => this.count('images.exists', () => images.exists(ref)),
      pull: (ref: string, opts?: { auth?: RegistryAuth; signal?: AbortSignal }): AsyncIterable<PullProgress> =>
        this.count('images.pull', () => images.pull(ref, opts)),
      list: () => this.count('images.list', () => images.list()),
      remove: (ref: string, opts?: { force?: boolean }) => this.count('images.remove', () => images.remove(ref, opts)),
      build: (context: Readable, tag: string, opts?: { labels?: Record<string, string> }): AsyncIterable<string> =>
        this.count('images.build', () => images.build(context, tag, opts)),
    };
  }

  get address(): string {
    return this.inner.address;
  }

  get capabilities(): RuntimeCapabilities {
    return this.inner.capabilities;
  }

  capabilitiesFor(ociRuntime: string | undefined): RuntimeCapabilities {
    return capabilitiesOf(this.inner, ociRuntime);
  }

  /** Calls of one operation so far. */
  count(op: RuntimeOp): number;
  /** Counts a call of `op`, then makes it. */
  count<T>(op: RuntimeOp, call: () => T): T;
  count<T>(op: RuntimeOp, call?: () => T): T | number {
    if (!call) return this.tally.get(op) ?? 0;
    this.tally.set(op, (this.tally.get(op) ?? 0) + 1);
    return call();
  }

  /** Calls per operation, only those made at least once: `{ create: 1, start: 1 }`. */
  counts(): Partial<Record<RuntimeOp, number>> {
    return Object.fromEntries([...this.tally].sort(([a], [b]) => a.localeCompare(b)));
  }

  /** All calls of every operation. */
  total(): number {
    let n = 0;
    for (const c of this.tally.values()) n += c;
    return n;
  }

  reset(): void {
    this.tally.clear();
  }

  ping() {
    return this.count('ping', () => this.inner.ping());
  }
  version() {
    return this.count('version', () => this.inner.version());
  }
  create(spec: ContainerSpec) {
    return this.count('create', () => this.inner.create(spec));
  }
  start(id: string) {
    return this.count('start', () => this.inner.start(id));
  }
  stop(id: string, opts?: { timeoutMs?: number }) {
    return this.count('stop', () => this.inner.stop(id, opts));
  }
  pause(id: string) {
    return this.count('pause', () => this.inner.pause(id));
  }
  unpause(id: string) {
    return this.count('unpause', () => this.inner.unpause(id));
  }
  commit(id: string, ref: string, opts?: { labels?: Record<string, string> }) {
    return this.count('commit', () => this.inner.commit(id, ref, opts));
  }
  remove(id: string, opts?: { force?: boolean }) {
    return this.count('remove', () => this.inner.remove(id, opts));
  }
  inspect(id: string) {
    return this.count('inspect', () => this.inner.inspect(id));
  }
  list(opts?: ContainerListOptions) {
    return this.count('list', () => this.inner.list(opts));
  }
  processes(id: string) {
    return this.count('processes', () => this.inner.processes(id));
  }
  events(opts: { labels?: Record<string, string>; signal: AbortSignal }): AsyncIterable<ContainerEvent> {
    return this.count('events', () => this.inner.events(opts));
  }
  resources() {
    return this.count('resources', () => this.inner.resources());
  }
  stats(id: string) {
    return this.count('stats', () => this.inner.stats(id));
  }
  exec(id: string, cmd: string[], opts?: ExecOptions) {
    return this.count('exec', () => this.inner.exec(id, cmd, opts));
  }
  execStream(id: string, cmd: string[], opts?: ExecStreamOptions) {
    return this.count('execStream', () => this.inner.execStream(id, cmd, opts));
  }
  logs(id: string, opts?: LogOptions) {
    return this.count('logs', () => this.inner.logs(id, opts));
  }
  setBoxEnv(id: string, env: Record<string, string>) {
    return this.count('setBoxEnv', () => this.inner.setBoxEnv(id, env));
  }
  dialPort(id: string, port: number, opts?: { signal?: AbortSignal }) {
    return this.count('dialPort', () => this.inner.dialPort(id, port, opts));
  }
  close() {
    return this.count('close', () => this.inner.close());
  }
}
