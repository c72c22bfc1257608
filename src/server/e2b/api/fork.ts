/**
 * `POST /sandboxes/:id/fork {timeout?, count?}`: new sandboxes from a running one's state. sbx
 * saves the sandbox's filesystem once as a snapshot of its owner (box.snapshot(): the engine
 * pauses it for the copy only, its id and deadline stay as they were) and creates `count`
 * sandboxes from it, each with the source's template, metadata, environment (kept in the image),
 * network and traffic settings, egress policy (box.info().networkPolicy) and timeout action, owned by the source's owner. Only the
 * filesystem is copied: each fork starts its image's command anew, without the source's processes
 * or memory (e2b's forks resume its memory). Each fork succeeds or fails on its own: the answer
 * has one entry per fork, `{sandbox}` or `{error: {code, message}}`, as e2b's does.
 *
 * The snapshot (named `e2b-fork-<source>-<time>`) stays while a fork made from it exists:
 * `listSnapshots({sandboxId})` lists it. The owner's next fork deletes those whose forks are all
 * gone, and one no fork could be made from is deleted at once.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { SbxError, isSbxError } from '../../../errors.js';
import type { LocalBox } from '../../../sandbox/index.js';
import { parseOrThrow } from '../../../util/validation.js';
import { requireKey } from '../../auth.js';
import type { ServerContext } from '../../context.js';
import { mapError } from '../../errors.js';
import { DEFAULT_TIMEOUT_SECONDS, E2B_LABEL_PREFIX, INTERNET_LABEL, sandboxSecurity, timeoutSeconds } from './body.js';

/** Forks one call may ask for (e2b's own bound): each is a whole sandbox made at once, within the owner's box limits. */
export const MAX_FORK_COUNT = 20;

const ForkBodySchema = z.object({
  timeout: timeoutSeconds.nullish(),
  count: z
    .number({ error: 'must be a number' })
    .int('must be a whole number')
    .min(1, 'must be at least 1')
    .max(MAX_FORK_COUNT, `sbx makes at most ${MAX_FORK_COUNT} forks at once`)
    .nullish(),
});

type ForkResult = { sandbox: unknown } | { error: { code: number; message: string } };

export interface ForkRoutesOptions {
  sandboxFor(req: FastifyRequest, id: string): Promise<LocalBox>;
  /** What a create answers for `box`, with the calling key's envd access token. */
  answer(box: LocalBox, keyId: string): Promise<unknown>;
  /** A new sandbox was made (metrics take its first sample). */
  created(box: LocalBox): void;
}

/** The name of a snapshot a fork made, so that the next fork of its owner can collect it. */
const FORK_SNAPSHOT_PREFIX = 'e2b-fork-';

/**
 * Deletes the owner's fork snapshots that no box uses any more (a snapshot a box was made from
 * is `conflict` to delete, and stays). e2b code never deletes them, and without this every fork
 * would hold an image until the owner's snapshot limit refused the next.
 */
async function collectForkSnapshots(ctx: ServerContext, owner: string): Promise<void> {
  const mine = await ctx.manager.snapshots.list({ owner });
  for (const s of mine.filter((s) => s.name?.startsWith(FORK_SNAPSHOT_PREFIX))) {
    await ctx.manager.snapshots.delete(s.id, { owner }).catch((err: unknown) => {
      if (!isSbxError(err, 'conflict') && !isSbxError(err, 'not_found'))
        ctx.log.warn({ err, snapshot: s.id }, 'e2b fork: could not delete an unused fork snapshot');
    });
  }
}

export function forkRoutes(api: FastifyInstance, ctx: ServerContext, opts: ForkRoutesOptions): void {
  api.post('/sandboxes/:id/fork', async (req: FastifyRequest<{ Params: { id: string } }>, reply) => {
    const source = await opts.sandboxFor(req, req.params.id);
    const body = parseOrThrow(ForkBodySchema, req.body ?? {}, 'body');
    const count = body.count ?? 1;
    const timeoutMs = (body.timeout ?? DEFAULT_TIMEOUT_SECONDS) * 1000;
    const keyId = requireKey(req.caller).keyId;
    const info = await source.info();
    await collectForkSnapshots(ctx, source.owner);
    let snapshot;
    try {
      snapshot = await source.snapshot({ name: `${FORK_SNAPSHOT_PREFIX}${source.id}-${Date.now().toString(36)}` });
    } catch (err) {
      if (isSbxError(err, 'not_available')) {
        throw new SbxError('not_available', `cannot fork sandbox '${source.id}': ${err.message} (a fork is a copy of its filesystem)`, {
          cause: err,
          details: err.details,
        });
      }
      throw err;
    }
    // The source's e2b labels: template, metadata, traffic and network settings.
    const labels = Object.fromEntries(Object.entries(source.labels).filter(([k]) => k.startsWith(E2B_LABEL_PREFIX)));
    const results = await Promise.allSettled(
      Array.from({ length: count }, async () => {
        const box = await ctx.manager.create({
          image: snapshot.id,
          owner: source.owner,
          labels,
          policy: 'session',
          idleTimeoutMs: 0,
          maxLifetimeMs: timeoutMs,
          maxLifetimeAction: info.maxLifetimeAction === 'pause' ? 'pause' : 'remove',
          // The source's egress policy; a sandbox an sbx before egress policies cut off (network
          // none) has forks cut off the same way.
          ...(labels[INTERNET_LABEL] === 'false' ? { network: 'none' } : { proxyAllPorts: true, networkPolicy: info.networkPolicy }),
          ...(await sandboxSecurity(ctx.manager)),
        });
        ctx.metrics.creates.inc({ pool: box.pool });
        opts.created(box);
        return opts.answer(box, keyId);
      }),
    );
    if (results.every((r) => r.status === 'rejected')) {
      // No fork holds the snapshot: it goes, rather than holding the engine's disk for nothing.
      await ctx.manager.snapshots
        .delete(snapshot.id)
        .catch((err: unknown) => ctx.log.warn({ err, snapshot: snapshot.id }, 'e2b fork: could not delete the snapshot no fork uses'));
    }
    const out: ForkResult[] = results.map((r) => {
      if (r.status === 'fulfilled') return { sandbox: r.value };
      const mapped = mapError(r.reason);
      return { error: { code: mapped.status, message: mapped.error.message } };
    });
    return reply.code(201).send(out);
  });
}
