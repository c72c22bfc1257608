/**
 * Files: `cp` between this machine and a box (a tar stream through `tar` in the box, so any box
 * with a tar works, workspace or not), and `ws` for workspaces over the SDK's WorkspaceFS.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { basename, join, posix, resolve } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Command } from 'commander';
import { SbxError } from '../errors.js';
import type { Box, Workspace } from '../client/index.js';
import { formatBytes, formatMode, paint, printJson, relativeTime, table } from './output.js';
import { resolveWorkspace } from './names.js';
import { CONNECTION_HELP, REMOTE_EXIT, keyValue, remoteAction, size, withConnection } from './remote.js';

/** tar-stream and the copy code, loaded by the commands that copy (not for `--help` or `ws ls`). */
const transfer = () => import('./transfer.js');

/** `ID:PATH` → the box id and the path in it; a local path otherwise (`./a:b` stays local). */
export function parseRemote(arg: string): { id: string; path: string } | undefined {
  const m = /^([a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}):(.*)$/.exec(arg);
  if (!m || arg.startsWith('.') || arg.startsWith('/')) return undefined;
  return { id: m[1]!, path: m[2] || '.' };
}

async function localKind(path: string): Promise<'dir' | 'file' | 'none'> {
  try {
    return (await stat(path)).isDirectory() ? 'dir' : 'file';
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'none';
    throw err;
  }
}

/** Runs `cmd` in the box with `input` as its stdin (or none); rejects with its stderr when it fails. */
async function boxCommand(box: Box, cmd: string[], io: { input?: NodeJS.ReadableStream; output?: NodeJS.WritableStream } = {}): Promise<string> {
  const s = await box.stream(cmd);
  let stderr = '';
  s.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  let stdout = '';
  const consumed = io.output
    ? pipeline(s.stdout, io.output)
    : new Promise<void>((done) =>
        s.stdout
          .setEncoding('utf8')
          .on('data', (d: string) => (stdout += d))
          .on('end', done),
      );
  if (io.input) io.input.pipe(s.stdin);
  else s.stdin.end();
  const [code] = await Promise.all([s.wait(), consumed]);
  if (code !== 0) {
    const text = (stderr.trim().split('\n')[0] ?? '').replace(/^tar: /, '');
    throw new SbxError(/no such file|not found/i.test(text) ? 'not_found' : 'internal', `in box '${box.id}': ${text || `${cmd[0]} exited ${code}`}`, {
      details: { id: box.id, exitCode: code },
    });
  }
  return stdout;
}

const PROBE = 'if [ -d "$1" ]; then echo dir; elif [ -e "$1" ]; then echo file; elif [ -d "$(dirname "$1")" ]; then echo none; else echo noparent; fi';

/** docker cp's rules: into an existing directory under the source's name, else as the destination's name. */
async function upload(box: Box, local: string, dest: string): Promise<void> {
  const kind = await localKind(local);
  if (kind === 'none') throw new SbxError('not_found', `no such file or directory here: ${local}`, { details: { field: 'source' } });
  const there = (await boxCommand(box, ['sh', '-c', PROBE, 'sh', dest])).trim();
  let dir: string;
  let name: string;
  if (there === 'dir') [dir, name] = [dest, basename(resolve(local))];
  else if (there === 'noparent' || dest.endsWith('/'))
    throw new SbxError('not_found', `no such directory in box '${box.id}': ${there === 'noparent' ? posix.dirname(dest) : dest}`, { details: { id: box.id } });
  else if (there === 'file' && kind === 'dir') throw new SbxError('conflict', `cannot copy a directory onto the file ${dest} in box '${box.id}'`);
  else [dir, name] = [posix.dirname(dest), posix.basename(dest)];
  const { Progress, packHost, treeSize } = await transfer();
  const progress = new Progress(`${basename(local)} → ${box.id}:${posix.join(dir, name)}`, await treeSize(local));
  // -o: files belong to the box's user, not to uids of this machine.
  await boxCommand(box, ['tar', '-x', '-o', '-f', '-', '-C', dir], { input: packHost(local, name, progress) });
  progress.done();
}

