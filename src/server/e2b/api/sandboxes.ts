/**
 * The e2b sandbox routes over the Manager: a sandbox is an sbx box made through these routes
 * (labelled with its template), policy `session` with no idle timeout and a max lifetime of the
 * sandbox's timeout, renewed from now by setTimeout, connect and resume (box.renewLifetime). Its
 * end removes the box, or pauses it (`autoPause`: maxLifetimeAction `pause`). A pause, at the
 * timeout or asked for, ends the lifetime: a paused sandbox is kept until it is resumed or killed,
 * as e2b keeps it. Other boxes, and another owner's, do not exist here (404).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SbxError } from '../../../errors.js';
import type { LocalBox, PoolInfo } from '../../../sandbox/index.js';
import { actingOwner, mayAccess, requireKey } from '../../auth.js';
import type { ServerContext } from '../../context.js';
import { issueEnvdAccessToken } from '../access-token.js';
import { ENVD_VERSION } from '../envd/version.js';
import { toE2bNetwork } from '../../../sandbox/egress-policy.js';
import { DEFAULT_TIMEOUT_SECONDS, TEMPLATE_LABEL, labelsFor, metadataOf, parseNetworkUpdate, parseNewSandbox, parseTimeout, sandboxSecurity } from './body.js';
import { forkRoutes } from './fork.js';
import type { MetricsSampler } from './metrics.js';
import { cpuCountOf, metricsRoutes } from './metrics.js';
import { TRAFFIC_LABEL, trafficTokenOf } from './traffic.js';
import { paginate, parseListQuery, parseMetadataFilter } from './list.js';
import type { SandboxState } from './list.js';
import { snapshotImage, snapshotRoutes } from './snapshots.js';

/** e2b's clientID is a vestige its SDKs ignore; sbx answers one constant. */
export const CLIENT_ID = 'sbx';
const MIB = 1024 * 1024;

export interface SandboxRoutesOptions {
  /** Template name → image. */
  templates: Record<string, string>;
  /** The operator's `server.e2b.publicTraffic`: ports of sandboxes that do not refuse it are public (traffic.ts). */
  publicTraffic: boolean;
  /** Samples the sandboxes' engine stats for GET /sandboxes/:id/metrics. */
  sampler: MetricsSampler;
}

/** What a create or a connect answers (e2b's `Sandbox`). */
interface SandboxAnswer {
  templateID: string;
  sandboxID: string;
  alias: string;
  clientID: string;
  envdVersion: string;
  envdAccessToken: string;
  /** Sent as `e2b-traffic-access-token` to reach its ports (traffic.ts); null when they are public. */
  trafficAccessToken: string | null;
  /** Where `<port>-<sandboxID>.<domain>` reaches the box: sbx's proxy domain, else null (see docs/e2b.md). */
  domain: string | null;
}

function notFound(id: string): SbxError {
  return new SbxError('not_found', `sandbox '${id}' not found`, { details: { id } });
}

function templateOf(box: LocalBox): string | undefined {
  return box.labels[TEMPLATE_LABEL];
}

export function stateOf(box: LocalBox): SandboxState {
  // A paused box, and one stopped or archived through sbx's own API (connect brings it back), are
  // e2b's "paused"; everything else is running.
  return box.status === 'stopped' || box.status === 'paused' || box.status === 'archived' ? 'paused' : 'running';
}

function endAt(box: LocalBox): number {
  return Date.parse(box.createdAt) + box.maxLifetimeMs;
}

/** e2b's timeout of the deprecated resume route when its body names none (its API's default). */
const RESUME_DEFAULT_TIMEOUT_SECONDS = 15;

/**
 * Before an envd call (use, which resumes a paused box): a sandbox whose lifetime a pause ended
 * gets e2b's default timeout again, so a sandbox resumed by use (e2b's autoResume, which sbx
 * always does) is paused or removed again at its timeout rather than running on without one.
 */
