/**
 * envd's `filesystem.Filesystem` service over the box filesystem (`box.files()`): every call runs
 * as the requesting user, inside the box, with that user's permissions. Watchers are the box
 * filesystem's inotify watch; the polling watchers (CreateWatcher/GetWatcherEvents) buffer the
 * same events in memory, bounded.
 */
import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError } from '@connectrpc/connect';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type { BoxEntryDetails } from '../../../sandbox/box-fs.js';
import type { FileStat } from '../../../workspace/types.js';
import {
  EntryInfoSchema,
  EventType,
  FileType,
  FilesystemEventSchema,
  type EntryInfo,
  type Filesystem,
  type FilesystemEvent,
  type WatchDirResponseSchema,
} from './gen/filesystem/filesystem_pb.js';
import { withKeepalive } from './keepalive.js';
import { resolveUserPath, type UserFS, type WatchEventLike } from './user-fs.js';

/** Events a polling watcher keeps between two GetWatcherEvents; older ones are dropped. */
const MAX_BUFFERED_EVENTS = 10_000;
const WATCH_KEEPALIVE_MS = 30_000;

export type UserFSResolver = (ctx: HandlerContext) => Promise<UserFS>;

const EVENT_TYPES: Record<WatchEventLike['type'], EventType> = {
  create: EventType.CREATE,
  write: EventType.WRITE,
  remove: EventType.REMOVE,
  rename: EventType.RENAME,
  chmod: EventType.CHMOD,
};

/** `ls -l`-style permission string as Go's os.FileMode prints it (what envd sends). */
export function permissionString(st: Pick<FileStat, 'isDir' | 'isSymlink' | 'mode'>): string {
  const kind = st.isDir ? 'd' : st.isSymlink ? 'L' : '-';
  let bits = '';
  for (let i = 8; i >= 0; i--) bits += st.mode & (1 << i) ? 'rwx'[(8 - i) % 3] : '-';
  return kind + bits;
}

const TARGET_TYPES: Record<NonNullable<BoxEntryDetails['targetType']>, FileType> = {
  file: FileType.FILE,
  dir: FileType.DIRECTORY,
  other: FileType.UNSPECIFIED,
};

/**
 * envd's EntryInfo. As E2B's envd describes a symlink: its type and mode are its target's
 * (unspecified and 0 when it dangles), its permissions string and size the link's own, and
 * `symlinkTarget` the fully resolved target.
 */
export function entryInfo(path: string, st: Omit<FileStat, 'isFile'> & Partial<BoxEntryDetails>): EntryInfo {
  const link = st.isSymlink && st.symlinkTarget !== undefined;
  return create(EntryInfoSchema, {
    name: posix.basename(path),
    type: link
      ? st.targetType
        ? TARGET_TYPES[st.targetType]
        : FileType.UNSPECIFIED
      : st.isDir
        ? FileType.DIRECTORY
        : st.isSymlink
          ? FileType.SYMLINK
          : FileType.FILE,
    path,
    size: BigInt(st.size),
    mode: link ? (st.targetMode ?? 0) : st.mode,
    permissions: permissionString(st),
    owner: st.owner ?? '',
    group: st.group ?? '',
    modifiedTime: timestampFromMs(Date.parse(st.mtime)),
    ...(st.symlinkTarget !== undefined ? { symlinkTarget: st.symlinkTarget } : {}),
    metadata: st.metadata ?? {},
  });
}

/** A path's EntryInfo with its details; undefined once it is gone (a watch event's entry of a removed file). */
async function entryOrNone(uf: UserFS, path: string): Promise<EntryInfo | undefined> {
  return uf.files.stat(path, DETAILS).then(
    (st) => entryInfo(path, st),
    () => undefined,
  );
}

const DETAILS = { details: true };

/** envd's event; with `includeEntry` (envd 0.6.3), the entry of what it names, when that still exists. */
async function fsEvent(e: WatchEventLike, withEntry?: { uf: UserFS; dir: string }): Promise<FilesystemEvent> {
  const entry = withEntry && e.type !== 'remove' ? await entryOrNone(withEntry.uf, posix.join(withEntry.dir, e.name)) : undefined;
  return create(FilesystemEventSchema, { name: e.name, type: EVENT_TYPES[e.type], ...(entry ? { entry } : {}) });
}

/** Depth of a recursive listing's relative name: `a` is 1, `a/b` is 2. */
function depthOf(name: string): number {
  return name.split('/').length;
}

