/**
 * What the host says about processes and containers (Linux procfs and cgroupfs): the density
 * child reads memory where the kernel counts it, not from the engine's stats.
 */
import { readFileSync, readdirSync } from 'node:fs';

const KiB = 1024;

/** A field of /proc/meminfo, in bytes. */
export function meminfo(field: 'MemAvailable' | 'MemTotal'): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/meminfo', 'utf8'));
  if (!m) throw new Error(`/proc/meminfo has no ${field}`);
  return Number(m[1]) * KiB;
}

/** The kernel's tasks (threads) now: the total of /proc/loadavg's fourth field ("running/total"). */
export function kernelTasks(): number {
  const total = /\d+\/(\d+)/.exec(readFileSync('/proc/loadavg', 'utf8'))?.[1];
  if (!total) throw new Error('/proc/loadavg has no task count');
  return Number(total);
}

/** The largest pid the kernel hands out (kernel.pid_max): every task, thread or process, takes one. */
export function pidMax(): number {
  return Number(readFileSync('/proc/sys/kernel/pid_max', 'utf8').trim());
}

/** RSS and PSS of a process (smaps_rollup, Linux 4.14+), in bytes; undefined when it is gone. */
export function rollup(pid: number): { rss: number; pss: number } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) * KiB;
    return { rss: field('Rss'), pss: field('Pss') };
  } catch {
    return undefined;
  }
}

/** The parent of a process (field 4 of /proc/<pid>/stat). */
export function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return undefined;
  }
}

/**
 * The memory a process's cgroup holds, in bytes: cgroup v2's memory.current, or v1's
 * memory.usage_in_bytes of the memory controller's group.
 */
export function cgroupMemory(pid: number): number | undefined {
  try {
    for (const line of readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
      const [, controllers, path] = line.split(':');
      if (controllers === '' && path) return Number(readFileSync(`/sys/fs/cgroup${path}/memory.current`, 'utf8'));
      if (controllers?.split(',').includes('memory') && path) return Number(readFileSync(`/sys/fs/cgroup/memory${path}/memory.usage_in_bytes`, 'utf8'));
    }
  } catch {
    return undefined;
  }
  return undefined;
}

/** RSS of every process whose command name is one of `names`, summed, in bytes. */
export function rssOfCommands(names: readonly string[]): number {
  let total = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (!names.includes(readFileSync(`/proc/${entry}/comm`, 'utf8').trim())) continue;
      total += rollup(Number(entry))?.rss ?? 0;
    } catch {
      // Gone meanwhile.
    }
  }
  return total;
}

/** One process as the host's process table has it. */
export interface HostProcess {
  pid: number;
  ppid: number;
  /** The command name (/proc/<pid>/comm). */
  comm: string;
  /** The command line, its arguments joined by spaces. */
  cmdline: string;
}

/** Every process of the host now (those that end while read are left out). */
export function processTable(): HostProcess[] {
  const table: HostProcess[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    try {
      const ppid = parentOf(pid);
      if (ppid === undefined) continue;
      const comm = readFileSync(`/proc/${entry}/comm`, 'utf8').trim();
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ').trim();
      table.push({ pid, ppid, comm, cmdline });
    } catch {
      // Gone meanwhile.
    }
  }
  return table;
}

/**
 * The host processes of each container: those whose command line names its id (the engine's
 * shim, and for gVisor runsc's sandbox and gofer) and all their descendants (runc's box
 * processes; gVisor's platform stubs). Ids are matched whole, so a prefix of another id does not match.
 */
export function containerProcesses(table: readonly HostProcess[], containerIds: readonly string[]): Map<string, HostProcess[]> {
  const children = new Map<number, HostProcess[]>();
  for (const p of table) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const out = new Map<string, HostProcess[]>();
  for (const id of containerIds) {
    const named = new RegExp(`(^|[^0-9a-f])${id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}($|[^0-9a-f])`);
    const found = new Map<number, HostProcess>();
    const todo = table.filter((p) => named.test(p.cmdline));
    while (todo.length > 0) {
      const p = todo.pop()!;
      if (found.has(p.pid)) continue;
      found.set(p.pid, p);
      todo.push(...(children.get(p.pid) ?? []));
    }
    out.set(
      id,
      [...found.values()].sort((a, b) => a.pid - b.pid),
    );
  }
  return out;
}

/**
 * What a process is, for a breakdown by kind: its program's file name (runsc re-executes itself, so
 * its sandbox and gofer are all `exe` by command name but `runsc-sandbox`/`runsc-gofer` by argv[0]);
 * `stub` for one with no command line (gVisor's systrap stubs, forked from the sandbox).
 */
export function processLabel(p: Pick<HostProcess, 'comm' | 'cmdline'>): string {
  const argv0 = p.cmdline.split(' ')[0] ?? '';
  return argv0 ? argv0.slice(argv0.lastIndexOf('/') + 1) : 'stub';
}
