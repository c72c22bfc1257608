/**
 * Remote nodes. On the node's machine: `sbx node join` (spend a join token) and `sbx node` (serve
 * this machine's engine to the Manager it joined). Against a server (admin): `sbx nodes ls|token|
 * drain|undrain|revoke`. docs/nodes.md has the whole story.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import type { JoinOptions } from '../node/join.js';
import { formatBytes, paint, printJson, relativeTime, table } from './output.js';
import { CONNECTION_HELP, REMOTE_EXIT, duration, positiveInt, remoteAction, withConnection } from './remote.js';

/** The node's own data directory: `--data-dir`, else $SBX_NODE_DIR, else ~/.sbx-node. */
function nodeDir(flag: string | undefined): string {
  return flag ?? process.env['SBX_NODE_DIR'] ?? join(homedir(), '.sbx-node');
}

/** `sbx node join`'s flags: the join's options but the URL (an argument) and the data dir (defaulted here). */
type JoinFlags = Omit<JoinOptions, 'managerUrl' | 'dataDir'> & { dataDir?: string };

export function nodeCommands(program: Command): void {
  const node = program
    .command('node')
    .description("Serve this machine's Docker Engine to the Manager it joined (run 'sbx node join' first)")
    .option('--data-dir <dir>', 'where the node keeps its identity and membership (default: $SBX_NODE_DIR or ~/.sbx-node)')
    .option('--engine <addr>', 'the engine to serve (default: local)')
    .option('--listen <host:port>', 'direct mode: listen here instead of the address given at join')
    .addHelpText(
      'after',
      `
The node holds one mutual-TLS connection with its Manager: it listens for it (direct) or dials it
(--reverse at join, for machines behind NAT). Only the pinned Manager gets in; the Manager reaches
only the containers sbx made on this node (docs/nodes.md).

Examples:
  sbx node join http://10.0.0.1:7070 --token sbxjoin_… --name gpu-1 --listen 10.0.0.2:7443
  sbx node`,
    )
    .action(async (f: { dataDir?: string; engine?: string; listen?: string }) => {
      const [{ default: pino }, { startNode }, { logDestination }] = await Promise.all([
        import('pino'),
        import('../node/server.js'),
        import('./log-format.js'),
      ]);
      const log = pino({ name: 'sbx-node', level: process.env['SBX_LOG_LEVEL'] ?? 'info' }, logDestination('auto', process.stderr));
      const running = await startNode({
        dataDir: nodeDir(f.dataDir),
        log,
        ...(f.engine ? { engineAddr: f.engine } : {}),
        ...(f.listen ? { listen: f.listen } : {}),
      });
      const where = running.address ? `listening on ${running.address.host}:${running.address.port}` : 'dialling its Manager';
      process.stderr.write(`sbx node '${running.name}' (${running.mode}) ${where}\n`);
      await new Promise<void>((resolve) => {
        const stop = () => void running.close().finally(resolve);
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
      });
    });

  node
    .command('join')
    .description('Join this machine to a Manager with a one-time join token (from `sbx nodes token`)')
    .argument('<manager-url>', "the Manager's API, e.g. http://10.0.0.1:7070")
    .requiredOption('--token <token>', 'the one-time join token')
    .requiredOption('--name <name>', 'this node’s name (a-z, 0-9, -)')
    .option('--listen <host:port>', 'direct mode: where this node listens for the Manager')
    .option('--advertise <host:port>', 'direct mode: the address the Manager dials, when not --listen')
    .option('--reverse', 'reverse mode: this node dials the Manager (behind NAT); the Manager needs nodes.listen')
    .option('--manager-node-address <host:port>', "reverse mode: the Manager's node listener, when not the API's host")
    .option('--manager-fingerprint <sha256:…>', "refuse a Manager whose certificate is not this one (a join over plain HTTP can't be redirected)")
    .option('--max-boxes <n>', 'at most this many boxes on this node', positiveInt)
    .option('--data-dir <dir>', 'where the node keeps its identity and membership (default: $SBX_NODE_DIR or ~/.sbx-node)')
    .action(async (managerUrl: string, f: JoinFlags) => {
      const { joinManager } = await import('../node/join.js');
      // A call to a server, failing as the server commands do (status 1, the code and message).
      const state = await joinManager({ ...f, managerUrl, dataDir: nodeDir(f.dataDir) }).catch((err: Error & { code?: string }) => {
        process.stderr.write(`sbx: ${err.code ? `${err.code}: ` : ''}${err.message}\n`);
        process.exitCode = REMOTE_EXIT.sbx;
      });
      if (!state) return;
      process.stdout.write(
        `joined ${state.managerUrl} as '${state.name}' (${state.mode}); Manager certificate ${state.managerFingerprint}\nnow run: sbx node\n`,
      );
    });

  const nodes = program.command('nodes').description("The server's remote nodes (admin)");
  withConnection(nodes.command('ls').alias('list').description('List the nodes: state, draining, the machine each runs on'))
    .option('--json', 'print them as a JSON array')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx nodes ls\n  sbx nodes ls --json | jq -r '.[] | select(.state != "online") | .name'`)
    .action(
      remoteAction(async ({ sbx }, f: { json?: boolean }) => {
        const list = await sbx.nodes.list();
        if (f.json) return printJson(list);
        process.stdout.write(
          table(
            ['NAME', 'STATE', 'MODE', 'ADDRESS', 'ENGINE', 'CPUS', 'MEMORY', 'SEEN'],
            list.map((n) => [
              n.name,
              paint(n.draining && n.state === 'online' ? 'online, draining' : n.state, n.state === 'online' ? 'green' : 'red'),
              n.mode,
              n.address ?? '-',
              n.facts?.engineVersion ? `${n.facts.engineVersion} ${n.facts.os ?? ''}/${n.facts.arch ?? ''}` : '-',
              n.facts?.cpus !== undefined ? String(n.facts.cpus) : '-',
              n.facts?.memoryBytes !== undefined ? formatBytes(n.facts.memoryBytes) : '-',
              n.lastSeenAt ? relativeTime(n.lastSeenAt) : '-',
            ]),
          ),
        );
      }),
    );
  withConnection(nodes.command('token').description('Make a one-time join token for `sbx node join` (shown once)'))
    .option('--ttl <duration>', 'how long it is valid (default 1h)', duration)
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx nodes token --ttl 10m`)
    .action(
      remoteAction(async ({ sbx, conn }, f: { ttl?: number }) => {
        const made = await sbx.nodes.createJoinToken(f.ttl !== undefined ? { ttlMs: f.ttl } : {});
        process.stdout.write(`${made.token}\n`);
        process.stderr.write(`valid until ${made.expiresAt}; on the node: sbx node join ${conn.url} --token ${made.token} --name NAME --listen HOST:PORT\n`);
      }),
    );
  for (const [cmd, draining, what] of [
    ['drain', true, 'Stop placing new boxes on a node; its boxes keep running'],
    ['undrain', false, 'Place new boxes on a drained node again'],
  ] as const) {
    withConnection(nodes.command(cmd).description(what).argument('<name>', 'the node'))
      .addHelpText('after', CONNECTION_HELP)
      .action(
        remoteAction(async ({ sbx }, name: string) => {
          const n = await sbx.nodes.drain(name, { draining });
          process.stdout.write(`${n.name}: ${n.draining ? 'draining' : 'taking new boxes'}\n`);
        }),
      );
  }
  withConnection(nodes.command('revoke').description('Refuse a node from now on: its connection ends at once').argument('<name>', 'the node'))
    .addHelpText('after', CONNECTION_HELP)
    .action(
      remoteAction(async ({ sbx }, name: string) => {
        const n = await sbx.nodes.revoke(name);
        process.stdout.write(`${n.name}: revoked\n`);
      }),
    );
}
