/**
 * A box command for the memory-releasing pause's tests: a counter that holds a random nonce only
 * in its memory and writes nonce and count to /tmp/report when sent SIGUSR1 (a restarted process
 * would draw another nonce and count from 0). Its pid is in /tmp/counter.pid.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import type { LocalBox } from '../sandbox/box.js';

export const MEMORY_COUNTER = [
  'sh',
  '-c',
  'n=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d " \\n"); i=0; trap \'echo "$n $i" > /tmp/report.new && mv /tmp/report.new /tmp/report\' USR1; echo $$ > /tmp/counter.pid; while :; do i=$((i+1)); sleep 0.05; done',
];

/** Asks the counter for its nonce and count (through an exec, which is a use: a released box is restored first). */
export async function counterReport(box: LocalBox): Promise<{ nonce: string; count: number }> {
  const r = await box.exec([
    'sh',
    '-c',
    'until [ -s /tmp/counter.pid ]; do sleep 0.01; done; rm -f /tmp/report; kill -USR1 $(cat /tmp/counter.pid); until [ -s /tmp/report ]; do sleep 0.01; done; cat /tmp/report',
  ]);
  assert.equal(r.exitCode, 0, r.stderr);
  const [nonce, count] = r.stdout.trim().split(' ');
  assert.match(nonce ?? '', /^[0-9a-f]{24}$/);
  return { nonce: nonce!, count: Number(count) };
}

export /** The resident memory (KiB) of the host's processes that belong to the container: gVisor's sandbox and gofer and containerd's shim carry its id. */
function hostProcessesOf(containerId: string): { count: number; rssKiB: number } {
  const out = execFileSync('ps', ['-eo', 'rss=,args='], { encoding: 'utf8', maxBuffer: 16 << 20 });
  let count = 0;
  let rssKiB = 0;
  for (const line of out.split('\n')) {
    if (!line.includes(containerId)) continue;
    count++;
    rssKiB += Number(line.trim().split(/\s+/)[0]) || 0;
  }
  return { count, rssKiB };
}
