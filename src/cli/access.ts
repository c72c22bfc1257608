/**
 * Reaching into a box and its lifetime, against a server: `url` (the proxy URL of a port, or a
 * signed one to share), `vnc` (the desktop's viewer URL), `renew` (the max lifetime from now);
 * and the key itself: `whoami`, `logout`.
 */
import type { Command } from 'commander';
import { fields, formatDuration, printJson } from './output.js';
import {
  CONNECTION_HELP,
  DEFAULT_PROFILE,
  REMOTE_EXIT,
  connectedAction,
  duration,
  readProfiles,
  remoteAction,
  withConnection,
  writeProfiles,
} from './remote.js';
import { InvalidArgumentError } from 'commander';
import { MAX_PORT, isPort } from '../runtime/ports.js';

function portNumber(value: string): number {
  const n = Number(value);
  if (!isPort(n)) throw new InvalidArgumentError(`expected a port number 1-${MAX_PORT}`);
  return n;
}

export function accessCommands(program: Command): void {
  withConnection(
    program
      .command('url')
      .description("A URL on the server's proxy for a port of a box; --share makes one with a signed token that works without a key, for a browser")
      .argument('<id>', 'box id (or a unique prefix of one)')
      .argument('<port>', 'port inside the box', portNumber)
      .argument('[path]', 'path on that port', '/'),
  )
    .option('--share', 'sign the URL: anyone holding it may open that port until it expires')
    .option('--ttl <duration>', 'how long a shared URL works: 15m (default), at most 24h', duration)
    .addHelpText(
      'after',
      `
Without --share the URL needs the API key (Authorization: Bearer …), as every call does.
${CONNECTION_HELP}

Examples:
  sbx url sb-1a2b3c 8080
  curl -H "Authorization: Bearer $SBX_API_KEY" "$(sbx url sb-1a2b3c 8080 /health)"
  sbx url --share --ttl 1h sb-1a2b3c 3000`,
    )
    .action(
      remoteAction(async ({ sbx }, id: string, port: number, path: string, f: { share?: boolean; ttl?: number }) => {
        if (f.ttl !== undefined && !f.share) program.error('error: --ttl is for --share URLs', { exitCode: REMOTE_EXIT.usage });
        const box = await sbx.get(id);
        const url = await box.proxy(port, path, f.share ? { signed: true, ...(f.ttl !== undefined ? { ttlMs: f.ttl } : {}) } : {});
        process.stdout.write(url + '\n');
      }),
    );

  withConnection(
    program
      .command('vnc')
      .description('The URL of the VNC viewer page of a box made with --vnc, with a token a browser can open')
      .argument('<id>', 'box id (or a unique prefix of one)'),
  )
    .option('--ttl <duration>', 'how long the URL works: 15m (default), at most 24h', duration)
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  ID=$(sbx create --vnc sbx-desktop:latest)\n  xdg-open "$(sbx vnc $ID)"`)
    .action(
      remoteAction(async ({ sbx }, id: string, f: { ttl?: number }) => {
        const box = await sbx.get(id);
        process.stdout.write((await box.vnc(f.ttl !== undefined ? { ttlMs: f.ttl } : {})) + '\n');
      }),
    );

  withConnection(
    program
      .command('renew')
      .description('Renew the max lifetime of a box: it is removed this long from now (not sooner, and no later)')
      .argument('<id>', 'box id (or a unique prefix of one)')
      .argument('<duration>', 'the new lifetime from now: 30m, 8h', duration),
  )
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx renew sb-1a2b3c 2h`)
    .action(
      remoteAction(async ({ sbx }, id: string, lifetimeMs: number) => {
        const box = await sbx.get(id);
        await box.renewLifetime(lifetimeMs);
        process.stdout.write(`${box.id}\n`);
        process.stderr.write(`sbx: ${box.id} is removed in ${formatDuration(lifetimeMs)} (at ${new Date(Date.now() + lifetimeMs).toISOString()})\n`);
      }),
    );

  withConnection(program.command('whoami').description('The API key in use: its id, name, role and owner, and the server'))
    .option('--json', 'print it as JSON')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx whoami\n  sbx whoami --json | jq -r .owner`)
    .action(
      remoteAction(async ({ sbx, conn }, f: { json?: boolean }) => {
        const me = await sbx.whoami();
        if (f.json) return printJson({ ...me, url: sbx.url });
        process.stdout.write(
          fields([
            ['Server', sbx.url + (conn.profile ? ` (profile '${conn.profile}')` : '')],
            ['Key', `${me.keyId} (${me.name})`],
            ['Role', me.role],
            ['Owner', me.owner],
          ]),
        );
      }),
    );

  withConnection(
    program.command('logout').description('Forget the API key that `sbx login` saved in a profile (the server keeps the key: `sbx keys revoke` ends it)'),
  )
    .addHelpText('after', `\nExamples:\n  sbx logout\n  sbx logout --profile prod`)
    .action(
      connectedAction(async (conn) => {
        const name = conn.profile ?? DEFAULT_PROFILE;
        const file = await readProfiles(conn.configFile);
        const profile = file.profiles?.[name];
        if (!profile?.apiKey) {
          process.stderr.write(`sbx: profile '${name}' in ${conn.configFile} holds no key; nothing to forget\n`);
          return;
        }
        const { apiKey: _forgotten, ...kept } = profile;
        await writeProfiles(conn.configFile, { ...file, profiles: { ...file.profiles, [name]: kept } });
        process.stderr.write(`sbx: forgot the key of profile '${name}' (${profile.url}) in ${conn.configFile}\n`);
        if (conn.keyFrom === 'env') process.stderr.write('sbx: $SBX_API_KEY is still set in this shell\n');
      }),
    );
}
