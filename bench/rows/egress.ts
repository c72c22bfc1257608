/**
 * Egress rows (issue 28, docs/network.md): what an egress policy costs, as ratios in one run on
 * one engine, against the fake internet (scripts/fakenet.sh).
 *
 * - `Egress HTTP`: a box with a 100-entry allowlist fetches from a test host against a box with
 *   `all` fetching the same: one op is 10 sequential HTTP/1.0 GETs (a new TCP connection each,
 *   busybox wget, by address) run in one exec, so requests per second = 10 000 / p50 ms. Goal:
 *   ≤ 1.05× latency (which is ≥ 0.95× throughput).
 * - `Egress Create`: create → first exec result of a box with a 100-entry allowlist against one
 *   with none (`all`). Goal: ≤ 1.10×.
 *
 * Each row's note says whether it met its goal. Run alone: `npx tsx bench/rows/egress.ts [--quick]`,
 * or as part of `npm run bench` (`--only Egress`).
 */
import { fileURLToPath } from 'node:url';
import type { Box } from '../../src/sandbox/box.js';
import type { EgressPolicy } from '../../src/sandbox/egress-policy.js';
import { Manager } from '../../src/sandbox/manager.js';
import { fakenet } from '../../src/testing/fakenet.js';
import type { FakeNet } from '../../src/testing/fakenet.js';
import { BASE_IMAGE, BENCH_LABEL } from '../core/identity.js';
import type { RowResult } from '../core/result.js';
import { defineRow } from '../core/row.js';
import type { AnyRow } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import type { RunContext } from '../core/run-rows.js';
import { runStandalone } from '../core/standalone.js';

export const EGRESS_ROW_NAMES = ['Egress HTTP', 'Egress Create'];
const REQUESTS_PER_OP = 10;
const GOALS: Record<string, number> = { 'Egress HTTP': 1.05, 'Egress Create': 1.1 };

/** 100 entries: the test host's address among 99 others that match nothing here (names and blocks). */
function allowlist(net: FakeNet): EgressPolicy {
  const others = Array.from({ length: 99 }, (_, i) => (i % 2 ? `host${i}.bench.test` : `203.0.113.${i}`));
  return { allow: [net.ok.address, ...others] };
}

/** One side: boxes of one policy on a Manager both sides share. */
class EgressSide {
  constructor(
    readonly name: string,
    private readonly manager: Manager,
    private readonly egress: EgressPolicy,
    private readonly runId: string,
  ) {}
  create(): Promise<Box> {
    return this.manager.create({ image: BASE_IMAGE, labels: { [BENCH_LABEL]: this.runId }, networkPolicy: { egress: this.egress } });
  }
}

async function expectOk(box: Box, script: string): Promise<void> {
  const r = await box.exec(['sh', '-c', script]);
  if (r.exitCode !== 0) throw new Error(`${script}: exit ${r.exitCode}: ${r.stderr.toString()}`);
}

export function egressRows(net: FakeNet): AnyRow<EgressSide>[] {
  const fetch = `for i in $(seq ${REQUESTS_PER_OP}); do wget -q -O /dev/null http://${net.ok.address}/ || exit 1; done`;
  return [
    defineRow<EgressSide, { box: Box }, undefined>({
      name: 'Egress HTTP',
      group: 'latency',
      note: `${REQUESTS_PER_OP} sequential GETs from the box to a test host (allowlist of 100 vs all)`,
      iterations: { quick: 10, full: 40 },
      async setup(s) {
        const box = await s.create();
        await expectOk(box, fetch);
        return { box };
      },
      async op(_s, shared) {
        await expectOk(shared.box, fetch);
      },
      async teardown(_s, shared) {
        await shared.box.remove();
      },
    }),
    defineRow<EgressSide, undefined, { box?: Box }>({
      name: 'Egress Create',
      group: 'latency',
      note: 'create → first exec result (allowlist of 100 vs none)',
      iterations: { quick: 8, full: 30 },
      before: async () => ({}),
      async op(s, _shared, item) {
        item.box = await s.create();
        await expectOk(item.box, 'true');
      },
      async after(_s, _shared, item) {
        await item.box?.remove();
      },
    }),
  ];
}

const perSecond = (p50Ms: number): string => ((REQUESTS_PER_OP * 1000) / p50Ms).toFixed(0);

export async function runEgressRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  const net = await fakenet();
  const manager = new Manager({
    name: opts.managerName,
    pools: [{ name: 'local', addr: 'local', maxPerUser: 0, runtimeOptions: { egressDns: [net.dns] } }],
    dataDir: opts.dataDir,
    cleanupIntervalMs: 0,
  });
  await manager.start();
  try {
    const filtered = new EgressSide('allowlist', manager, allowlist(net), opts.runId);
    const open = new EgressSide('all', manager, 'all', opts.runId);
    const rows = egressRows(net).filter((r) => !opts.only || opts.only.has(r.name));
    const results = await runPairRows(rows, filtered, open, ctx);
    for (const r of results) {
      const goal = GOALS[r.name];
      const ratio = r.ratio;
      if (goal === undefined || ratio === null || r.sides.length !== 2) continue;
      const [a, b] = r.sides;
      const rps = r.name === 'Egress HTTP' ? ` (${perSecond(a.stats.p50)} vs ${perSecond(b.stats.p50)} requests/s)` : '';
      r.note = `${r.note ?? ''}; goal ≤ ${goal.toFixed(2)}×: ${ratio <= goal ? 'met' : 'not met'}${rps}`;
    }
    return results;
  } finally {
    await manager.close();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await runStandalone('eg', ['allowlist', 'all'], runEgressRows);
