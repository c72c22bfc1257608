/**
 * The e2b sandbox routes over the Manager: a sandbox is an sbx box made through these routes
 * (labelled with its template), policy `session` with no idle timeout and a max lifetime of the
 * sandbox's timeout, renewed from now by setTimeout and connect (box.renewLifetime). Other boxes,
 * and another owner's, do not exist here (404).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SbxError } from '../../../errors.js';
import type { LocalBox, PoolInfo } from '../../../sandbox/index.js';
import { actingOwner, mayAccess, requireKey } from '../../auth.js';
import type { ServerContext } from '../../context.js';
import { envdAccessToken } from '../access-token.js';
import { ENVD_VERSION } from '../envd/version.js';
import { TEMPLATE_LABEL, labelsFor, metadataOf, parseNewSandbox, parseTimeout } from './body.js';
import { paginate, parseListQuery, parseMetadataFilter } from './list.js';
import type { SandboxState } from './list.js';

/** e2b's clientID is a vestige its SDKs ignore; sbx answers one constant. */
export const CLIENT_ID = 'sbx';
const MIB = 1024 * 1024;

export interface SandboxRoutesOptions {
  /** Template name → image. */
  templates: Record<string, string>;
}

/** What a create or a connect answers (e2b's `Sandbox`). */
interface SandboxAnswer {
  templateID: string;
  sandboxID: string;
  alias: string;
  clientID: string;
  envdVersion: string;
  envdAccessToken: string;
  trafficAccessToken: null;
  /** Where `<port>-<sandboxID>.<domain>` reaches the box: sbx's proxy domain, else null (see docs/e2b.md). */
  domain: string | null;
}

function notFound(id: string): SbxError {
  return new SbxError('not_found', `sandbox '${id}' not found`, { details: { id } });
}

function templateOf(box: LocalBox): string | undefined {
  return box.labels[TEMPLATE_LABEL];
}

function stateOf(box: LocalBox): SandboxState {
  // sbx stops an e2b sandbox only when asked through its own API; a stopped box is e2b's "paused"
  // (connect starts it again), everything else is running.
  return box.status === 'stopped' || box.status === 'paused' ? 'paused' : 'running';
}

function endAt(box: LocalBox): number {
  return Date.parse(box.createdAt) + box.maxLifetimeMs;
}

