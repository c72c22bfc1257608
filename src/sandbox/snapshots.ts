import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { z } from 'zod';
import { SbxError, invalidArgument, isSbxError } from '../errors.js';
import { parseImageRef } from '../runtime/image-ref.js';
import type { Runtime } from '../runtime/types.js';
import { JsonFile } from '../util/json-file.js';
import { parseOrThrow } from '../util/validation.js';
import { boxRuntime } from './box-errors.js';
import { BOX_ID_PATTERN } from './create-options.js';

/**
 * A box's filesystem saved as an image (`box.snapshot()`), owned by the box's owner. Pass `id`
 * (or `image`) as a create's `image`: only its owner can (docs/lifecycle.md, Snapshots).
 */
export interface SnapshotInfo {
  /** `snap-` and 12 hex digits. */
  id: string;
  /** Unique per owner when given. */
  name: string | null;
  owner: string;
  /** The pool whose engine holds the image: boxes from it are created there. */
  pool: string;
  /** The box it was taken of. */
  sourceBoxId: string;
  /** The engine's image reference, `sbx-snapshot/<manager>:<id>`; a create takes it as `image` as well as the id. */
  image: string;
  sizeBytes: number;
  /** ISO 8601. */
  createdAt: string;
}

export interface SnapshotOptions {
  /** 1-63 of [a-zA-Z0-9_.-], starting with a letter or digit (as box ids); unique per owner. */
  name?: string;
}

export const SnapshotOptionsSchema = z
  .object({ name: z.string().regex(BOX_ID_PATTERN, 'must be 1-63 of [a-zA-Z0-9_.-], starting with a letter or digit').optional() })
  .strict();

export const SNAPSHOT_ID_PATTERN = /^snap-[0-9a-f]{12}$/;
/** The repository every snapshot image is under; a create naming it directly is checked as a snapshot. */
const SNAPSHOT_REPOSITORY = 'sbx-snapshot';
/** Registries the engine reads as its default one (so `docker.io/sbx-snapshot/...` is the same image). */
const DEFAULT_REGISTRIES = new Set(['docker.io', 'index.docker.io']);
export const DEFAULT_MAX_SNAPSHOTS_PER_OWNER = 50;

/** A record on disk: the info plus the engine's image id (for the id-prefix check at create) and, on a pool of nodes, the node holding the image. */
interface SnapshotRecord extends SnapshotInfo {
  imageId: string;
  node?: string;
}

/** Where a create from a snapshot goes: its image, its pool and, on a pool of nodes, the node that has the image. */
export interface SnapshotTarget {
  image: string;
  pool: string;
  node?: string;
}

/** What the snapshots need of the Manager's box and pool. */
export interface SnapshotSource {
  id: string;
  owner: string;
  pool: string;
  containerId: string;
}

export interface SnapshotsDeps {
  /** `<dataDir>/snapshots/<instance>.json`. */
  file: string;
  manager: string;
  maxPerOwner: number;
  runtimeFor(pool: string): Runtime;
  /** The node of a pool of nodes a container is on (its image is made there only); undefined on any other pool. */
  nodeOf(pool: string, containerId: string): string | undefined;
  /** The ids of the boxes whose image is `ref` (a snapshot in use cannot be deleted). */
  boxesUsing(ref: string): string[];
  now(): number;
  log: Logger;
}

/**
 * The snapshots of one Manager: records in the data directory (the truth; the image's labels
 * `sbx.snapshot`, `sbx.owner`, `sbx.manager` let an operator find one the records lost), owner
 * checks in every call. An `owner` option scopes a call to that owner: another owner's snapshot
 * answers not_found exactly as a missing one (an admin passes none and sees all).
 *
 * @example
 * const snap = await box.snapshot({ name: 'with-deps' });
 * const copy = await manager.create({ image: snap.id, owner: box.owner });
 * await manager.snapshots.delete(snap.id, { owner: box.owner });  // after copy is removed
 */
export class Snapshots {
  private readonly records = new Map<string, SnapshotRecord>();
  private readonly file: JsonFile;
  private loaded: Promise<void> | undefined;
  /** Snapshots being taken, counted by the limit and the name check before the engine is asked. */
  private readonly taking = new Map<string, { owner: string; name: string | null }>();

  constructor(private readonly deps: SnapshotsDeps) {
    this.file = new JsonFile(deps.file);
  }

