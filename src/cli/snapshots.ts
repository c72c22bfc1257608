/**
 * Snapshots against a server: `sbx snapshot BOX [--name N]` saves a box's filesystem as an image
 * of its owner; `sbx snapshots ls|rm`. A box is created from one with `sbx create <snapshot id>`.
 * docs/lifecycle.md (Snapshots) has the whole story.
 */
import type { Command } from 'commander';
import type { SnapshotInfo } from '../sandbox/snapshots.js';
import { formatBytes, printJson, relativeTime, table } from './output.js';
import { CONNECTION_HELP, forEachId, remoteAction, withConnection } from './remote.js';

function snapshotRows(list: SnapshotInfo[]): string {
  return table(
    ['ID', 'NAME', 'OWNER', 'POOL', 'FROM BOX', 'SIZE', 'CREATED'],
    list.map((s) => [s.id, s.name ?? '-', s.owner, s.pool, s.sourceBoxId, formatBytes(s.sizeBytes), relativeTime(s.createdAt)]),
  );
}

export function snapshotCommands(program: Command): void {
  withConnection(
    program.command('snapshot').description("Save a box's filesystem as a snapshot (an image of the box's owner); prints its id").argument('<box>', 'box id'),
  )
    .option('--name <name>', 'a name for it, unique among your snapshots (1-63 of a-z A-Z 0-9 _ . -)')
    .option('--json', 'print the snapshot as JSON')
    .addHelpText(
      'after',
      `
Files are saved, processes are not: a box created from the snapshot starts its command anew. A
running box is paused for the copy and keeps running. Workspaces and tmpfs mounts are not part of
it. Only the snapshot's owner can use it (docs/lifecycle.md).
${CONNECTION_HELP}

Examples:
  SNAP=$(sbx snapshot sb-1a2b3c --name deps-installed)
  sbx create $SNAP                      # a new box with the same files
  sbx snapshot sb-1a2b3c --json | jq -r .image`,
    )
    .action(
      remoteAction(async ({ sbx }, id: string, f: { name?: string; json?: boolean }) => {
        const box = await sbx.get(id);
        const snap = await box.snapshot(f.name !== undefined ? { name: f.name } : {});
        if (f.json) printJson(snap);
        else process.stdout.write(snap.id + '\n');
      }),
    );

  const snapshots = program
    .command('snapshots')
    .description('List and delete snapshots (see `sbx snapshot`)')
    .addHelpText('after', `\nExamples:\n  sbx snapshots ls\n  sbx snapshots rm snap-0123456789ab deps-installed`);

  withConnection(snapshots.command('ls').alias('list').description('List your snapshots (an admin: everyone’s, or --owner)'))
    .option('--owner <name>', 'only this owner’s (admin keys; a user key sees only its own)')
    .option('-q, --quiet', 'print the ids only')
    .option('--json', 'print them as a JSON array')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx snapshots ls\n  sbx snapshots ls --json | jq -r '.[].id'`)
    .action(
      remoteAction(async ({ sbx }, f: { owner?: string; quiet?: boolean; json?: boolean }) => {
        const list = await sbx.snapshots.list(f.owner ? { owner: f.owner } : {});
        if (f.json) printJson(list);
        else if (f.quiet) process.stdout.write(list.map((s) => s.id + '\n').join(''));
        else if (list.length === 0) process.stderr.write('sbx: no snapshots (take one with `sbx snapshot BOX`)\n');
        else process.stdout.write(snapshotRows(list));
      }),
    );

  withConnection(
    snapshots
      .command('rm')
      .alias('remove')
      .description('Delete snapshots and their images (refused while a box created from one exists)')
      .argument('<ids...>', 'snapshot ids or names'),
  )
    .option('--json', 'print the result per id as JSON')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx snapshots rm snap-0123456789ab\n  sbx snapshots ls -q | xargs sbx snapshots rm`)
    .action(
      remoteAction(async ({ sbx, conn }, ids: string[], f: { json?: boolean }) => {
        await forEachId(ids, conn, f.json, (id) => sbx.snapshots.delete(id));
      }),
    );
}
