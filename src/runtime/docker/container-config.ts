import type Docker from 'dockerode';
import type { ContainerSpec } from '../types.js';

/** The runtime's own mark of a container created with `dialAnyPort` (labels are what survives a restart). */
export const DIAL_ANY_PORT_LABEL = 'sbx.runtime.dial-any-port';

/** Maps an engine-neutral, validated ContainerSpec onto the Engine API's create body. */
export function toCreateOptions(spec: ContainerSpec): Docker.ContainerCreateOptions {
  const exposed: Record<string, object> = {};
  const bindings: Record<string, Array<{ HostIp: string; HostPort: string }>> = {};
  for (const p of spec.ports ?? []) {
    const key = `${p.containerPort}/${p.protocol ?? 'tcp'}`;
    exposed[key] = {};
    (bindings[key] ??= []).push({ HostIp: p.hostIp ?? '127.0.0.1', HostPort: p.hostPort ? String(p.hostPort) : '' });
  }
  const sec = spec.security ?? {};
  const hostConfig: Docker.HostConfig = {
    ...(spec.memory ? { Memory: spec.memory, MemorySwap: spec.memory } : {}),
    ...(spec.cpus ? { NanoCpus: Math.round(spec.cpus * 1e9) } : {}),
    ...(spec.pidsLimit ? { PidsLimit: spec.pidsLimit } : {}),
    ...(spec.ports?.length ? { PortBindings: bindings } : {}),
    // Mounts, not Binds: a Binds source that does not exist is silently created (as root) by
    // the engine, so a deleted workspace would come back as an empty directory.
    ...(spec.binds?.length
      ? { Mounts: spec.binds.map((b) => ({ Type: 'bind' as const, Source: b.hostPath, Target: b.containerPath, ReadOnly: b.readOnly ?? false })) }
      : {}),
    ...(spec.network ? { NetworkMode: spec.network } : {}),
    ...(sec.noNewPrivileges ? { SecurityOpt: ['no-new-privileges'] } : {}),
    ...(sec.capDrop?.length ? { CapDrop: sec.capDrop } : {}),
    ...(sec.capAdd?.length ? { CapAdd: sec.capAdd } : {}),
    ...(sec.readOnlyRootfs ? { ReadonlyRootfs: true } : {}),
    ...(sec.tmpfs ? { Tmpfs: sec.tmpfs } : {}),
    ...(spec.ociRuntime ? { Runtime: spec.ociRuntime } : {}),
    ...(spec.shmSize ? { ShmSize: spec.shmSize } : {}),
  };
  return {
    Image: spec.image,
    ...(spec.name ? { name: spec.name } : {}),
    ...(spec.cmd ? { Cmd: spec.cmd } : {}),
    ...(spec.entrypoint ? { Entrypoint: spec.entrypoint } : {}),
    ...(spec.env ? { Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`) } : {}),
    ...(spec.workDir ? { WorkingDir: spec.workDir } : {}),
    ...(spec.user ? { User: spec.user } : {}),
    Labels: { ...(spec.labels ?? {}), ...(spec.dialAnyPort ? { [DIAL_ANY_PORT_LABEL]: 'true' } : {}) },
    ...(spec.ports?.length ? { ExposedPorts: exposed } : {}),
    HostConfig: hostConfig,
  };
}
