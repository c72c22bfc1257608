/**
 * Child process of the leftover tests: a second sbx process on the same data directory, doing
 * one long operation the test can kill (SIGKILL) or leave running at a moment it chooses.
 *
 *   import <dataDir> <id> <dest>   importTar(dest) of the tar arriving on stdin
 *   write  <dataDir> <id> <path>   writeFile(path) of the bytes arriving on stdin
 *   create <dataDir> <parallel>    creates workspaces without pause, <parallel> at a time, forever
 *
 * It prints `ready` once it is about to start, and `done <json>` when an import or write ends.
 */
import { WorkspaceManager } from '../../workspace/manager.js';

const [mode, dataDir, arg, path] = process.argv.slice(2);
const manager = new WorkspaceManager({ dataDir: dataDir as string });

if (mode === 'create') {
  await manager.list();
  console.log('ready');
  let n = 0;
  await Promise.all(
    Array.from({ length: Number(arg) }, async () => {
      for (;;) await manager.create({ name: `crash-${n++}`, owner: 'crash', node: 'local' });
    }),
  );
} else {
  const fs = await manager.fs(arg as string);
  console.log('ready');
  if (mode === 'import') {
    console.log(`done ${JSON.stringify(await fs.importTar(path as string, process.stdin))}`);
  } else if (mode === 'write') {
    await fs.writeFile(path as string, process.stdin);
    console.log(`done ${JSON.stringify(await fs.stat(path as string))}`);
  } else {
    throw new Error(`unknown mode ${String(mode)}`);
  }
}