async function download(box: Box, path: string, local: string): Promise<void> {
  const clean = posix.normalize(path).replace(/(.)\/+$/, '$1');
  const root = clean === '/';
  const tarCmd = root ? ['tar', '-c', '-f', '-', '-C', '/', '.'] : ['tar', '-c', '-f', '-', '-C', posix.dirname(clean), posix.basename(clean)];
  if (local === '-') {
    await boxCommand(box, tarCmd, { output: process.stdout });
    return;
  }
  const kind = await localKind(local);
  const target = kind === 'dir' ? join(local, root ? box.id : posix.basename(clean)) : local;
  const { Progress, extractHost } = await transfer();
  const progress = new Progress(`${box.id}:${clean} → ${target}`);
  const s = await box.stream(tarCmd);
  s.stdin.end();
  let stderr = '';
  s.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const [code] = await Promise.all([s.wait(), extractHost(s.stdout, target, { renameTop: !root, progress })]);
  if (code !== 0) {
    const text = (stderr.trim().split('\n')[0] ?? '').replace(/^tar: /, '');
    throw new SbxError(/no such file/i.test(text) ? 'not_found' : 'internal', `in box '${box.id}': ${text || `tar exited ${code}`}`, {
      details: { id: box.id },
    });
  }
  progress.done();
}

function wsRows(list: Workspace[]): string {
  return table(
    ['ID', 'NAME', 'OWNER', 'NODE', 'QUOTA', 'CREATED'],
    list.map((w) => [w.id, w.name, w.owner, w.node, w.quotaBytes ? formatBytes(w.quotaBytes) : '-', relativeTime(w.createdAt)]),
  );
}