export async function renewEndedLifetime(box: LocalBox): Promise<void> {
  if (templateOf(box) !== undefined && box.policy !== 'persistent' && box.maxLifetimeMs === 0) {
    await box.renewLifetime(DEFAULT_TIMEOUT_SECONDS * 1000);
  }
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
      envdAccessToken: await issueEnvdAccessToken(ctx.manager, box.id, keyId),
      trafficAccessToken: await trafficTokenOf(ctx.manager, box, opts.publicTraffic),
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
      cpuCount: cpuCountOf(pool),
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
    const owner = actingOwner(p, undefined) ?? p.owner;
    // A configured template first, then one of the owner's snapshots by id or name (the library
    // checks the owner again at create); another owner's is the unknown template it is to them.
    const image = Object.hasOwn(opts.templates, s.templateID) ? opts.templates[s.templateID] : await snapshotImage(ctx, s.templateID, owner);
    if (image === undefined) {
      throw new SbxError(
        'not_found',
        `template '${s.templateID}' not found; this server has: ${Object.keys(opts.templates).join(', ') || 'none'}, and the snapshots of owner '${owner}' by id or name`,
        {
          details: { templateID: s.templateID },
        },
      );
    }
    const box = await ctx.manager.create({
      image,
      owner,
      // Public only where the operator allows it and the sandbox did not refuse it (traffic.ts).
      labels: { ...labelsFor(s), [TRAFFIC_LABEL]: opts.publicTraffic && s.allowPublicTraffic !== false ? 'public' : 'token' },
      env: s.envVars,
      // e2b sandboxes live until their timeout, idle or not; setTimeout and connect renew it.
      policy: 'session',
      idleTimeoutMs: 0,
      maxLifetimeMs: s.timeoutSeconds * 1000,
      // autoPause: the timeout freezes it (memory, processes and files kept) and ends its lifetime.
      maxLifetimeAction: s.autoPause ? 'pause' : 'remove',
      // getHost(port) reaches any port a service opens later, through sbx's authenticated proxy,
      // whatever the sandbox may reach itself (`allow_internet_access: false` is egress 'none').
      proxyAllPorts: true,
      networkPolicy: s.networkPolicy,
      ...(await sandboxSecurity(ctx.manager)),
    });
    ctx.metrics.creates.inc({ pool: box.pool });
    opts.sampler.sampleSoon(box);
    return reply.code(201).send(await answer(box, p.keyId));
  };
  api.post('/v2/sandboxes', create);
  api.post('/sandboxes', create);

  /**
   * Connect: a paused sandbox (frozen, or stopped through sbx's own API) is resumed, 201 as e2b
   * answers a resume, else 200. As e2b does on connect, the deadline only ever moves later
   * (setTimeout may shorten it); a paused sandbox has none, so it gets `timeout` from now.
   */
  const connect = async (req: FastifyRequest<{ Params: { id: string } }>, reply: FastifyReply) => {
    const box = await sandboxFor(req, req.params.id);
    const timeoutMs = parseTimeout(req.body, false) * 1000;
    const paused = stateOf(box) === 'paused';
    // The deadline first: a resumed sandbox never runs without one (a pause ended its lifetime).
    if (box.maxLifetimeMs === 0 || Date.now() + timeoutMs > endAt(box)) await box.renewLifetime(timeoutMs);
    if (paused) await box.resume();
    return reply.code(paused ? 201 : 200).send(await answer(box, requireKey(req.caller).keyId));
  };
  api.post('/v2/sandboxes/:id/connect', connect);
  api.post('/sandboxes/:id/connect', connect);

  // Pause: frozen in place (the engine's freezer: memory, processes and files kept, no CPU) and its
  // lifetime over, so the timeout neither kills nor pauses it again; connect or resume renews it.
  // The SDKs' `memory: false` (a filesystem-only snapshot) keeps the memory as well here.
  api.post('/sandboxes/:id/pause', async (req: FastifyRequest<{ Params: { id: string } }>, reply) => {
    const box = await sandboxFor(req, req.params.id);
    // 409 is how e2b says so; the SDKs answer `false` (2.20's Python SDK: the id) rather than raise.
    if (stateOf(box) === 'paused') throw new SbxError('conflict', `sandbox '${box.id}' is already paused`, { details: { id: box.id } });
    await box.pauseAndEndLifetime();
    return reply.code(204).send();
  });

  // The deprecated resume (no SDK of those tested calls it; connect resumes): 201 with the
  // sandbox, 409 when it is not paused, as e2b answers. `autoPause` in its body is ignored: what
  // the timeout does was chosen at create.
  api.post('/sandboxes/:id/resume', async (req: FastifyRequest<{ Params: { id: string } }>, reply) => {
    const box = await sandboxFor(req, req.params.id);
    if (stateOf(box) !== 'paused') throw new SbxError('conflict', `sandbox '${box.id}' is already running`, { details: { id: box.id } });
    await box.renewLifetime(parseTimeout(req.body, false, RESUME_DEFAULT_TIMEOUT_SECONDS) * 1000);
    await box.resume();
    return reply.code(201).send(await answer(box, requireKey(req.caller).keyId));
  });

  snapshotRoutes(api, ctx, { templates: opts.templates, sandboxFor });
  forkRoutes(api, ctx, { sandboxFor, answer, created: (box) => opts.sampler.sampleSoon(box) });
  metricsRoutes(api, ctx, { sampler: opts.sampler, sandboxFor });

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

  /**
   * `sandbox.updateNetwork`: the body is the sandbox's whole egress config, which replaces the old
   * one (box.setNetwork); 204 as e2b answers.
   */
  api.put('/sandboxes/:id/network', async (req: FastifyRequest<{ Params: { id: string } }>, reply) => {
    const box = await sandboxFor(req, req.params.id);
    await box.setNetwork(parseNetworkUpdate(req.body));
    return reply.code(204).send();
  });

  api.get('/sandboxes/:id', async (req: FastifyRequest<{ Params: { id: string } }>) => {
    const box = await sandboxFor(req, req.params.id);
    const { allowInternetAccess, ...network } = toE2bNetwork((await box.info()).networkPolicy);
    return {
      ...listed(box, await poolsByName()),
      allowInternetAccess,
      network,
      envdAccessToken: await issueEnvdAccessToken(ctx.manager, box.id, requireKey(req.caller).keyId),
      domain: domain(),
    };
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
