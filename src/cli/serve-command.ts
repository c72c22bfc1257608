/**
 * `sbx serve`'s flags and help. The server itself (serve.ts and everything it loads) is imported
 * only when the command runs, so that `sbx --help` and the commands that talk to a server start
 * fast. src/cli/main.ts adds it with `program.addCommand(serveCommand())`.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { LOG_FORMATS, LOG_LEVELS } from '../util/log-settings.js';
import type { ServeFlags } from './serve.js';
import { duration } from './remote.js';
import { MAX_PORT, isPort } from '../runtime/ports.js';

export { duration };

export function port(value: string): number {
  const n = Number(value);
  if (!isPort(n, { bind: true })) throw new InvalidArgumentError(`expected a port number 0-${MAX_PORT}`);
  return n;
}

export function bytes(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('expected a number of bytes');
  return n;
}

export function serveCommand(): Command {
  return new Command('serve')
    .description(
      'Serve the HTTP API (boxes, exec, files, workspaces, pools, keys), the web console (/console/) and the e2b-compatible endpoints (/e2b/api, /e2b/envd; templates under server.e2b in the config file) until SIGINT/SIGTERM; the first start prints an admin key',
    )
    .option('--host <addr>', 'address to bind (default $SBX_HOST or 127.0.0.1; other addresses need TLS)')
    .option('--port <n>', 'port (default $SBX_PORT or 7070)', port)
    .option('-c, --config <file>', 'YAML config file (default $SBX_CONFIG)')
    .option('--data-dir <dir>', 'data directory: keys, box-token secret, workspaces (default $SBX_DATA_DIR or ~/.sbx)')
    .option('--tls-cert <file>', 'PEM certificate (or $SBX_TLS_CERT)')
    .option('--tls-key <file>', 'PEM private key (or $SBX_TLS_KEY)')
    .option('--allow-insecure', 'plain HTTP on a non-loopback address (behind a TLS proxy)')
    .option('--grpc-port <n>', 'serve the gRPC heartbeat on this port (or $SBX_GRPC_PORT; off by default)', port)
    .option('--grpc-host <addr>', 'address for the gRPC heartbeat (default the --host; boxes reach the host on the bridge gateway)')
    .option('--grpc-advertise <host:port>', 'what boxes get as SBX_GRPC_ADDR (or $SBX_GRPC_ADVERTISE; default the gRPC address when a box can dial it)')
    .option('--shutdown-grace <duration>', 'grace for in-flight work on shutdown, e.g. 10s (or $SBX_SHUTDOWN_GRACE)', duration)
    .option('--body-limit <bytes>', 'largest JSON body (or $SBX_BODY_LIMIT; default 1048576)', bytes)
    .option('--exec-output-budget <bytes>', 'buffered exec output held at once, all requests together (or $SBX_EXEC_OUTPUT_BUDGET; default 268435456)', bytes)
    .option('--public-url <url>', 'base URL clients reach this server at, for box.proxy() URLs (or $SBX_PUBLIC_URL; default the listening URL)')
    .option('--proxy-domain <domain>', 'host-based proxy: <port>-<id>.<domain> reaches that port of that box at / (or $SBX_PROXY_DOMAIN; needs wildcard DNS)')
    .addOption(new Option('--log-level <level>', 'least severe log lines written (or $SBX_LOG_LEVEL, server.logLevel; default info)').choices(LOG_LEVELS))
    .addOption(
      new Option(
        '--log-format <format>',
        'auto: readable lines on a terminal, one JSON object a line otherwise (or $SBX_LOG_FORMAT, server.logFormat)',
      ).choices(LOG_FORMATS),
    )
    .addHelpText(
      'after',
      `
Settings come from flags, then SBX_* variables, then the config file's server: section (keys as the
flags without --, in camelCase: logLevel, shutdownGrace, bodyLimit, …), then defaults.

Examples:
  sbx serve                                    # 127.0.0.1:7070; the first start prints an admin key
  sbx serve --log-level debug
  SBX_LOG_FORMAT=json sbx serve | tee sbx.log
  sbx serve --host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem --public-url https://sbx.example.com`,
    )
    .action(async (flags: ServeFlags, cmd: Command) => {
      const { runServe } = await import('./serve.js');
      await runServe(flags, cmd);
    });
}
