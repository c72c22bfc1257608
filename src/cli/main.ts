#!/usr/bin/env node
/**
 * The `sbx` command line: `sbx serve` (the HTTP API), `sbx run` (one command in a fresh box on
 * the local engine) and `sbx pools`; the API-backed commands come with the SDK.
 */
import { Command } from 'commander';
import { Manager } from '../sandbox/manager.js';
import { loadConfig } from '../sandbox/config.js';
import { SbxError } from '../errors.js';
import { serveCommand } from './serve.js';

const program = new Command()
  .name('sbx')
  .description('Isolated execution environments ("boxes") on pools of container runtimes.')
  .option('-c, --config <file>', 'YAML config file (default: $SBX_CONFIG, else one pool `local` on the local Docker Engine)')
  .showHelpAfterError();

program
  .command('run')
  .description("Create a box, run one command in it, print its output, remove the box; exits with the command's exit code.")
  .argument('<image>', 'image to create the box from, e.g. sbx-base:latest')
  .argument('<cmd...>', 'command and arguments (put -- before options meant for the command)')
  .option('-p, --pool <name>', 'pool to create the box on (default: the first pool)')
  .option('-t, --timeout <ms>', 'kill the command after this many milliseconds', (v) => Number(v))
  .option('-e, --env <KEY=VALUE...>', 'environment variables for the box')
  .action(async (image: string, cmd: string[], opts: { pool?: string; timeout?: number; env?: string[] }) => {
    const env = Object.fromEntries((opts.env ?? []).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
    const manager = new Manager(loadConfig(program.opts<{ config?: string }>().config ? { file: program.opts<{ config: string }>().config } : {}));
    try {
      await using box = await manager.create({ image, env, policy: 'oneshot', ...(opts.pool ? { pool: opts.pool } : {}) });
      const r = await box.exec(cmd, opts.timeout ? { timeoutMs: opts.timeout } : {});
      process.stdout.write(r.stdout);
      process.stderr.write(r.stderr);
      if (r.timedOut) process.stderr.write(`sbx: timed out after ${opts.timeout} ms; the command was killed\n`);
      process.exitCode = r.exitCode;
    } finally {
      await manager.close();
    }
  });

program
  .command('pools')
  .description('List the configured pools and whether their runtimes answer.')
  .action(async () => {
    const manager = new Manager(loadConfig(program.opts<{ config?: string }>().config ? { file: program.opts<{ config: string }>().config } : {}));
    await manager.start();
    for (const p of await manager.pools()) console.log(`${p.name}\t${p.addr}\t${p.connected ? 'connected' : 'unreachable'}\tboxes=${p.boxes}`);
    await manager.close();
  });

program.addCommand(serveCommand());

program.parseAsync().catch((err: unknown) => {
  if (err instanceof SbxError) console.error(`sbx: ${err.code}: ${err.message}`);
  else console.error(`sbx: ${(err as Error).message ?? String(err)}`);
  process.exitCode = 1;
});
