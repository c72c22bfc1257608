/**
 * Runtimes for tests of the egress policy's plumbing above the Runtime seam (the Manager, the
 * HTTP API, e2b), over any real runtime: one that enforces no egress whatever its engine does
 * (the not_available path), and one that says it does and only records what it is asked (no
 * packet is filtered: packet-level tests need a real enforcer).
 */
import type { ContainerSpec, EgressSpec, Runtime } from '../runtime/types.js';

/** `inner` with some members replaced (an undefined one removed); every other member is inner's, bound to it. */
function overlay(inner: Runtime, own: Partial<Record<keyof Runtime, unknown>>): Runtime {
  return new Proxy(inner, {
    get(rt, key) {
      if (Object.hasOwn(own, key)) return own[key as keyof Runtime];
      const value = Reflect.get(rt, key, rt) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(rt) : value;
    },
  });
}

/** `inner` without egress: `capabilities.egress` false, no setEgress or getEgress. */
export function withoutEgress(inner: Runtime): Runtime {
  return overlay(inner, { capabilities: { ...inner.capabilities, egress: false }, setEgress: undefined, getEgress: undefined });
}

/**
 * `runtime`: `inner` claiming to enforce egress. A create's `spec.egress` is taken off the spec
 * `inner` gets and kept by container id, as `setEgress` keeps its own; `getEgress` answers what
 * was kept. `calls` lists both in order.
 *
 * @example
 * const rec = new EgressRecorder(new DockerRuntime('local'));
 * const m = new Manager({ pools: [{ name: 'local', runtime: rec.runtime }] });
 */
export class EgressRecorder {
  readonly runtime: Runtime;
  readonly calls: Array<{ op: 'create' | 'setEgress'; id: string; egress: EgressSpec | undefined }> = [];
  private readonly kept = new Map<string, EgressSpec>();

  constructor(readonly inner: Runtime) {
    this.runtime = overlay(inner, {
      capabilities: { ...inner.capabilities, egress: true },
      create: async (spec: ContainerSpec) => {
        const { egress, ...rest } = spec;
        const id = await inner.create(rest);
        if (egress) this.kept.set(id, egress);
        this.calls.push({ op: 'create', id, egress });
        return id;
      },
      setEgress: async (id: string, egress: EgressSpec) => {
        // A container that is not there is not_found, as a real runtime's.
        await inner.inspect(id);
        this.kept.set(id, egress);
        this.calls.push({ op: 'setEgress', id, egress });
      },
      getEgress: async (id: string) => this.kept.get(id),
    });
  }

  /** The rules last given for a container (its create's or the last setEgress's). */
  egressOf(id: string): EgressSpec | undefined {
    return this.kept.get(id);
  }

  /** The setEgress calls made for a container. */
  setCalls(id: string): EgressSpec[] {
    return this.calls.filter((c) => c.op === 'setEgress' && c.id === id).map((c) => c.egress!);
  }
}
