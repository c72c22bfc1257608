/**
 * Security review of the gVisor tier: what a box on `ociRuntime: runsc` cannot do to the host,
 * checked from inside a hardened box (sbx's 'standard' profile: every capability dropped but the
 * few a box user needs, no-new-privileges, user 1000), as the box user and as root (an exec may
 * ask for user 0). Each check runs on a gVisor box and a runc box of the same profile: it must
 * hold on gVisor; what runc shows is written as a test diagnostic, so the review reads the
 * difference (where runc leaks host facts, e.g. /proc/modules and the host's kernel release).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { release } from 'node:os';
import { after, before, describe, test } from 'node:test';
import type { ExecResult } from '../runtime/types.js';
import { testEnv } from '../testing/env.js';
import { testManager } from '../testing/manager.js';
import type { Box } from './box.js';

const { manager, dispose } = testManager('gvsec', [
  { name: 'gvisor', addr: testEnv.engineAddr, ociRuntime: testEnv.gvisorRuntime },
  { name: 'runc', addr: testEnv.engineAddr },
]);
/** A host process whose command line no box may see: `sleep <marker>`. */
const marker = `86399.${process.pid}`;
const hostProcess = spawn('sleep', [marker], { stdio: 'ignore' });
const boxes: Record<'gvisor' | 'runc', Box> = {} as never;

before(async () => {
  await manager.start();
  [boxes.gvisor, boxes.runc] = await Promise.all([
    manager.create({ image: testEnv.baseImage, pool: 'gvisor' }),
    manager.create({ image: testEnv.baseImage, pool: 'runc' }),
  ]);
  assert.match((await boxes.gvisor.exec(['uname', '-r'])).stdout, /gvisor/, 'the gVisor pool runs its box on gVisor');
});

after(async () => {
  hostProcess.kill();
  await Promise.all(Object.values(boxes).map((b) => b.remove()));
  await dispose();
});

interface Check {
  /** What the check shows when it holds. */
  shows: string;
  script: string;
  user: '1000' | '0';
  /** Whether the result is the check holding (the escape failed, nothing of the host seen). */
  holds(r: ExecResult): boolean;
}

