/**
 * e2b's snapshots over the Manager's (src/sandbox/snapshots.ts, docs/lifecycle.md "Snapshots"):
 * `createSnapshot` saves the sandbox's filesystem as an sbx snapshot of its owner, `listSnapshots`
 * lists the caller's, `deleteSnapshot` (e2b's DELETE /templates/:id) deletes one, and a create
 * whose templateID is a snapshot's id or name starts a sandbox from it. Every call passes the
 * owner the key acts as to the library, which answers another owner's snapshot as a missing one:
 * the same 404 here as an unknown snapshot or template.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SbxError } from '../../../errors.js';
import type { LocalBox, SnapshotInfo } from '../../../sandbox/index.js';
import { actingOwner, requireKey } from '../../auth.js';
import type { Principal } from '../../keys.js';
import type { ServerContext } from '../../context.js';
import { parseSnapshotBody } from './body.js';
import { one, paginate, parsePage } from './list.js';

/** e2b's SnapshotInfo: sbx's id is the snapshotID (what Sandbox.create takes), its name the one name. */
function snapshotInfo(s: SnapshotInfo): { snapshotID: string; names: string[] } {
  return { snapshotID: s.id, names: s.name !== null ? [s.name] : [] };
}

/** The library's owner option for this key: its owner, or none for an admin (every owner's). */
function scope(p: Principal): { owner?: string } {
  const owner = actingOwner(p, undefined);
  return owner !== undefined ? { owner } : {};
}

function isNotFound(err: unknown): boolean {
  return err instanceof SbxError && err.code === 'not_found';
}

/**
 * The snapshot `templateID` names for `owner` (by id or name), as the image of a create; undefined
 * when `owner` has none so named (another owner's included), for the caller's template 404.
 */
export async function snapshotImage(ctx: ServerContext, templateID: string, owner: string): Promise<string | undefined> {
  try {
    return (await ctx.manager.snapshots.get(templateID, { owner })).id;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

export interface SnapshotRoutesOptions {
  /** The configured template names: DELETE /templates/:name of one is not served (it is server config). */
  templates: Record<string, string>;
  /** The e2b sandbox the caller may see, else the sandbox 404. */
  sandboxFor(req: FastifyRequest, id: string): Promise<LocalBox>;
}

export function snapshotRoutes(api: FastifyInstance, ctx: ServerContext, opts: SnapshotRoutesOptions): void {
  // 201 {snapshotID, names}; the source sandbox keeps running (the engine pauses it for the copy only).
  api.post('/sandboxes/:id/snapshots', async (req: FastifyRequest<{ Params: { id: string } }>, reply) => {
    const box = await opts.sandboxFor(req, req.params.id);
    const options = parseSnapshotBody(req.body);
    return reply.code(201).send(snapshotInfo(await box.snapshot(options)));
  });

  // Newest first, filtered by source sandbox and by name (or id), in pages as the sandbox list has them.
  api.get('/snapshots', async (req, reply) => {
    const q = req.query as Record<string, unknown>;
    const page = parsePage(q);
    const sandboxID = one(q, 'sandboxID') || undefined;
    const name = one(q, 'name') || undefined;
    const all = await ctx.manager.snapshots.list(scope(requireKey(req.caller)));
    const matching = all.filter((s) => (sandboxID === undefined || s.sourceBoxId === sandboxID) && (name === undefined || s.name === name || s.id === name));
    const { page: items, nextToken } = paginate(
      matching.map((s) => ({ s, startedAt: Date.parse(s.createdAt), id: s.id })),
      { order: 'desc', ...page },
    );
    if (nextToken) reply.header('x-next-token', nextToken);
    return items.map(({ s }) => snapshotInfo(s));
  });

  // deleteSnapshot: 204, or 404 (the SDKs answer false) for a snapshot the caller has none of by
  // that id or name; 409 while a sandbox made from it exists. A configured template is server
  // config: the 501 of what sbx does not serve, as before this route.
  api.delete('/templates/:id', async (req: FastifyRequest<{ Params: { id: string } }>, reply: FastifyReply) => {
    const p = requireKey(req.caller);
    if (Object.hasOwn(opts.templates, req.params.id)) return reply.callNotFound();
    await ctx.manager.snapshots.delete(req.params.id, scope(p));
    return reply.code(204).send();
  });
}
