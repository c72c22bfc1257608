/**
 * Admin commands against a server: `images pull`, `pools ls|add|rm`, `keys create|ls|revoke`.
 * `sbx pools` alone keeps listing this machine's configured pools through a local Manager.
 */
import type { Command } from 'commander';
import { Option } from 'commander';
import type { PoolConfig, Role } from '../client/index.js';
import { formatBytes, formatDuration, paint, printJson, relativeTime, table } from './output.js';
import { CONNECTION_HELP, duration, positiveInt, remoteAction, size, withConnection } from './remote.js';
import { PullRenderer } from './pull-progress.js';

/** PoolConfig.agentDelivery's values (the CLI knows the SDK's types only). */
const AGENT_DELIVERIES: NonNullable<PoolConfig['agentDelivery']>[] = ['auto', 'image-volume', 'init-container'];

export function adminCommands(program: Command, pools: Command): void {
  const images = program.command('images').description('Images on the server’s pools (admin)');
  withConnection(images.command('pull').description('Pull an image onto a pool, with progress per layer and a total').argument('<ref>', 'image reference'))
    .option('-p, --pool <name>', 'pool to pull on (default: the server’s first)')
    .option('--username <user>', 'registry user (the password comes from $SBX_REGISTRY_PASSWORD)')
    .option('--json', 'print the engine’s progress events, one JSON object a line')
    .addHelpText(
      'after',
      `
On a terminal each layer gets a line with a bar and a total is drawn under them; otherwise
each layer's status changes are printed as plain lines.
${CONNECTION_HELP}

Examples:
  sbx images pull alpine:3.20
  sbx images pull -p gpu registry.example.com/team/img:1 --username ci
  sbx images pull --json busybox:latest | jq -c 'select(.status == "Pull complete")'`,
    )
    .action(
      remoteAction(async ({ sbx }, ref: string, f: { pool?: string; username?: string; json?: boolean }) => {
        const password = process.env['SBX_REGISTRY_PASSWORD'];
        if (f.username && password === undefined) program.error('error: --username needs the password in $SBX_REGISTRY_PASSWORD', { exitCode: 2 });
        const events = sbx.images.pull(ref, {
          ...(f.pool ? { pool: f.pool } : {}),
          ...(f.username ? { auth: { username: f.username, password: password! } } : {}),
        });
        const renderer = f.json ? undefined : new PullRenderer(process.stdout, ref);
        try {
          for await (const ev of events) {
            if (renderer) renderer.update(ev);
            else process.stdout.write(JSON.stringify(ev) + '\n');
          }
        } finally {
          renderer?.finish();
        }
      }),
    );

  withConnection(images.command('ls').alias('list').description('List the images of a pool (admin)'))
    .option('-p, --pool <name>', 'the pool (default: the server’s first)')
    .option('-q, --quiet', 'print the image ids only')
    .option('--json', 'print them as a JSON array')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx images ls\n  sbx images ls --json | jq -r '.[].tags[]'`)
    .action(
      remoteAction(async ({ sbx }, f: { pool?: string; quiet?: boolean; json?: boolean }) => {
        const list = await sbx.images.list(f.pool ? { pool: f.pool } : {});
        if (f.json) return printJson(list);
        if (f.quiet) return void process.stdout.write(list.map((i) => i.id + '\n').join(''));
        const rows = list.flatMap((i) => (i.tags.length ? i.tags : ['<none>:<none>']).map((t) => ({ ...i, tag: t })));
        rows.sort((a, b) => a.tag.localeCompare(b.tag));
        process.stdout.write(
          table(
            ['REPOSITORY', 'TAG', 'IMAGE ID', 'CREATED', 'SIZE'],
            rows.map((i) => {
              const at = i.tag.lastIndexOf(':');
              return [i.tag.slice(0, at), i.tag.slice(at + 1), i.id.replace(/^sha256:/, '').slice(0, 12), relativeTime(i.createdAt), formatBytes(i.sizeBytes)];
            }),
          ),
        );
      }),
    );

  withConnection(images.command('rm').alias('remove').description('Remove images from a pool (admin)').argument('<refs...>', 'image references or ids'))
    .option('-p, --pool <name>', 'the pool (default: the server’s first)')
    .option('-f, --force', 'remove it even while a box uses it (the engine then only untags it)')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx images rm alpine:3.20\n  sbx images rm -p gpu -f registry.example.com/team/img:1`)
    .action(
      remoteAction(async ({ sbx }, refs: string[], f: { pool?: string; force?: boolean }) => {
        for (const ref of refs) {
          await sbx.images.remove(ref, { ...(f.pool ? { pool: f.pool } : {}), ...(f.force ? { force: true } : {}) });
          process.stdout.write(ref + '\n');
        }
      }),
    );

  withConnection(pools.command('ls').alias('list').description('List the server’s pools (admin)'))
    .option('--json', 'print them as a JSON array')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx pools ls\n  sbx pools ls --json | jq '.[] | select(.connected | not) | .name'`)
    .action(
      remoteAction(async ({ sbx }, f: { json?: boolean }) => {
        const list = await sbx.pools();
        if (f.json) return printJson(list);
        process.stdout.write(
          table(
            ['NAME', 'ADDR', 'STATUS', 'BOXES', 'MAX/USER', 'MAX', 'MEMORY', 'CPUS', 'IDLE'],
            list.map((p) => [
              p.name,
              p.addr,
              p.connected ? paint('connected', 'green') : paint('unreachable', 'red'),
              String(p.boxes),
              p.maxPerUser ? String(p.maxPerUser) : '-',
              p.maxTotal ? String(p.maxTotal) : '-',
              p.memory ? formatBytes(p.memory) : '-',
              p.cpus ? String(p.cpus) : '-',
              formatDuration(p.idleTimeoutMs),
            ]),
          ),
        );
      }),
    );

  withConnection(
    pools
      .command('add')
      .description('Add a pool to the server (admin); it is checked and used at once')
      .argument('<name>', 'pool name')
      .argument('[addr]', 'runtime address: local, unix:///…, tcp://…, ssh://…, k8s://?kubeconfig=…&namespace=…', 'local'),
  )
    .option('--max-per-user <n>', 'boxes per owner; 0 = unlimited', positiveInt)
    .option('--max-total <n>', 'boxes on the pool; 0 = unlimited', positiveInt)
    .option('--idle-timeout <duration>', 'default idle timeout of its boxes: 30m; 0 = never', duration)
    .option('--idle-pause <duration>', 'default idle pause of its boxes (before the idle timeout): 5m; 0 = never', duration)
    .option('--idle-archive <duration>', 'default idle archive of its boxes (after the idle pause, before the idle timeout): 2h; 0 = never', duration)
    .option('--max-lifetime <duration>', 'default max lifetime: 8h; 0 = none', duration)
    .option('--stop-timeout <duration>', 'SIGTERM grace: 2s', duration)
    .option('-m, --memory <size>', 'default memory of a box: 1g; 0 = no limit', size)
    .option('--cpus <n>', 'default cores of a box; 0 = no limit', Number)
    .addOption(new Option('--security <profile>', 'security profile').choices(['standard', 'strict']))
    .option('--oci-runtime <name>', 'OCI runtime for its boxes, e.g. runsc (Kubernetes: the RuntimeClass)')
    .addOption(
      new Option(
        '--pause-memory <what>',
        'what its idle pauses (and a max lifetime ending in pause) do with memory: hold (freeze) or release (checkpoint to disk; runsc boxes)',
      ).choices(['hold', 'release']),
    )
    .option('--agent-image <ref>', 'Kubernetes: the in-box agent image, e.g. sbx-agent:latest')
    .addOption(new Option('--agent-delivery <how>', 'Kubernetes: how the agent gets into a pod (default auto: probed)').choices(AGENT_DELIVERIES))
    .option('--ready-timeout <duration>', 'Kubernetes: how long a create waits for its pod: 2m', duration)
    .option('--storage-class <name>', 'Kubernetes: StorageClass of workspace claims')
    .option('--network <name>', "an engine network its boxes may name besides 'none' (repeatable)", (v: string, prev: string[]) => [...prev, v], [] as string[])
    .option('--json', 'print the pool as JSON')
    .addHelpText(
      'after',
      `${CONNECTION_HELP}\n\nExamples:\n  sbx pools add gpu tcp://10.0.0.5:2376 --max-per-user 2\n  sbx pools add edge ssh://sbx@edge-1 --idle-timeout 10m\n  sbx pools add kube 'k8s://?kubeconfig=/etc/sbx/kubeconfig&namespace=sbx' --agent-image sbx-agent:latest`,
    )
    .action(
      remoteAction(
        async (
          { sbx },
          name: string,
          addr: string,
          f: {
            maxPerUser?: number;
            maxTotal?: number;
            idleTimeout?: number;
            idlePause?: number;
            idleArchive?: number;
            maxLifetime?: number;
            stopTimeout?: number;
            memory?: number;
            cpus?: number;
            security?: 'standard' | 'strict';
            ociRuntime?: string;
            pauseMemory?: 'hold' | 'release';
            agentImage?: string;
            agentDelivery?: PoolConfig['agentDelivery'];
            readyTimeout?: number;
            storageClass?: string;
            network: string[];
            json?: boolean;
          },
        ) => {
          const def: PoolConfig = {
            name,
            addr,
            ...(f.maxPerUser !== undefined ? { maxPerUser: f.maxPerUser } : {}),
            ...(f.maxTotal !== undefined ? { maxTotal: f.maxTotal } : {}),
            ...(f.idleTimeout !== undefined ? { idleTimeoutMs: f.idleTimeout } : {}),
            ...(f.idlePause !== undefined ? { idlePauseMs: f.idlePause } : {}),
            ...(f.idleArchive !== undefined ? { idleArchiveMs: f.idleArchive } : {}),
            ...(f.maxLifetime !== undefined ? { maxLifetimeMs: f.maxLifetime } : {}),
            ...(f.stopTimeout !== undefined ? { stopTimeoutMs: f.stopTimeout } : {}),
            ...(f.memory !== undefined ? { memory: f.memory } : {}),
            ...(f.cpus !== undefined ? { cpus: f.cpus } : {}),
            ...(f.security ? { security: f.security } : {}),
            ...(f.ociRuntime ? { ociRuntime: f.ociRuntime } : {}),
            ...(f.pauseMemory ? { pauseMemory: f.pauseMemory } : {}),
            ...(f.agentImage ? { agentImage: f.agentImage } : {}),
            ...(f.agentDelivery ? { agentDelivery: f.agentDelivery } : {}),
            ...(f.readyTimeout !== undefined ? { readyTimeoutMs: f.readyTimeout } : {}),
            ...(f.storageClass ? { storageClass: f.storageClass } : {}),
            ...(f.network.length ? { networks: f.network } : {}),
          };
          const p = await sbx.addPool(def);
          if (f.json) printJson(p);
          else process.stdout.write(`${p.name}\t${p.addr}\t${p.connected ? 'connected' : 'unreachable'}\n`);
        },
      ),
    );

  withConnection(pools.command('rm').alias('remove').description('Remove a pool from the server (admin)').argument('<name>', 'pool name'))
    .option('-f, --force', 'remove it even with boxes on it (they are removed)')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx pools rm gpu\n  sbx pools rm -f edge`)
    .action(
      remoteAction(async ({ sbx }, name: string, f: { force?: boolean }) => {
        await sbx.removePool(name, f.force ? { force: true } : {});
        process.stdout.write(name + '\n');
      }),
    );

  const keys = program.command('keys').description('API keys of the server (admin)');
  withConnection(
    keys.command('create').description('Make an API key; its secret is printed once').argument('<name>', 'a name for the key (who or what uses it)'),
  )
    .addOption(new Option('--role <role>', 'what it may do').choices(['user', 'admin']).default('user'))
    .option('--owner <name>', 'the owner a user key acts as (default: the name)')
    .option('--json', 'print the key and its record as JSON')
    .addHelpText(
      'after',
      `${CONNECTION_HELP}\n\nExamples:\n  sbx keys create alice\n  sbx keys create ci --owner team-ml --json | jq -r .key\n  sbx login http://127.0.0.1:7070 --api-key "$(sbx keys create bob)"`,
    )
    .action(
      remoteAction(async ({ sbx }, name: string, f: { role: Role; owner?: string; json?: boolean }) => {
        const k = await sbx.keys.create({ name, role: f.role, ...(f.owner ? { owner: f.owner } : {}) });
        if (f.json) return printJson(k);
        process.stdout.write(k.key + '\n');
        process.stderr.write(`sbx: key ${k.id} (${k.role}, owner ${k.owner}) made; the secret above is shown only now\n`);
        process.stderr.write(`sbx: the same key for the e2b SDK (docs/e2b.md): E2B_API_KEY=${k.e2bKey}\n`);
      }),
    );

  withConnection(keys.command('ls').alias('list').description('List API keys (never their secrets)'))
    .option('--json', 'print them as a JSON array')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx keys ls\n  sbx keys ls --json | jq -r '.[] | select(.role == "admin") | .id'`)
    .action(
      remoteAction(async ({ sbx }, f: { json?: boolean }) => {
        const list = await sbx.keys.list();
        if (f.json) return printJson(list);
        process.stdout.write(
          table(
            ['ID', 'NAME', 'ROLE', 'OWNER', 'CREATED'],
            list.map((k) => [k.id, k.name, k.role === 'admin' ? paint(k.role, 'yellow') : k.role, k.owner, relativeTime(k.createdAt)]),
          ),
        );
      }),
    );

  withConnection(
    keys.command('revoke').alias('rm').description('Revoke API keys; they stop working at once').argument('<ids...>', 'key ids (from `sbx keys ls`)'),
  )
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx keys revoke 0123456789abcdef`)
    .action(
      remoteAction(async ({ sbx }, ids: string[]) => {
        for (const id of ids) {
          await sbx.keys.revoke(id);
          process.stdout.write(id + '\n');
        }
      }),
    );
}