const CHECKS: Check[] = [
  {
    shows: "the box's /proc lists its own processes only: no host process (a host `sleep` with a marker) is there",
    script: 'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < $f; echo; done; ls -d /proc/[0-9]* | wc -l',
    user: '0',
    holds: (r) => r.exitCode === 0 && !r.stdout.includes(marker) && Number(r.stdout.trim().split('\n').at(-1)) < 20,
  },
  {
    shows: "uname -r names gVisor's kernel, not the host's",
    script: 'uname -r',
    user: '1000',
    holds: (r) => r.stdout.trim() !== release() && /gvisor/.test(r.stdout),
  },
  {
    // gVisor's /proc/modules is always empty; runc's is the host's own list (empty only on a host
    // kernel built without modules, as a Firecracker guest's may be).
    shows: "the box's /proc/modules lists no module, none of the host's",
    script: 'cat /proc/modules 2>/dev/null | cut -d" " -f1',
    user: '0',
    holds: (r) => r.stdout.trim() === '' && !hostModules().some((m) => r.stdout.split('\n').includes(m)),
  },
  {
    // busybox insmod reads the file and calls init_module(2) on it: the call itself is refused
    // (no module-loading syscall reaches the host kernel).
    shows: 'root cannot load a kernel module: init_module(2) fails (and modprobe finds nothing)',
    script: 'head -c 4096 /dev/urandom > /tmp/m.ko; insmod /tmp/m.ko; echo insmod=$?; modprobe -q dummy; echo modprobe=$?',
    user: '0',
    holds: (r) => /insmod=[1-9]/.test(r.stdout) && /modprobe=[1-9]/.test(r.stdout) && /not permitted|not implemented|Function not|Operation/i.test(r.stderr),
  },
  {
    shows: 'root cannot write to /proc/sys (sysctl, kernel.core_pattern, vm.drop_caches)',
    script:
      'echo "|/tmp/x" > /proc/sys/kernel/core_pattern; echo a=$?; echo 3 > /proc/sys/vm/drop_caches; echo b=$?; sysctl -w kernel.hostname=escaped; echo c=$?; cat /proc/sys/kernel/core_pattern',
    user: '0',
    holds: (r) => /a=[1-9]/.test(r.stdout) && /b=[1-9]/.test(r.stdout) && /c=[1-9]/.test(r.stdout) && !r.stdout.includes('|/tmp/x'),
  },
  {
    shows: 'mount fails, for root as for the box user (tmpfs, a bind of /, a remount of /proc)',
    script: 'mkdir -p /tmp/m; mount -t tmpfs none /tmp/m; echo a=$?; mount --bind / /tmp/m; echo b=$?; mount -o remount,rw /proc/sys; echo c=$?',
    user: '0',
    holds: (r) => /a=[1-9]/.test(r.stdout) && /b=[1-9]/.test(r.stdout) && /c=[1-9]/.test(r.stdout),
  },
  {
    shows: 'the box user cannot mount either',
    script: 'mkdir -p /tmp/u; mount -t tmpfs none /tmp/u; echo a=$?',
    user: '1000',
    holds: (r) => /a=[1-9]/.test(r.stdout),
  },
  {
    shows: 'root has no CAP_SYS_ADMIN, CAP_SYS_MODULE or CAP_SYS_PTRACE in its bounding set, and no-new-privileges is set',
    script: 'grep -E "CapBnd|NoNewPrivs" /proc/self/status',
    user: '0',
    holds: (r) => {
      const bnd = BigInt('0x' + (/CapBnd:\s+([0-9a-f]+)/.exec(r.stdout)?.[1] ?? 'ffffffffff'));
      return [21n, 16n, 19n].every((cap) => (bnd & (1n << cap)) === 0n) && /NoNewPrivs:\s+1/.test(r.stdout);
    },
  },
  {
    // A classic escape class: the magic SysRq key reboots or crashes the machine from a container
    // that can write the file; a raw disk device reads the host's filesystems under any mount.
    shows: 'root cannot trigger SysRq (/proc/sysrq-trigger) or make and read a raw disk device (mknod /dev/sda)',
    script:
      'echo h > /proc/sysrq-trigger; echo a=$?; mknod /tmp/sda b 8 0; echo b=$?; head -c 512 /tmp/sda > /dev/null; echo c=$?; ls /dev | grep -E "^(sd|vd|nvme|xvd|loop)" | wc -l',
    user: '0',
    holds: (r) => /a=[1-9]/.test(r.stdout) && /b=[1-9]/.test(r.stdout) && /c=[1-9]/.test(r.stdout) && r.stdout.trim().endsWith('\n0'),
  },
  {
    shows: "the kernel log (dmesg) is not the host's",
    script: 'dmesg 2>&1 | head -5',
    user: '0',
    holds: (r) => !hostLogLine() || !r.stdout.includes(hostLogLine()!),
  },
];

/** The names of the host's loaded modules (none on a kernel without modules: the check then shows nothing). */
function hostModules(): string[] {
  try {
    return readFileSync('/proc/modules', 'utf8')
      .split('\n')
      .map((l) => l.split(' ')[0]!)
      .filter(Boolean);
  } catch {
    return [];
  }
}

/** The host kernel's first log line, as /proc/version words it (what a leaked dmesg would start with). */
function hostLogLine(): string | undefined {
  return /^Linux version \S+/.exec(readFileSync('/proc/version', 'utf8'))?.[0];
}

describe('a gVisor box cannot reach the host (the same checks on runc as diagnostics)', () => {
  for (const check of CHECKS) {
    test(check.shows, async (t) => {
      const run = (pool: 'gvisor' | 'runc') => boxes[pool].exec(['sh', '-c', check.script], { user: check.user, timeoutMs: 30_000 });
      const [gv, rc] = await Promise.all([run('gvisor'), run('runc')]);
      const brief = (r: ExecResult) => JSON.stringify({ exit: r.exitCode, stdout: r.stdout.slice(0, 300), stderr: r.stderr.slice(0, 300) });
      t.diagnostic(`gVisor: ${brief(gv)}`);
      t.diagnostic(`runc (${check.holds(rc) ? 'holds too' : 'DIFFERS: does not hold'}): ${brief(rc)}`);
      assert.ok(check.holds(gv), `on gVisor, as user ${check.user}: ${brief(gv)}`);
    });
  }
});