  /** Reads the records once; every call waits for it. */
  load(): Promise<void> {
    this.loaded ??= this.file.read().then(
      (doc) => {
        if (!Array.isArray(doc)) return;
        for (const r of doc as SnapshotRecord[]) {
          if (r && typeof r.id === 'string' && SNAPSHOT_ID_PATTERN.test(r.id) && typeof r.owner === 'string' && typeof r.image === 'string')
            this.records.set(r.id, r);
        }
      },
      (err: unknown) => {
        this.loaded = undefined;
        throw err;
      },
    );
    return this.loaded;
  }

  /** The engine image reference of a snapshot id: `sbx-snapshot/<manager>:<id>`. */
  refOf(id: string): string {
    // The Manager's name ([a-z0-9][a-z0-9_-]*) as a path component: runs of _ and - as one -, none at the end.
    const component = this.deps.manager.replace(/[-_]+/g, '-').replace(/-+$/, '') || 'sbx';
    return `${SNAPSHOT_REPOSITORY}/${component}:${id}`;
  }

  /** Saves the box's filesystem (see Runtime.commit) as a snapshot owned by the box's owner. */
  async take(box: SnapshotSource, options: SnapshotOptions = {}): Promise<SnapshotInfo> {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) throw invalidArgument('options', 'must be an object');
    const { name } = parseOrThrow(SnapshotOptionsSchema, options, 'options');
    const runtime = this.deps.runtimeFor(box.pool);
    if (runtime.capabilities.commit === false) {
      throw new SbxError('not_available', `box '${box.id}' runs on pool '${box.pool}', whose runtime cannot save a box's filesystem as an image`, {
        details: { id: box.id, pool: box.pool, reason: 'commit_unsupported' },
      });
    }
    await this.load();
    const id = `snap-${randomBytes(6).toString('hex')}`;
    this.reserve(id, box.owner, name ?? null);
    try {
      const ref = this.refOf(id);
      const labels: Record<string, string> = { 'sbx.snapshot': id, 'sbx.owner': box.owner, 'sbx.manager': this.deps.manager };
      await boxRuntime(runtime, box.containerId, box.id).commit(box.containerId, ref, { labels });
      let record: SnapshotRecord;
      const node = this.deps.nodeOf(box.pool, box.containerId);
      try {
        const made = (await runtime.images.list()).find((i) => i.tags.includes(ref));
        record = {
          id,
          name: name ?? null,
          owner: box.owner,
          pool: box.pool,
          sourceBoxId: box.id,
          image: ref,
          sizeBytes: made?.sizeBytes ?? 0,
          createdAt: new Date(this.deps.now()).toISOString(),
          imageId: made?.id ?? '',
          ...(node !== undefined ? { node } : {}),
        };
        this.records.set(id, record);
        await this.save();
      } catch (err) {
        // No record, no image: a snapshot nobody can see must not hold the engine's disk.
        this.records.delete(id);
        await runtime.images
          .remove(ref, { force: true })
          .catch((e: unknown) => this.deps.log.error({ image: ref, err: e }, 'could not remove a snapshot image'));
        throw err;
      }
      this.deps.log.info({ snapshot: id, box: box.id, owner: box.owner, pool: box.pool }, 'snapshot taken');
      return info(record);
    } finally {
      this.taking.delete(id);
    }
  }

  /** The name and the per-owner limit, checked with the snapshots in flight in one synchronous step. */
  private reserve(id: string, owner: string, name: string | null): void {
    const mine = [...this.records.values(), ...this.taking.values()].filter((s) => s.owner === owner);
    if (name !== null && mine.some((s) => s.name === name)) {
      throw new SbxError('conflict', `snapshot name '${name}' is already taken by another snapshot of owner '${owner}'`, { details: { field: 'name', name } });
    }
    if (this.deps.maxPerOwner > 0 && mine.length >= this.deps.maxPerOwner) {
      throw new SbxError('limit_exceeded', `owner '${owner}' has ${mine.length} snapshots, the most allowed (maxSnapshotsPerOwner); delete one first`, {
        details: { owner, limit: this.deps.maxPerOwner },
      });
    }
    this.taking.set(id, { owner, name });
  }

  /** Snapshots, newest first; `owner` keeps that owner's only. */
  async list(opts: { owner?: string } = {}): Promise<SnapshotInfo[]> {
    await this.load();
    return [...this.records.values()]
      .filter((s) => opts.owner === undefined || s.owner === opts.owner)
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt) || a.id.localeCompare(b.id))
      .map(info);
  }

  /** The snapshot with this id (or, within `owner`'s, this name); another owner's answers not_found as a missing one. */
  async get(idOrName: string, opts: { owner?: string } = {}): Promise<SnapshotInfo> {
    return info(await this.find(idOrName, opts.owner));
  }

  /**
   * Removes the snapshot's image and its record. A snapshot that boxes were created from and that
   * still exist is conflict (the engine keeps an image its containers use): remove them first.
   */
  async delete(idOrName: string, opts: { owner?: string } = {}): Promise<void> {
    const s = await this.find(idOrName, opts.owner);
    const users = this.deps.boxesUsing(s.image);
    if (users.length > 0) {
      throw new SbxError('conflict', `snapshot '${s.id}' is the image of box(es) ${users.join(', ')}; remove them first`, {
        details: { id: s.id, boxes: users },
      });
    }
    let runtime: Runtime | undefined;
    try {
      runtime = this.deps.runtimeFor(s.pool);
    } catch (err) {
      // Its pool was removed: the image is out of reach, the record goes.
      if (!isSbxError(err, 'pool_not_found')) throw err;
    }
    if (runtime) {
      await runtime.images.remove(s.image).catch((err: unknown) => {
        if (!isSbxError(err, 'not_found')) throw err;
      });
    }
    this.records.delete(s.id);
    await this.save();
    this.deps.log.info({ snapshot: s.id, owner: s.owner }, 'snapshot deleted');
  }

  /**
   * What a create's `image` means for `owner`: the snapshot's image and pool when it names one of
   * owner's snapshots (by id or image reference); undefined for any other image. A snapshot id, a
   * reference under `sbx-snapshot/`, or an image id prefix of a snapshot that is not owner's
   * answers not_found, whether it exists or not.
   */
  async resolve(image: string, owner: string): Promise<SnapshotTarget | undefined> {
    const missing = () => new SbxError('not_found', `image '${image}' not found: no snapshot of owner '${owner}' has that id`, { details: { image } });
    if (SNAPSHOT_ID_PATTERN.test(image)) {
      await this.load();
      const s = this.records.get(image);
      if (!s || s.owner !== owner) throw missing();
      return target(s);
    }
    const ref = parseImageRef(image);
    const inRepo = ref.repository === SNAPSHOT_REPOSITORY || ref.repository.startsWith(`${SNAPSHOT_REPOSITORY}/`);
    if (inRepo && (ref.registry === undefined || DEFAULT_REGISTRIES.has(ref.registry))) {
      await this.load();
      const wanted = `${ref.repository}:${ref.tag ?? 'latest'}`;
      const s = ref.digest === undefined ? [...this.records.values()].find((r) => r.image === wanted) : undefined;
      if (!s || s.owner !== owner) throw missing();
      return target(s);
    }
    // The engine also takes an image id or a prefix of one (`docker run 3f2a`): never one of another owner's snapshots.
    const hex = /^(?:sha256:)?([0-9a-f]{1,64})$/.exec(image)?.[1];
    if (hex !== undefined && ref.registry === undefined) {
      await this.load();
      for (const s of this.records.values()) {
        if (s.owner !== owner && s.imageId.replace(/^sha256:/, '').startsWith(hex)) throw missing();
      }
    }
    return undefined;
  }

  private async find(idOrName: string, owner: string | undefined): Promise<SnapshotRecord> {
    await this.load();
    const missing = () => new SbxError('not_found', `snapshot '${idOrName}' not found`, { details: { id: idOrName } });
    if (typeof idOrName !== 'string' || idOrName === '') throw invalidArgument('id', 'must be a snapshot id or name');
    const byId = this.records.get(idOrName);
    if (byId) {
      if (owner !== undefined && byId.owner !== owner) throw missing();
      return byId;
    }
    const named = [...this.records.values()].filter((s) => s.name === idOrName && (owner === undefined || s.owner === owner));
    if (named.length > 1) {
      const ids = named.map((s) => s.id).sort();
      throw new SbxError('invalid_argument', `snapshot name '${idOrName}' is taken by several owners (${ids.join(', ')}); give the id`, {
        details: { field: 'id', matches: ids },
      });
    }
    if (!named[0]) throw missing();
    return named[0];
  }

  private save(): Promise<void> {
    return this.file.write([...this.records.values()]);
  }
}

function info(r: SnapshotRecord): SnapshotInfo {
  const { imageId: _imageId, node: _node, ...rest } = r;
  return rest;
}

function target(r: SnapshotRecord): SnapshotTarget {
  return { image: r.image, pool: r.pool, ...(r.node !== undefined ? { node: r.node } : {}) };
}
