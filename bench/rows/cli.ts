/**
 * CLI rows: the built `sbx` command line (`node dist/cli/main.js`, as `npm i -g` installs it)
 * beside the `docker` CLI, each a whole process from spawn to exit, in one run (ratio = sbx p50 /
 * docker p50). `CLI Help` is `sbx --help` against `docker --help`; `CLI Exec` is `sbx exec ID --
 * true` against a server in this process against `docker exec CONTAINER true` into the same
 * box's container. Issue 25's goals here: `sbx --help` ≤ 150 ms, `sbx exec` ≤ 250 ms.
 *
 * Needs `npm run build` first (the rows say so when dist/ is missing) and the `docker` CLI.
 * Run alone: `npx tsx bench/rows/cli.ts [--quick]`.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pino from 'pino';
import { serve } from '../../src/server/index.js';
import type { ServerHandle } from '../../src/server/index.js';
import { BASE_IMAGE, BENCH_LABEL } from '../core/identity.js';
import { notRun } from '../core/result.js';
import type { RowResult } from '../core/result.js';
import { defineRow } from '../core/row.js';
import type { AnyRow, Named } from '../core/row.js';
import { runPairRows } from '../core/run-rows.js';
import type { RunContext } from '../core/run-rows.js';
import { runStandalone } from '../core/standalone.js';
import { PoolSubject } from '../subjects/pool.js';

const run = promisify(execFile);
const MAIN = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

/** A command line tool, run as a whole process per op. */
interface CliSubject extends Named {
  help(): Promise<void>;
  exec(): Promise<void>;
}

const ROWS: AnyRow<CliSubject>[] = [
  defineRow<CliSubject>({
    name: 'CLI Help',
    group: 'latency',
    note: 'sbx --help vs docker --help (process spawn to exit)',
    iterations: { quick: 10, full: 40 },
    op: (s) => s.help(),
  }),
  defineRow<CliSubject>({
    name: 'CLI Exec',
    group: 'latency',
    note: 'sbx exec ID -- true (against sbx serve) vs docker exec CONTAINER true (the same container)',
    iterations: { quick: 10, full: 40 },
    op: (s) => s.exec(),
  }),
];

export const CLI_ROW_NAMES: readonly string[] = ROWS.map((r) => r.name);

export async function runCliRows(
  ctx: RunContext,
  opts: { managerName: string; dataDir: string; runId: string; /** Row names to run (CLI_ROW_NAMES); default all. */ only?: ReadonlySet<string> },
): Promise<RowResult[]> {
  const rows = ROWS.filter((r) => !opts.only || opts.only.has(r.name));
  if (rows.length === 0) return [];
  if (!existsSync(MAIN)) return rows.map((r) => notRun(r, 'unavailable', `${MAIN} is missing: run \`npm run build\` first`));
  try {
    await run('docker', ['--version']);
  } catch (err) {
    return rows.map((r) => notRun(r, 'unavailable', `no docker CLI to compare with: ${(err as Error).message}`));
  }
  const lib = await PoolSubject.open('lib', {}, opts);
  let server: ServerHandle | undefined;
  try {
    server = await serve({ manager: lib.manager, port: 0, dataDir: opts.dataDir, logger: pino({ level: 'silent' }), print: () => undefined });
    const box = await lib.manager.create({ image: BASE_IMAGE, labels: { [BENCH_LABEL]: opts.runId } });
    const containerId = (await box.info()).containerId;
    // No caller settings and no login profile: the server and key of this run only.
    const env: NodeJS.ProcessEnv = {
      ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SBX_'))),
      SBX_URL: server.url,
      SBX_API_KEY: server.adminKey!,
      XDG_CONFIG_HOME: join(opts.dataDir, 'no-profile'),
    };
    const sbx: CliSubject = {
      name: 'sbx',
      help: async () => void (await run(process.execPath, [MAIN, '--help'], { env })),
      exec: async () => void (await run(process.execPath, [MAIN, 'exec', box.id, '--', 'true'], { env })),
    };
    const docker: CliSubject = {
      name: 'docker',
      help: async () => void (await run('docker', ['--help'])),
      exec: async () => void (await run('docker', ['exec', containerId, 'true'])),
    };
    return await runPairRows(rows, sbx, docker, ctx);
  } finally {
    await server?.close();
    await lib.close();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await runStandalone('cli', ['sbx', 'docker'], runCliRows);