export function fileCommands(program: Command): void {
  withConnection(
    program
      .command('cp')
      .description('Copy files or directories between this machine and a box (ID:PATH on one side), as a tar stream')
      .argument('<src>', 'LOCAL or ID:PATH')
      .argument('<dest>', 'ID:PATH or LOCAL ("-" writes a tar to stdout)'),
  )
    .addHelpText(
      'after',
      `
As docker cp: a destination that is a directory receives the source under its own name; otherwise
the copy takes the destination's name. The box needs a \`tar\` (busybox's will do). Progress is shown
on stderr when it is a terminal.
${CONNECTION_HELP}

Examples:
  sbx cp ./src sb-1a2b3c:/workspace/        # → /workspace/src
  sbx cp notes.txt sb-1a2b3c:/tmp/n.txt
  sbx cp sb-1a2b3c:/workspace/out ./out
  sbx cp sb-1a2b3c:/etc - | tar -t`,
    )
    .action(
      remoteAction(async ({ sbx }, src: string, dest: string) => {
        const from = parseRemote(src);
        const to = parseRemote(dest);
        if ((from === undefined) === (to === undefined))
          program.error('error: cp copies between this machine and a box: exactly one of SRC and DEST is ID:PATH', { exitCode: REMOTE_EXIT.usage });
        if (to) await upload(await sbx.get(to.id), src, to.path);
        else await download(await sbx.get(from!.id), from!.path, dest);
      }),
    );

  const ws = program
    .command('ws')
    .alias('workspace')
    .description('Workspaces: directories that outlive boxes, mounted into them, with a file API')
    .addHelpText(
      'after',
      `
Examples:
  WS=$(sbx ws create project)
  sbx ws put $WS ./src src
  sbx create --workspace $WS sbx-base:latest
  sbx ws ls-files -r $WS
  sbx ws get $WS src ./src-copy`,
    );

  withConnection(ws.command('create').description('Create a workspace; prints its id').argument('<name>', 'a name for people (need not be unique)'))
    .option('--id <id>', 'the id (default: generated, ws-…)')
    .option('--owner <name>', 'owner (admin keys only)')
    .option('--node <pool>', 'the pool whose machine holds it')
    .option('-l, --label <KEY=VALUE>', 'label (repeatable)', keyValue)
    .option('--quota <size>', 'most bytes the file API may write: 100m, 2g; 0 = none', size)
    .option('--json', 'print the workspace as JSON')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx ws create project --quota 1g\n  sbx ws create data --id ws-data --json`)
    .action(
      remoteAction(
        async ({ sbx }, name: string, f: { id?: string; owner?: string; node?: string; label?: Record<string, string>; quota?: number; json?: boolean }) => {
          const w = await sbx.workspaces.create({
            name,
            ...(f.id ? { id: f.id } : {}),
            ...(f.owner ? { owner: f.owner } : {}),
            ...(f.node ? { node: f.node } : {}),
            ...(f.label ? { labels: f.label } : {}),
            ...(f.quota !== undefined ? { quotaBytes: f.quota } : {}),
          });
          if (f.json) printJson(w);
          else process.stdout.write(w.id + '\n');
        },
      ),
    );

  withConnection(ws.command('ls').alias('list').description('List workspaces'))
    .option('--owner <name>', 'only this owner’s')
    .option('--node <pool>', 'only those on this pool’s machine')
    .option('-q, --quiet', 'print the ids only')
    .option('--json', 'print them as a JSON array')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx ws ls\n  sbx ws ls --json | jq '.[].id'`)
    .action(
      remoteAction(async ({ sbx }, f: { owner?: string; node?: string; quiet?: boolean; json?: boolean }) => {
        const list = await sbx.workspaces.list({ ...(f.owner ? { owner: f.owner } : {}), ...(f.node ? { node: f.node } : {}) });
        if (f.json) printJson(list);
        else if (f.quiet) process.stdout.write(list.map((w) => w.id + '\n').join(''));
        else if (list.length === 0) process.stderr.write('sbx: no workspaces (create one with `sbx ws create NAME`)\n');
        else process.stdout.write(wsRows(list));
      }),
    );

  withConnection(ws.command('rm').alias('remove').description('Delete workspaces and their files').argument('<ids...>', 'workspace ids or names'))
    .option('-f, --force', 'delete even while a box has it mounted')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx ws rm ws-abc\n  sbx ws rm -f ws-abc ws-def`)
    .action(
      remoteAction(async ({ sbx }, ids: string[], f: { force?: boolean }) => {
        for (const id of ids) {
          await sbx.workspaces.delete(await resolveWorkspace(sbx, id), f.force ? { force: true } : {});
          process.stdout.write(id + '\n');
        }
      }),
    );

  withConnection(
    ws
      .command('ls-files')
      .description('List the files of a workspace directory')
      .argument('<id>', 'workspace id or name')
      .argument('[path]', 'directory inside the workspace (default: its root)', ''),
  )
    .option('-r, --recursive', 'the whole tree, paths relative to PATH')
    .option('--json', 'print the entries as a JSON array')
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx ws ls-files ws-abc\n  sbx ws ls-files -r ws-abc src --json`)
    .action(
      remoteAction(async ({ sbx }, id: string, path: string, f: { recursive?: boolean; json?: boolean }) => {
        const fs = await sbx.workspaces.fs(await resolveWorkspace(sbx, id));
        const entries = await fs.readDir(path, { recursive: f.recursive === true });
        if (f.json) return printJson(entries);
        process.stdout.write(
          table(
            ['MODE', 'SIZE', 'MODIFIED', 'NAME'],
            entries.map((e) => [
              formatMode(e.mode, e.isDir, e.isSymlink),
              e.isDir ? '-' : formatBytes(e.size),
              relativeTime(e.mtime),
              e.isDir ? paint(`${e.name}/`, 'cyan') : e.name,
            ]),
          ),
        );
      }),
    );

  withConnection(
    ws.command('cat').description('Write a workspace file to stdout').argument('<id>', 'workspace id or name').argument('<path>', 'file inside the workspace'),
  )
    .addHelpText('after', `${CONNECTION_HELP}\n\nExamples:\n  sbx ws cat ws-abc notes.txt\n  sbx ws cat ws-abc data.bin > data.bin`)
    .action(
      remoteAction(async ({ sbx }, id: string, path: string) => {
        const fs = await sbx.workspaces.fs(await resolveWorkspace(sbx, id));
        await pipeline(await fs.createReadStream(path), process.stdout);
      }),
    );

  withConnection(
    ws
      .command('put')
      .description('Upload a file or directory into a workspace (a directory as a tar stream, all or nothing)')
      .argument('<id>', 'workspace id or name')
      .argument('<local>', 'file or directory here ("-" for stdin, which needs DEST)')
      .argument('[dest]', 'path inside the workspace (default: the local name, at the root)'),
  )
    .option('--mode <octal>', 'file permission bits, e.g. 755 (default: the local file’s)')
    .addHelpText(
      'after',
      `${CONNECTION_HELP}\n\nExamples:\n  sbx ws put ws-abc ./src src\n  sbx ws put ws-abc run.sh bin/run.sh --mode 755\n  date | sbx ws put ws-abc - stamp.txt`,
    )
    .action(
      remoteAction(async ({ sbx }, id: string, local: string, dest: string | undefined, f: { mode?: string }) => {
        const fs = await sbx.workspaces.fs(await resolveWorkspace(sbx, id));
        const mode = f.mode !== undefined ? parseInt(f.mode, 8) : undefined;
        if (mode !== undefined && (!/^[0-7]{1,4}$/.test(f.mode!) || Number.isNaN(mode)))
          program.error(`error: --mode '${f.mode}' is not an octal mode such as 644`, { exitCode: 2 });
        if (local === '-') {
          if (!dest) program.error('error: `ws put ID -` needs DEST, the file to write', { exitCode: 2 });
          await fs.writeFile(dest, process.stdin, mode !== undefined ? { mode } : {});
          return;
        }
        const kind = await localKind(local);
        if (kind === 'none') throw new SbxError('not_found', `no such file or directory here: ${local}`, { details: { field: 'local' } });
        const target = dest ?? basename(resolve(local));
        const { Progress, packHost, treeSize } = await transfer();
        const progress = new Progress(`${basename(local)} → ${id}:${target}`, await treeSize(local));
        if (kind === 'dir') {
          const r = await fs.importTar(target, packHost(local, '', progress));
          progress.done();
          process.stderr.write(`sbx: ${r.entries} entries, ${formatBytes(r.bytes)} → ${id}:${target}\n`);
        } else {
          const st = await stat(local);
          const src = createReadStream(local).pipe(progress.counter());
          await fs.writeFile(target, src, { mode: mode ?? st.mode & 0o777 });
          progress.done();
        }
      }),
    );

  withConnection(
    ws
      .command('get')
      .description('Download a file or directory from a workspace')
      .argument('<id>', 'workspace id or name')
      .argument('<path>', 'file or directory inside the workspace')
      .argument('[local]', 'where to write it (default: its name here; "-" for stdout: a file, or a directory as tar)'),
  )
    .addHelpText(
      'after',
      `${CONNECTION_HELP}\n\nExamples:\n  sbx ws get ws-abc src ./src-copy\n  sbx ws get ws-abc out.log -\n  sbx ws get ws-abc src - | tar -t`,
    )
    .action(
      remoteAction(async ({ sbx }, id: string, path: string, local: string | undefined) => {
        const fs = await sbx.workspaces.fs(await resolveWorkspace(sbx, id));
        const st = await fs.stat(path);
        const name = posix.basename(posix.normalize(path || '.')) || id;
        if (local === '-') {
          await pipeline(st.isDir ? await fs.exportTar(path) : await fs.createReadStream(path), process.stdout);
          return;
        }
        const here = local ?? (name === '.' ? id : name);
        const target = (await localKind(here)) === 'dir' ? join(here, name === '.' ? id : name) : here;
        const { Progress, extractHost } = await transfer();
        const progress = new Progress(`${id}:${path} → ${target}`, st.isDir ? undefined : st.size);
        if (st.isDir) await extractHost(await fs.exportTar(path), target, { progress });
        else await pipeline(await fs.createReadStream(path), progress.counter(), createWriteStream(target, { mode: st.mode & 0o777 }));
        progress.done();
      }),
    );
}
