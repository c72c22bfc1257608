/**
 * Runs in its own process (forked by memory/exec-probe.ts): the peak RSS of one buffered exec
 * whose output is far past its cap, so the number is the exec path's and nothing else's.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ExecMemoryArgs, ExecMemoryReport } from './protocol.js';

const args = JSON.parse(process.argv[2] ?? '{}') as ExecMemoryArgs;
const gc = (globalThis as { gc?: () => void }).gc;

async function settle(): Promise<{ rss: number; heapUsed: number }> {
  gc?.();
  await sleep(50);
  gc?.();
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed };
}

/** VmHWM, the kernel's peak RSS of this process, in bytes. */
function peakRss(): number {
  const line = readFileSync('/proc/self/status', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmHWM:'));
  return Number(line?.split(/\s+/)[1] ?? 0) * 1024;
}

/** Resets VmHWM to the current RSS (Linux 4.0+), so the peak is this exec's alone. */
function resetPeak(): boolean {
  try {
    writeFileSync('/proc/self/clear_refs', '5');
    return true;
  } catch {
    return false;
  }
}

const alone = await settle();
const { DockerConnection } = await import('../../src/runtime/docker/connection.js');
const { parseRuntimeAddress } = await import('../../src/runtime/docker/address.js');
const { runBuffered } = await import('../../src/runtime/docker/exec.js');
const { BASE_IMAGE, BENCH_CONTAINER_LABEL } = await import('../core/identity.js');

// The engine path itself (exec.ts), on a box made straight through the engine: whatever the
// runtime puts around it (the in-box agent) stays out of the number.
const conn = new DockerConnection(parseRuntimeAddress('local'));
const container = await conn.docker.createContainer({ Image: BASE_IMAGE, Labels: { [BENCH_CONTAINER_LABEL]: args.runId } });
const box = container.id;
// Text, not zeros: lines of 'a' as a chatty build log would print them.
const print = (bytes: number) => ['sh', '-c', `yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c ${bytes}`];
try {
  await container.start();
  // Warm every path (modules, JIT, pooled sockets) so the peak is what the output costs.
  await runBuffered(conn, box, print(4 * 1024 * 1024), { maxOutputBytes: 1024 * 1024 });
  const before = await settle();
  // Without clear_refs, sample: coarser, and it may miss a short spike.
  let sampled = before.rss;
  const exact = resetPeak();
  const sampler = exact ? undefined : setInterval(() => (sampled = Math.max(sampled, process.memoryUsage().rss)), 5);
  const t0 = performance.now();
  const result = await runBuffered(conn, box, print(args.bytes), { maxOutputBytes: args.capBytes });
  const execMs = performance.now() - t0;
  if (sampler) clearInterval(sampler);
  const peak = exact ? peakRss() : sampled;
  const holding = await settle();
  const report: ExecMemoryReport = {
    aloneRss: alone.rss,
    beforeRss: before.rss,
    peakRss: peak,
    exactPeak: exact,
    heldRss: holding.rss,
    heldHeapUsed: holding.heapUsed,
    stdoutChars: result.stdout.length,
    truncated: result.truncated,
    exitCode: result.exitCode,
    bytes: args.bytes,
    capBytes: args.capBytes,
    execMs,
    gc: gc !== undefined,
  };
  // Forked: to the parent; run by hand: to stdout.
  if (process.send) process.send(report);
  else process.stdout.write(`${JSON.stringify(report)}\n`);
} finally {
  await container.remove({ force: true });
  conn.close();
}
