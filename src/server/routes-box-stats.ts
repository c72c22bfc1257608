/**
 * GET /v1/boxes/:id/stats: a box's CPU and memory use (Box.stats), for the console's list and
 * `sbx stats`. Reading stats is not use (like GET of the box): no touch, no thaw, no restore.
 *
 * A Docker stats call holds one of the engine's connections for about a second (it waits for the
 * engine's next sample): a list polled box by box must not take them all from creates and execs.
 * So at most STATS_CONCURRENCY reads are in flight per server, and reads of one box while one is
 * in flight share its answer (the caller was checked first: the answer is the box's, not theirs).
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { LocalBox } from '../sandbox/box.js';
import type { BoxStats } from '../sandbox/types.js';
import { ActionLimiter } from '../util/concurrency.js';
import { BOX_STATUSES } from '../sandbox/types.js';
import { boxFor } from './context.js';
import type { ServerContext } from './context.js';
import { boxIdParam, isoTime, replies } from './schemas.js';

const measure = (what: string) => z.number().min(0).nullable().describe(what);

export const BoxStatsSchema = z
  .object({
    status: z.enum(BOX_STATUSES).describe('The box status when read: the numbers are null unless running or paused'),
    cpuPercent: measure(
      "CPU use in percent of one core (200: two cores busy) since the box's previous read (Docker: within a minute before; else over the engine's own 1 s); null where the runtime does not measure it (Kubernetes)",
    ),
    memoryBytes: measure('Memory in use, droppable page cache left out'),
    memoryLimitBytes: measure('The memory the box is held to'),
    pids: measure('Processes and threads in the box'),
    memoryCacheBytes: measure("Page cache of the box's files"),
    diskUsedBytes: measure('Bytes the box wrote over its image (Docker)'),
    sampledAt: isoTime,
  })
  .meta({ id: 'BoxStats' });

// The wire schema and the library's type are one shape (checked both ways).
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const sameShape: Same<z.infer<typeof BoxStatsSchema>, BoxStats> = true;
void sameShape;

/** Engine stats calls in flight at once, per server (the e2b metrics sampler has its own 4). */
export const STATS_CONCURRENCY = 4;

export function boxStatsRoutes(app: FastifyInstance, ctx: ServerContext): void {
  const limiter = new ActionLimiter(STATS_CONCURRENCY);
  const inFlight = new Map<string, Promise<BoxStats>>();
  const read = (box: LocalBox): Promise<BoxStats> => {
    let running = inFlight.get(box.id);
    if (!running) {
      running = limiter.run(() => box.stats()).finally(() => inFlight.delete(box.id));
      inFlight.set(box.id, running);
    }
    return running;
  };
  app.withTypeProvider<ZodTypeProvider>().get(
    '/v1/boxes/:id/stats',
    {
      schema: {
        summary: "The box's CPU and memory use now, as its runtime measures it (nulls for a box not running or paused). Not use of the box",
        tags: ['boxes'],
        params: boxIdParam,
        response: replies({ 200: BoxStatsSchema }),
      },
    },
    async (req) => read(await boxFor(ctx, req.caller, req.params.id)),
  );
}
