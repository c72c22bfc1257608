/**
 * `POST /sandboxes/:id/fork {timeout?, count?}`: new sandboxes from a running one's state. sbx
 * saves the sandbox's filesystem once as a snapshot of its owner (box.snapshot(): the engine
 * pauses it for the copy only, its id and deadline stay as they were) and creates `count`
 * sandboxes from it, each with the source's template, metadata, environment (kept in the image),
 * network and traffic settings and timeout action, owned by the source's owner. Only the
 * filesystem is copied: each fork starts its image's command anew, without the source's processes
 * or memory (e2b's forks resume its memory). Each fork succeeds or fails on its own: the answer
 * has one entry per fork, `{sandbox}` or `{error: {code, message}}`, as e2b's does.
 *
 * The snapshot stays, as any sbx snapshot does: `listSnapshots({sandboxId})` lists it and
 * `deleteSnapshot` removes it once its forks are gone; when no fork could be made it is deleted
 * at once.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { SbxError, isSbxError } from '../../../errors.js';
import type { LocalBox } from '../../../sandbox/index.js';
import { parseOrThrow } from '../../../util/validation.js';
import { requireKey } from '../../auth.js';
import type { ServerContext } from '../../context.js';
import { mapError } from '../../errors.js';
import { DEFAULT_TIMEOUT_SECONDS, E2B_LABEL_PREFIX, INTERNET_LABEL, timeoutSeconds } from './body.js';

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

export function forkRoutes(api: FastifyInstance, ctx: ServerContext, opts: ForkRoutesOptions): void {
  api.post('/sandboxes/:id/fork', async (req: FastifyRequest<{ Params: { id: string } }>, reply) => {
    const source = await opts.sandboxFor(req, req.params.id);
    const body = parseOrThrow(ForkBodySchema, req.body ?? {}, 'body');
    const count = body.count ?? 1;
    const timeoutMs = (body.timeout ?? DEFAULT_TIMEOUT_SECONDS) * 1000;
    const keyId = requireKey(req.caller).keyId;
    const info = await source.info();
    let snapshot;
    try {
      snapshot = await source.snapshot();
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
          ...(labels[INTERNET_LABEL] === 'false' ? { network: 'none' } : { proxyAllPorts: true }),
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