async function mustBeDir(uf: UserFS, path: string): Promise<void> {
  const st = await uf.files.stat(path);
  if (!st.isDir) throw new ConnectError(`path is not a directory: ${path}`, Code.InvalidArgument);
}

export function filesystemService(resolve: UserFSResolver): Partial<ServiceImpl<typeof Filesystem>> {
  const watchers = new Map<string, { boxId: string; events: FilesystemEvent[]; abort: AbortController }>();
  // A watcher id is only good for the box that created it.
  const watcherOf = async (id: string, ctx: HandlerContext) => {
    const uf = await resolve(ctx);
    const watcher = watchers.get(id);
    if (!watcher || watcher.boxId !== uf.boxId) throw new ConnectError(`watcher not found: ${id}`, Code.NotFound);
    return watcher;
  };

  return {
    async stat(req, ctx) {
      const uf = await resolve(ctx);
      const path = resolveUserPath(uf.home, req.path);
      return { entry: entryInfo(path, await uf.files.stat(path, DETAILS)) };
    },

    async listDir(req, ctx) {
      const uf = await resolve(ctx);
      const path = resolveUserPath(uf.home, req.path);
      const depth = req.depth || 1;
      await mustBeDir(uf, path);
      const entries = await uf.files.readDir(path, { recursive: depth > 1, details: true });
      return {
        entries: entries.filter((e) => depthOf(e.name) <= depth).map((e) => entryInfo(posix.join(path, e.name), e)),
      };
    },

    async makeDir(req, ctx) {
      const uf = await resolve(ctx);
      const path = resolveUserPath(uf.home, req.path);
      // envd answers already_exists (the SDK's makeDir then returns false) instead of succeeding.
      if (await uf.files.exists(path)) throw new ConnectError(`path already exists: ${path}`, Code.AlreadyExists);
      await uf.files.mkdirAll(path);
      return { entry: entryInfo(path, await uf.files.stat(path, DETAILS)) };
    },

    async move(req, ctx) {
      const uf = await resolve(ctx);
      const from = resolveUserPath(uf.home, req.source);
      const to = resolveUserPath(uf.home, req.destination);
      await uf.files.rename(from, to);
      return { entry: entryInfo(to, await uf.files.stat(to, DETAILS)) };
    },

    async remove(req, ctx) {
      const uf = await resolve(ctx);
      const path = resolveUserPath(uf.home, req.path);
      // As envd (os.RemoveAll): a missing path is done, not an error.
      await uf.files.removeAll(path);
      return {};
    },

    async *watchDir(req, ctx): AsyncGenerator<MessageInitShape<typeof WatchDirResponseSchema>> {
      const uf = await resolve(ctx);
      const path = resolveUserPath(uf.home, req.path);
      await mustBeDir(uf, path);
      const events = uf.files.watch(path, { recursive: req.recursive, signal: ctx.signal });
      // The SDK's watchDir returns at `start`: a change made right after must be seen.
      await events.ready;
      yield { event: { case: 'start', value: {} } };
      for await (const e of withKeepalive(events, WATCH_KEEPALIVE_MS)) {
        yield {
          event:
            e === 'keepalive'
              ? { case: 'keepalive', value: {} }
              : { case: 'filesystem', value: await fsEvent(e, req.includeEntry ? { uf, dir: path } : undefined) },
        };
      }
    },

    async createWatcher(req, ctx) {
      const uf = await resolve(ctx);
      const path = resolveUserPath(uf.home, req.path);
      await mustBeDir(uf, path);
      const id = randomBytes(12).toString('hex');
      const watcher = { boxId: uf.boxId, events: [] as FilesystemEvent[], abort: new AbortController() };
      const events = uf.files.watch(path, { recursive: req.recursive, signal: watcher.abort.signal });
      await events.ready;
      watchers.set(id, watcher);
      void (async () => {
        try {
          for await (const e of events) {
            watcher.events.push(await fsEvent(e, req.includeEntry ? { uf, dir: path } : undefined));
            if (watcher.events.length > MAX_BUFFERED_EVENTS) watcher.events.shift();
          }
        } catch {
          // The box went away or the watch was removed: GetWatcherEvents then reports not_found.
        } finally {
          watchers.delete(id);
        }
      })();
      return { watcherId: id };
    },

    async getWatcherEvents(req, ctx) {
      const watcher = await watcherOf(req.watcherId, ctx);
      return { events: watcher.events.splice(0) };
    },

    async removeWatcher(req, ctx) {
      const watcher = await watcherOf(req.watcherId, ctx);
      watcher.abort.abort();
      watchers.delete(req.watcherId);
      return {};
    },
  };
}