export function sandboxRoutes(api: FastifyInstance, ctx: ServerContext, opts: SandboxRoutesOptions): void {
  const domain = (): string | null => ctx.proxyDomain ?? null;

  /** The e2b sandbox `id` if the caller may see it; anything else is the same 404. */
  async function sandboxFor(req: FastifyRequest, id: string): Promise<LocalBox> {
    const p = requireKey(req.caller);
    const box = await ctx.manager.get(id).catch((err: unknown) => {
      if (err instanceof SbxError && err.code === 'not_found') return undefined;
      throw err;
    });
    if (!box || templateOf(box) === undefined || !mayAccess(p, box.owner)) throw notFound(id);
    return box;
  }

  /** What create and connect answer; the envd access token is the calling key's own (revoked with it). */
  async function answer(box: LocalBox, keyId: string): Promise<SandboxAnswer> {
    const templateID = templateOf(box)!;
    return {
      templateID,
      sandboxID: box.id,
      alias: templateID,
      clientID: CLIENT_ID,
      envdVersion: ENVD_VERSION,
      envdAccessToken: await envdAccessToken(ctx.manager, box.id, keyId),
      trafficAccessToken: null,
      domain: domain(),
    };
  }

  /** The fields of e2b's ListedSandbox; SandboxDetail adds envdAccessToken and domain. */
  function listed(box: LocalBox, pools: Map<string, PoolInfo>) {
    const pool = pools.get(box.pool);
    const templateID = templateOf(box)!;
    return {
      templateID,
      alias: templateID,
      sandboxID: box.id,
      clientID: CLIENT_ID,
      startedAt: box.createdAt,
      endAt: new Date(endAt(box)).toISOString(),
      // A box asks for no resources of its own here: the pool's defaults are what it has.
      cpuCount: Math.max(1, Math.ceil(pool?.cpus ?? 1)),
      memoryMB: pool?.memory ? Math.round(pool.memory / MIB) : 0,
      // Required by e2b's API (the Python SDK fails to parse an answer without it); sbx sets no
      // disk size per sandbox, so 0, as memoryMB is for a pool without a memory limit.
      diskSizeMB: 0,
      metadata: metadataOf(box.labels),
      state: stateOf(box),
      envdVersion: ENVD_VERSION,
      volumeMounts: [],
    };
  }

  async function poolsByName(): Promise<Map<string, PoolInfo>> {
    return new Map((await ctx.manager.pools()).map((p) => [p.name, p]));
  }

  const create = async (req: FastifyRequest, reply: FastifyReply) => {
    const p = requireKey(req.caller);
    const s = parseNewSandbox(req.body);
    const image = Object.hasOwn(opts.templates, s.templateID) ? opts.templates[s.templateID] : undefined;
    if (image === undefined) {
      throw new SbxError('not_found', `template '${s.templateID}' not found; this server has: ${Object.keys(opts.templates).join(', ') || 'none'}`, {
        details: { templateID: s.templateID },
      });
    }
    const box = await ctx.manager.create({
      image,
      owner: actingOwner(p, undefined) ?? p.owner,
      labels: labelsFor(s),
      env: s.envVars,
      // e2b sandboxes live until their timeout, idle or not; setTimeout and connect renew it.
      policy: 'session',
      idleTimeoutMs: 0,
      maxLifetimeMs: s.timeoutSeconds * 1000,
      // getHost(port) reaches any port a service opens later, through sbx's authenticated proxy.
      ...(s.internet ? { proxyAllPorts: true } : { network: 'none' }),
    });
    ctx.metrics.creates.inc({ pool: box.pool });
    return reply.code(201).send(await answer(box, p.keyId));
  };
  api.post('/v2/sandboxes', create);
  api.post('/sandboxes', create);

  const connect = async (req: FastifyRequest<{ Params: { id: string } }>) => {
    const box = await sandboxFor(req, req.params.id);
    const timeoutMs = parseTimeout(req.body, false) * 1000;
    if (box.status === 'stopped') await box.start();
    // As e2b does on connect: the deadline only ever moves later (setTimeout may shorten it).
    if (Date.now() + timeoutMs > endAt(box)) await box.renewLifetime(timeoutMs);
    return answer(box, requireKey(req.caller).keyId);
  };
  api.post('/v2/sandboxes/:id/connect', connect);
  api.post('/sandboxes/:id/connect', connect);

  api.post('/sandboxes/:id/timeout', async (req: FastifyRequest<{ Params: { id: string } }>, reply) => {
    const box = await sandboxFor(req, req.params.id);
    await box.renewLifetime(parseTimeout(req.body, true) * 1000);
    return reply.code(204).send();
  });

  api.delete('/sandboxes/:id', async (req: FastifyRequest<{ Params: { id: string } }>, reply) => {
    const box = await sandboxFor(req, req.params.id);
    await ctx.manager.remove(box.id).catch((err: unknown) => {
      // Removed meanwhile (a second kill, the cleanup loop): e2b answers that as a miss.
      if (err instanceof SbxError && err.code === 'not_found') throw notFound(box.id);
      throw err;
    });
    ctx.metrics.removes.inc({ pool: box.pool });
    return reply.code(204).send();
  });

  api.get('/sandboxes/:id', async (req: FastifyRequest<{ Params: { id: string } }>) => {
    const box = await sandboxFor(req, req.params.id);
    return { ...listed(box, await poolsByName()), envdAccessToken: await envdAccessToken(ctx.manager, box.id, requireKey(req.caller).keyId), domain: domain() };
  });

  /** The caller's e2b sandboxes (all owners' for an admin key) matching the metadata filter. */
  async function visible(req: FastifyRequest, metadata: Record<string, string>): Promise<LocalBox[]> {
    const p = requireKey(req.caller);
    const owner = actingOwner(p, undefined);
    const boxes = await ctx.manager.list(owner !== undefined ? { owner } : {});
    return boxes.filter((b) => templateOf(b) !== undefined && Object.entries(metadata).every(([k, v]) => metadataOf(b.labels)[k] === v));
  }

  api.get('/v2/sandboxes', async (req, reply) => {
    const q = parseListQuery(req.query as Record<string, unknown>);
    const boxes = (await visible(req, q.metadata)).filter(
      (b) =>
        q.states.has(stateOf(b)) &&
        (q.template === undefined || templateOf(b) === q.template) &&
        (q.startedAfter === undefined || Date.parse(b.createdAt) >= q.startedAfter),
    );
    const { page, nextToken } = paginate(
      boxes.map((box) => ({ box, startedAt: Date.parse(box.createdAt), id: box.id })),
      q,
    );
    if (nextToken) reply.header('x-next-token', nextToken);
    const pools = await poolsByName();
    return page.map(({ box }) => listed(box, pools));
  });

  // The older list: running sandboxes only, every one in one answer.
  api.get('/sandboxes', async (req) => {
    const query = req.query as Record<string, unknown>;
    const metadata = parseMetadataFilter(typeof query['metadata'] === 'string' ? query['metadata'] : undefined);
    const pools = await poolsByName();
    return (await visible(req, metadata)).filter((b) => stateOf(b) === 'running').map((box) => listed(box, pools));
  });
}
