import type { FileSubject } from './subject.js';

/** The slice of src/workspace the benchmark relies on, checked at run time (see load()). */
interface WorkspaceFiles {
  writeFile(path: string, data: Buffer): Promise<void>;
  readFile(path: string): Promise<Buffer>;
}
interface WorkspaceManagerLike {
  create(opts: { name: string; owner: string; node: string }): Promise<{ id: string }>;
  fs(id: string): WorkspaceFiles | Promise<WorkspaceFiles>;
}
type WorkspaceManagerCtor = new (opts: { dataDir: string }) => WorkspaceManagerLike;

// A variable specifier keeps tsc from resolving the module: it is written concurrently and
// may be absent or mid-change; the bench must build and run either way.
const WORKSPACE_MODULE = '../../src/workspace/index.js';

export type WorkspaceLoad = { subject: FileSubject } | { unavailable: string };

/** sbx workspace file I/O through `WorkspaceManager.fs(id)`, when the module is there. */
export async function openWorkspaceSubject(dataDir: string, specifier: string = WORKSPACE_MODULE): Promise<WorkspaceLoad> {
  let ctor: unknown;
  try {
    ctor = ((await import(specifier)) as { WorkspaceManager?: unknown }).WorkspaceManager;
  } catch (err) {
    return { unavailable: `src/workspace does not load (${firstLine(err)})` };
  }
  if (typeof ctor !== 'function') return { unavailable: 'src/workspace/index.ts does not export WorkspaceManager' };
  try {
    const manager = new (ctor as WorkspaceManagerCtor)({ dataDir });
    const ws = await manager.create({ name: 'bench', owner: 'bench', node: 'local' });
    const files = await manager.fs(ws.id);
    if (typeof files?.writeFile !== 'function' || typeof files.readFile !== 'function') {
      return { unavailable: 'WorkspaceManager.fs(id) has no writeFile/readFile' };
    }
    return {
      subject: {
        name: 'sbx',
        writeFile: (path, data) => files.writeFile(path, data),
        readFile: (path) => files.readFile(path),
      },
    };
  } catch (err) {
    return { unavailable: `WorkspaceManager failed: ${firstLine(err)}` };
  }
}

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0] ?? '';
}
